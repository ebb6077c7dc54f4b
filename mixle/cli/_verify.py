"""``mixle verify PATH``: full checksum verification with a per-shard report."""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add the ``verify`` command."""
    parser = subparsers.add_parser(
        "verify",
        help="Check every header, offset and SHA-256 checksum of a corpus (exit 0 or 1).",
        description=(
            "Read every byte of a corpus and check it against its manifest. Prints one "
            "line per shard, then one per sidecar it names (origins.bin, block_offsets.bin, "
            "document_offsets.bin: each compared with the offsets files), and a note for a "
            "scale sidecar its shape calls for but lacks (add it: mixle sidecars PATH); "
            "exits 0 when everything is intact, 1 when something is corrupt, 2 when PATH "
            "holds no corpus. "
            "Example: mixle verify shards/sample"
        ),
    )
    parser.add_argument("path", help="corpus directory (the one holding manifest.json)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Verify and print; exit 0 when intact, 1 when corrupt, 2 when there is no corpus."""
    from mixle.cli._errors import echo
    from mixle.cli._errors import report as report_error
    from mixle.corpus import ORIGINS_NAME, verify_corpus
    from mixle.errors import CorpusError

    try:
        report = verify_corpus(args.path, raise_errors=False)
    except CorpusError as exc:
        return report_error("verify", exc)
    if args.json:
        echo(json.dumps(report.to_dict(), indent=2))
        return 0 if report.ok else 1
    for error in report.errors:
        echo(f"FAIL  manifest  {type(error).__name__}: {error}")
    for shard in report.shards:
        status = "ok  " if shard.ok else "FAIL"
        line = (
            f"{status}  {shard.tokens}  {shard.num_documents:,} docs  {shard.num_tokens:,} tokens"
        )
        if shard.error is not None:
            line += f"  {type(shard.error).__name__}: {shard.error}"
        echo(line)
    if report.origins_error is not None:
        error = report.origins_error
        echo(f"FAIL  {ORIGINS_NAME}  {type(error).__name__}: {error} (the documents still read)")
    elif report.has_origins:
        echo(f"ok    {ORIGINS_NAME}")
    for item in report.sidecars.values():
        if item["ok"]:
            echo(f"ok    {item['file']}")
        elif not item["present"] and item["recommended"]:
            echo(
                f"note  {item['file']} missing: a corpus of this shape plans faster with it "
                f"(add it: mixle sidecars {args.path})"
            )
    bad = sum(not shard.ok for shard in report.shards) + len(report.errors)
    bad += report.origins_error is not None
    verdict = "intact" if report.ok else f"CORRUPT ({bad} problem{'s' * (bad != 1)})"
    echo(f"{report.location}: {len(report.shards)} shards, {verdict}")
    return 0 if report.ok else 1
