"""``mixle export CORPUS OUTPUT --format megatron|litdata``: hand a corpus to other trainers.

A thin wrapper over :func:`mixle.corpus.export.export_corpus`.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["register"]

_DESCRIPTION = """\
Write the corpus at CORPUS into the new directory OUTPUT as a Megatron-LM indexed
dataset (one PREFIX.bin/.idx pair per shard, or one with --single; token files are
hard-linked, so only the small .idx files are written) or as a LitData dataset
(TokensLoader chunks + index.json). OUTPUT appears complete or not at all.
"""

_EXAMPLES = """\
examples:
  mixle export corpus/ megatron/ --format megatron            # then --data-path megatron/shard-00000 ...
  mixle export corpus/ megatron/ --format megatron --single   # one prefix: megatron/corpus
  mixle export corpus/ litdata/ --format litdata --block-size 2049
  mixle ingest megatron/ again/ --dtype uint16 --shard-size 256MiB   # round trip: same fingerprint
"""


def register(subparsers: Any) -> None:
    """Add the ``export`` subcommand."""
    from mixle._options import byte_size
    from mixle.corpus import DEFAULT_CHUNK_BYTES, EXPORT_FORMATS

    parser = subparsers.add_parser(
        "export",
        help="Write a corpus as Megatron .bin/.idx or LitData chunks (links, not copies).",
        usage="mixle export [options] CORPUS OUTPUT",
        description=_DESCRIPTION,
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("corpus", metavar="CORPUS", help="corpus directory or URL")
    parser.add_argument("output", metavar="OUTPUT", help="export directory to create")
    parser.add_argument(
        "--format",
        choices=EXPORT_FORMATS,
        default="megatron",
        help="megatron (.bin/.idx prefixes) or litdata (TokensLoader chunks); default megatron",
    )
    parser.add_argument(
        "--single", action="store_true", help="megatron: one prefix for the whole corpus"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace OUTPUT if it is a previous export"
    )
    parser.add_argument(
        "--block-size",
        type=int,
        default=None,
        help="litdata: the TokensLoader block size; chunks hold whole blocks, so none is cut",
    )
    parser.add_argument(
        "--chunk-bytes",
        type=byte_size,
        default=DEFAULT_CHUNK_BYTES,
        help="litdata: target token bytes per chunk (default 64MiB, at most 1GiB)",
    )
    parser.add_argument("--cache-dir", default=None, help="shard cache for a remote or zarr CORPUS")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Export and print what was written; exit 0 on success, 2 on a corpus error."""
    from mixle.cli._errors import report
    from mixle.corpus import export_corpus
    from mixle.errors import CorpusError

    options = {} if args.cache_dir is None else {"cache_dir": args.cache_dir}
    try:
        summary = export_corpus(
            args.corpus,
            args.output,
            args.format,
            single=args.single,
            overwrite=args.overwrite,
            block_size=args.block_size,
            chunk_bytes=args.chunk_bytes,
            **options,
        )
    except CorpusError as exc:
        return report("export", exc)
    what = (
        f"{len(summary.prefixes)} Megatron prefixes"
        if summary.format == "megatron"
        else f"{sum(name.startswith('chunk-') for name in summary.files)} LitData chunks"
    )
    print(
        f"{summary.output}: {what}, {summary.documents:,} documents, {summary.tokens:,} "
        f"{summary.dtype} tokens; {summary.linked_bytes:,} token bytes linked, "
        f"{summary.copied_bytes:,} copied, {summary.index_bytes:,} index bytes written "
        f"in {summary.seconds:.2f} s"
    )
    if summary.format == "megatron":
        print(f"prefixes: {' '.join(summary.prefixes)}")
    if summary.format == "megatron" and not args.single:
        import os

        # A uint32 corpus is exported as int32; ingest reads each prefix into one shard
        # when --shard-size holds the largest one.
        dtype = {"int32": "uint32"}.get(summary.dtype, summary.dtype)
        largest = max((os.path.getsize(p + ".bin") for p in summary.prefixes), default=1)
        print(
            f"round trip (same fingerprint): mixle ingest {summary.output} NEW_CORPUS "
            f"--dtype {dtype} --shard-size {max(largest, 1)}"
        )
    return 0
