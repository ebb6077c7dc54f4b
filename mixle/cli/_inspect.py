"""``mixle inspect PATH``: shards, documents, tokens, dtype, bytes, length percentiles."""

from __future__ import annotations

import argparse
import json
import sys
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
    parser.add_argument(
        "path", nargs="?", default=None, help="corpus directory (the one holding manifest.json)"
    )
    mixture = parser.add_argument_group(
        "mixtures", "mixle inspect --mixture mix.toml --steps N: the budget table, no training"
    )
    mixture.add_argument("--mixture", metavar="MIX.toml", help="a mixture file (TOML or JSON)")
    mixture.add_argument("--steps", type=int, help="run length in optimizer steps")
    mixture.add_argument("--block", type=int, default=64, help="context length (default 64)")
    mixture.add_argument("--batch-size", type=int, default=16, help="rows per step per rank (16)")
    mixture.add_argument("--world-size", type=int, default=1, help="ranks (default 1)")
    mixture.add_argument("--seed", type=int, default=0, help="shuffle seed (0)")
    mixture.add_argument("--boundary-id", type=int, default=None, help="token between documents")
    mixture.add_argument(
        "--objective",
        choices=("packed", "windows"),
        default="packed",
        help="packed rows (default) or TokenStream windows (one target each)",
    )
    packing = parser.add_argument_group(
        "packing",
        "mixle inspect CORPUS --packing best_fit --block N: documents cut, padding and rows "
        "per epoch of concatenate-and-chunk and best-fit, side by side (uses --block, --seed, "
        "--boundary-id; reads lengths only)",
    )
    packing.add_argument(
        "--packing",
        choices=("concatenate", "best_fit"),
        help="compare the two packings at --block (either name prints both)",
    )
    packing.add_argument(
        "--window-documents",
        type=int,
        default=None,
        help="best-fit window in documents (default 16384)",
    )
    packing.add_argument(
        "--truncate", action="store_true", help="best-fit truncates documents longer than a row"
    )
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
    if args.mixture is not None or args.path is None:
        return _run_mixture(args)
    from mixle.cli._errors import echo, report
    from mixle.corpus import describe_corpus, open_corpus, plot_lengths
    from mixle.errors import CorpusError

    try:
        documents = open_corpus(args.path)  # reads the manifest and headers only
        if args.plot:  # before the scan: plot_lengths checks the path before reading
            plot_lengths(documents, args.plot)
        summary = describe_corpus(documents)
        packings = None if args.packing is None else _compare(documents.lengths, args)
    except CorpusError as exc:
        return report("inspect", exc)
    if packings is not None:
        summary["packing"] = {entry.packing: entry.to_dict() for entry in packings}
    if args.json:
        echo(json.dumps(summary, indent=2))
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
        f"sidecars    {_sidecars_line(summary['sidecars'], args.path)}",
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
    if packings is not None:
        lines.extend(_packing_lines(packings, args.block))
    echo("\n".join(lines))
    return 0


def _sidecars_line(status: dict[str, Any], path: str) -> str:
    """``block_offsets.bin, document_offsets.bin`` present, and any recommended one
    missing with the command that adds it."""
    present = [item["file"] for item in status.values() if item["present"]]
    missing = [
        item["file"] for item in status.values() if item["recommended"] and not item["present"]
    ]
    line = ", ".join(present) if present else "none"
    if missing:
        line += f" (missing, recommended: {', '.join(missing)}; add: mixle sidecars {path})"
    return line


def _compare(lengths: Any, args: argparse.Namespace) -> Any:
    """Both packings' figures (:func:`mixle.data.compare_packings`) for the options."""
    from mixle.data import compare_packings, set_gather_backend

    set_gather_backend("auto")  # the compiled best-fit kernel when numba is installed
    return compare_packings(
        lengths,
        block=args.block,
        seed=args.seed,
        has_boundary=args.boundary_id is not None,
        window_documents=args.window_documents,
        truncate=args.truncate,
    )


def _packing_lines(packings: Any, block: int) -> list[str]:
    """The side-by-side table of :func:`_compare`'s figures."""
    concatenate, best_fit = packings
    rows = [
        ("rows/epoch", f"{concatenate.rows:,}", f"{best_fit.rows:,}"),
        (
            "docs cut",
            f"{concatenate.cut_documents:,} ({concatenate.cut_fraction:.2%})",
            f"{best_fit.cut_documents:,} ({best_fit.cut_fraction:.2%})",
        ),
        (
            "padding",
            f"{concatenate.padding_fraction:.3%}",
            f"{best_fit.padding_fraction:.3%}",
        ),
        ("trained", f"{concatenate.trained_fraction:.3%}", f"{best_fit.trained_fraction:.3%}"),
    ]
    if best_fit.truncated_tokens:
        rows.append(("truncated", "0 tokens", f"{best_fit.truncated_tokens:,} tokens"))
    lines = [
        f"packing     block {block}: {concatenate.longer_than_row:,} documents are longer "
        "than a row",
        f"  {'':<12}{'concatenate':>24}{'best_fit':>24}",
    ]
    lines.extend(f"  {name:<12}{left:>24}{right:>24}" for name, left, right in rows)
    return lines


def _run_mixture(args: argparse.Namespace) -> int:
    """Print the mixture's budget table for ``--steps``; 2 on a bad file, 1 over budget."""
    from mixle.cli._errors import echo, report
    from mixle.errors import CorpusError
    from mixle.train import budget_table, open_mixture

    if args.mixture is None or args.path is not None or args.steps is None:
        print(
            "mixle inspect: give a corpus PATH, or --mixture MIX.toml --steps N.", file=sys.stderr
        )
        return 2
    try:
        mixture, _ = open_mixture(
            args.mixture,
            block=args.block,
            batch_size=args.batch_size,
            world_size=args.world_size,
            seed=args.seed,
            boundary_id=args.boundary_id,
            objective=args.objective,
            # What the file's block_schedule fractions are of: the run's tokens.
            total_tokens=args.steps * args.world_size * args.batch_size * args.block,
        )
        rows = mixture.run_rows(steps=args.steps)
        budget = mixture.budget(steps=args.steps)
    except (CorpusError, ValueError, OSError) as exc:
        return report("inspect", exc)
    unit = "rows" if args.objective == "packed" else "windows"
    blocks = mixture.blocks
    shape = (
        f"{mixture.global_batch_size} {unit} x block {mixture.block}"
        if blocks is None
        else " then ".join(
            f"{blocks.batch_sizes[p] * mixture.world_size} {unit} x block {b}"
            for p, b in enumerate(blocks.blocks)
        )
        + f" (block_schedule, from tokens {', '.join(f'{t:,}' for t in blocks.token_starts)})"
    )
    print(f"mixture {args.mixture}: {args.steps:,} steps x {shape}")
    echo(budget_table(budget, rows))
    inexact = [r for r in mixture.rounding() if r["error"]]
    for entry in inexact:
        print(
            f"weight of {entry['source']} from row {entry['start_row']}: {entry['weight']:.6g} "
            f"rounded to {entry['used']} (error {entry['error']:+.2e})"
        )
    try:
        mixture.check_budget(steps=args.steps)
    except CorpusError as exc:
        print(f"mixle inspect: {exc}", file=sys.stderr)
        return 1
    return 0
