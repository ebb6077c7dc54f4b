"""Arguments shared by the commands that write a corpus (``ingest``, ``merge``).

One place for what both parse the same way: the subcommand's parser, the positional
``PATH...`` list split into inputs and the output, ``--storage-option KEY=VALUE``
(fsspec options for URLs), ``--overwrite`` and ``--quiet``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = [
    "add_command",
    "add_common",
    "parse_storage_option",
    "split_paths",
    "storage_options",
    "usage_error",
]

_STORAGE_HELP = (
    "an fsspec option for URL inputs and outputs, repeatable; the value is JSON when it "
    "parses (numbers, true, objects), else a string, and a dotted KEY nests "
    "(e.g. --storage-option client_kwargs.endpoint_url=http://127.0.0.1:9000 "
    "--storage-option anon=false). Credentials come from the usual cloud configuration"
)


def add_command(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    *,
    help_text: str,
    usage: str,
    description: str,
    epilog: str,
    paths_help: str,
) -> argparse.ArgumentParser:
    """Add subcommand ``name`` with its help texts and the positional ``PATH...`` list."""
    parser = subparsers.add_parser(
        name,
        help=help_text,
        usage=usage,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help=paths_help)
    return parser


def add_common(parser: argparse.ArgumentParser, *, overwrite_help: str, quiet_help: str) -> None:
    """Add ``--storage-option``, ``--overwrite`` and ``--quiet``/``-q``."""
    parser.add_argument(
        "--storage-option",
        action="append",
        type=parse_storage_option,
        default=[],
        metavar="KEY=VALUE",
        dest="storage_option",
        help=_STORAGE_HELP,
    )
    parser.add_argument("--overwrite", action="store_true", help=overwrite_help)
    parser.add_argument("--quiet", "-q", action="store_true", help=quiet_help)


def parse_storage_option(text: str) -> tuple[list[str], Any]:
    """Parse ``KEY=VALUE`` into ``(key path, value)`` (an argparse ``type``).

    Raises
    ------
    argparse.ArgumentTypeError
        No ``=``, or an empty key (or key part).
    """
    key, sep, raw = text.partition("=")
    parts = key.split(".")
    if not sep or not all(part.strip() for part in parts):
        raise argparse.ArgumentTypeError(
            f"expected KEY=VALUE (e.g. anon=true or client_kwargs.endpoint_url=http://host:9000). "
            f"Got {text!r} instead."
        )
    try:
        value: Any = json.loads(raw)
    except ValueError:
        value = raw
    return [part.strip() for part in parts], value


def storage_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """The ``--storage-option`` values as one (nested) dict; ``None`` when none given.

    Raises
    ------
    ArgumentError
        A key is given both as a value and as a group of nested keys.
    """
    from mixle.errors import ArgumentError

    if not args.storage_option:
        return None
    options: dict[str, Any] = {}
    for parts, value in args.storage_option:
        level = options
        for part in parts[:-1]:
            level = level.setdefault(part, {})
            if not isinstance(level, dict):
                raise ArgumentError(
                    f"--storage-option {'.'.join(parts)}: {part} already has a value."
                )
        level[parts[-1]] = value
    return options


def split_paths(paths: list[str], *, inputs: int) -> tuple[list[str], str] | None:
    """``(inputs, output)`` when ``paths`` holds at least ``inputs`` inputs and the
    output, else ``None``."""
    if len(paths) < inputs + 1:
        return None
    *sources, output = paths
    return sources, output


def usage_error(command: str, problem: str) -> int:
    """Print ``problem`` as ``mixle COMMAND: error: ...`` and return exit status 2."""
    print(f"mixle {command}: error: {problem}", file=sys.stderr)
    return 2
