"""``mixle convert PATH OUT --layout zarr``: rewrite a corpus in another layout or place."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add the ``convert`` command."""
    parser = subparsers.add_parser(
        "convert",
        help="Write a corpus as zarr (compressed) or raw, to a directory or URL.",
        description=(
            "Rewrite the corpus at PATH into OUT. OUT may be a local directory or an fsspec "
            "URL (s3://bucket/prefix, ...); data is written first and the manifest last. "
            "The manifest and fingerprint are unchanged. Examples: "
            "mixle convert shards/sample sample.zarr --layout zarr; "
            "mixle convert sample.zarr s3://bucket/sample --layout raw"
        ),
    )
    parser.add_argument("path", help="source corpus (directory, zarr group or URL)")
    parser.add_argument("out", help="destination directory or URL")
    parser.add_argument(
        "--layout", choices=("zarr", "raw"), default="zarr", help="layout of OUT (default zarr)"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace a corpus at OUT")
    parser.add_argument(
        "--cache-dir", default=None, help="shard cache for a remote or zarr PATH (default ~/.cache)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Convert and print the sizes; exit 0 on success, 2 on a corpus error."""
    from mixle.cli._errors import echo, report
    from mixle.corpus import Manifest, convert_corpus, stored_bytes
    from mixle.errors import CorpusError

    source_options = {} if args.cache_dir is None else {"cache_dir": args.cache_dir}
    try:
        manifest = convert_corpus(
            args.path,
            args.out,
            layout=args.layout,
            source_options=source_options,
            overwrite=args.overwrite,
        )
        written = stored_bytes(args.out)
    except CorpusError as exc:
        return report("convert", exc)
    parsed = Manifest.from_dict(manifest, args.out)
    raw = sum(entry.tokens_bytes + entry.offsets_bytes for entry in parsed.shards)
    ratio = written / raw if raw else 1.0
    echo(
        f"{args.out}: {args.layout} layout, {len(parsed.shards)} shards, "
        f"{parsed.num_documents:,} documents, {parsed.num_tokens:,} tokens; "
        f"{written:,} bytes stored for {raw:,} bytes of shard data (ratio {ratio:.3f})"
    )
    return 0
