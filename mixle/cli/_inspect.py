"""``mixle inspect PATH``: shards, documents, tokens, dtype, bytes, length percentiles."""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add the ``inspect`` command."""
    parser = subparsers.add_parser(
        "inspect",
        help="Summarize a corpus: shards, documents, tokens, dtype, bytes, length percentiles.",
        description=(
            "Summarize a sharded corpus from its manifest, headers and offsets (no token "
            "data is read). Example: mixle inspect shards/sample --plot lengths.png"
        ),
    )
    parser.add_argument("path", help="corpus directory (the one holding manifest.json)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument(
        "--plot", metavar="FILE.png", help="also save a document-length histogram (matplotlib)"
    )
    parser.add_argument("--shards", action="store_true", help="list every shard")
    parser.set_defaults(func=run)


def _human(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{size} B"
        value /= 1024
    return f"{size} B"


def run(args: argparse.Namespace) -> int:
    """Print the summary; exit 0, or 2 when the corpus cannot be opened."""
    from mixle.cli._errors import report
    from mixle.corpus import check_plot_path, describe_corpus, open_corpus, plot_lengths
    from mixle.errors import CorpusError

    try:
        if args.plot:  # before reading anything: a typo must not cost a full scan
            check_plot_path(args.plot)
        documents = open_corpus(args.path)
        summary = describe_corpus(documents)
        if args.plot:
            plot_lengths(documents, args.plot)
    except CorpusError as exc:
        return report("inspect", exc)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    length = summary["length"]
    lines = [
        f"corpus      {summary['location']}",
        f"format      version {summary['format_version']}, dtype {summary['dtype']}, "
        f"vocab_size {summary['vocab_size']}",
        f"shards      {summary['num_shards']:,}",
        f"documents   {summary['num_documents']:,} ({summary['empty_documents']:,} empty)",
        f"tokens      {summary['num_tokens']:,}",
        f"bytes       {_human(summary['total_bytes'])} "
        f"(tokens {_human(summary['tokens_bytes'])}, offsets {_human(summary['offsets_bytes'])})",
        f"fingerprint {summary['fingerprint']}",
    ]
    if length["mean"] is not None:
        percentiles = "  ".join(f"{key}={length[key]:g}" for key in length if key.startswith("p"))
        lines.append(f"length      mean={length['mean']:.1f}  {percentiles}")
    if args.shards:
        for shard in summary["shards"]:
            lines.append(
                f"  {shard['tokens']:<24} {shard['num_documents']:>12,} docs "
                f"{shard['num_tokens']:>16,} tokens {_human(shard['bytes']):>12}"
            )
    if args.plot:
        lines.append(f"histogram   {args.plot}")
    print("\n".join(lines))
    return 0
