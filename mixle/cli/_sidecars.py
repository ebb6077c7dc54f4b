"""``mixle sidecars PATH``: give an existing corpus the scale sidecars it lacks.

A thin wrapper over :func:`mixle.corpus.add_sidecars` (and, with ``--check``,
:func:`mixle.corpus.sidecar_status`).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from mixle.cli._corpus_args import add_storage_option, storage_options

__all__ = ["register"]

_DESCRIPTION = """\
Write the scale sidecars of the corpus at PATH from its own offsets files, then
republish its manifest naming them (written last, atomically). Shards and fingerprint
are unchanged: every stream, state and plan of the corpus stays valid.

  block_offsets.bin     the token offset at every 4096th document; a corpus of 2^24
                        documents or more plans an epoch from it (docs/format.md 16)
  document_offsets.bin  every document's token offset in one file; a corpus of 1,024
                        shards or more, of fewer than 4,096 documents each on average,
                        plans without opening every small offsets file (section 17)

Every writer (CorpusWriter, mixle ingest with any executor, workers or task array,
mixle merge) writes them itself by the same rule; this command is for corpora written
before, or copied without them. Without flags it adds those the corpus's shape calls
for and keeps those it has; --block-offsets / --document-offsets write one whatever
the shape (replacing it), --no-block-offsets / --no-document-offsets remove one.
"""

_EXAMPLES = """\
examples:
  mixle sidecars corpus/                       # add what a corpus of this shape should have
  mixle sidecars corpus/ --check               # say what it has and lacks; exit 1 if it lacks one
  mixle sidecars corpus/ --block-offsets       # write block_offsets.bin even for a small corpus
  mixle sidecars s3://bucket/corpus --storage-option client_kwargs.endpoint_url=http://127.0.0.1:9000
"""


def register(subparsers: Any) -> None:
    """Add the ``sidecars`` command."""
    parser = subparsers.add_parser(
        "sidecars",
        help="Add block_offsets.bin / document_offsets.bin to an existing corpus (or --check).",
        usage="mixle sidecars [options] PATH",
        description=_DESCRIPTION,
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("path", metavar="PATH", help="corpus directory or URL")
    for name, file in (
        ("block-offsets", "block_offsets.bin"),
        ("document-offsets", "document_offsets.bin"),
    ):
        parser.add_argument(
            f"--{name}",
            action=argparse.BooleanOptionalAction,
            default=None,
            help=f"write {file} (--no-{name}: remove it); default: as the corpus's shape calls for",
        )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing: list each sidecar as present, missing (recommended) or not "
        "needed; exit 1 when a recommended one is missing",
    )
    add_storage_option(
        parser,
        help_text="fsspec option for a URL PATH (e.g. client_kwargs.endpoint_url=http://127.0.0.1:9000)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Add (or check) and print; exit 0, 1 when ``--check`` finds one missing, 2 on error."""
    from mixle.cli._errors import echo, report
    from mixle.corpus import add_sidecars, open_corpus, sidecar_status
    from mixle.errors import ArgumentError, CorpusError

    options = storage_options(args)
    try:
        if args.check:
            if args.block_offsets is not None or args.document_offsets is not None:
                raise ArgumentError(
                    "--check writes nothing: give it without --block-offsets / --document-offsets."
                )
            documents = open_corpus(args.path, storage_options=options)
            status = sidecar_status(documents.parsed_manifest)
            missing = [
                item["file"]
                for item in status.values()
                if item["recommended"] and not item["present"]
            ]
            if args.json:
                echo(
                    json.dumps(
                        {"location": documents.location, "sidecars": status, "missing": missing},
                        indent=2,
                    )
                )
            else:
                for item in status.values():
                    echo(f"{_state(item):<22}{item['file']}")
                if missing:
                    echo(f"add them with: mixle sidecars {args.path}")
            return 1 if missing else 0
        result = add_sidecars(
            args.path,
            block_offsets=args.block_offsets,
            document_offsets=args.document_offsets,
            storage_options=options,
        )
    except CorpusError as exc:
        return report("sidecars", exc)
    if args.json:
        echo(json.dumps(result, indent=2))
        return 0
    for name in result["written"]:
        echo(f"wrote    {name}")
    for name in result["removed"]:
        echo(f"removed  {name}")
    if not result["written"] and not result["removed"]:
        echo(f"{args.path}: nothing to do (it has every sidecar its shape calls for)")
    return 0


def _state(item: dict[str, Any]) -> str:
    if item["present"]:
        return "present"
    return "MISSING (recommended)" if item["recommended"] else "not needed"
