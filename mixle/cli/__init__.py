"""The ``mixle`` command line: a thin wrapper over library calls.

Each subcommand lives in its own module ``mixle.cli._<name>`` exposing
``register(subparsers) -> None``, which adds its parser and sets ``func`` (a callable
taking the parsed namespace and returning an exit code). Modules are imported only
when their command runs, so ``mixle --help`` stays fast. Any error a command does
not handle itself is printed as one line with exit status 2 (see ``_errors``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from mixle.cli._errors import debugging, report

__all__ = ["main"]

# name -> (module, one-line help). Keep sorted by name.
_COMMANDS: dict[str, tuple[str, str]] = {
    "convert": (
        "mixle.cli._convert",
        "Write a corpus as zarr (compressed) or raw, to a directory or URL.",
    ),
    "export": ("mixle.cli._export", "Write a corpus as Megatron .bin/.idx or LitData chunks."),
    "ingest": ("mixle.cli._ingest", "Convert token files or text into a sharded corpus."),
    "inspect": (
        "mixle.cli._inspect",
        "Summarize a corpus: shards, documents, tokens, dtype, bytes, length percentiles.",
    ),
    "merge": (
        "mixle.cli._merge",
        "Combine corpora into one (hard links / server-side copies, no token bytes read).",
    ),
    "show": (
        "mixle.cli._show",
        "Show the rows a mixle train run trained on at step N: documents, origins, text.",
    ),
    "sidecars": (
        "mixle.cli._sidecars",
        "Add block_offsets.bin / document_offsets.bin to an existing corpus (or --check).",
    ),
    "train": (
        "mixle.cli._train",
        "Train the streaming transformer on a corpus; crash-safe checkpoints, exact resume.",
    ),
    "verify": (
        "mixle.cli._verify",
        "Check every header, offset and SHA-256 checksum of a corpus (exit 0 or 1).",
    ),
    "where": (
        "mixle.cli._where",
        "List every step, rank and row in which a mixle train run trained on a document.",
    ),
}


def _build_parser(selected: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mixle",
        description=(
            "Ingest tokenized documents into a sharded memory-mapped corpus, inspect and "
            "verify it, and stream it into language-model training."
        ),
        epilog="Run `mixle COMMAND --help` for the options and examples of each command.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in _COMMANDS.items():
        if name == selected:
            module = importlib.import_module(module_name)
            module.register(subparsers)
        else:
            subparsers.add_parser(name, help=help_text)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``mixle`` command with ``argv`` (default: ``sys.argv[1:]``); return the exit code.

    Parsing runs under the same handler as the command: an argparse ``type`` function
    that raises something argparse does not turn into a usage error (a
    ``RecursionError``, an ``OverflowError``) is still one line and exit 2.
    """
    args_list = list(sys.argv[1:] if argv is None else argv)
    selected = next((arg for arg in args_list if arg in _COMMANDS), None)
    try:
        parser = _build_parser(selected)
        args = parser.parse_args(args_list)
        if args.command is None:
            parser.print_help()
            return 2
        return int(args.func(args))
    except Exception as exc:  # bad input must never end in a traceback
        if debugging():
            raise
        return report(selected or "", exc)


if __name__ == "__main__":
    raise SystemExit(main())
