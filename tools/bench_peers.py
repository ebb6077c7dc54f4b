"""Peer comparison users can rerun: mixle against Megatron-core, LitData and MosaicML MDS.

One synthetic corpus (uint16 ids, geometric document lengths) is generated in memory and
written in every installed format; then, in interleaved rounds (the order rotated every
round; medians reported), the same run measures:

* **write** from an in-memory list of documents, as a ratio to ``np.concatenate`` +
  ``tofile`` of the same documents (no fsync anywhere: mixle writes with
  ``durable=False``);
* **random document read**, microseconds per document, as a ratio to the floor: a raw
  ``np.memmap`` sliced with the offsets already in hand;
* **packed rows and windows**: int64 rows of ``block + 1`` tokens in batches, context
  tokens per second, as a ratio to the floor: sequential per-row slices of an
  ``np.memmap`` over the same bytes (the row-slice floor of ``tools/bench_token_stream.py``);
  the one-slice-per-batch floor of ``tools/bench_stream.py`` is shown as a reference row.

After the timed rounds every method runs once more with its memory measured: the peak
RSS (``VmHWM``, reset through ``/proc/self/clear_refs`` before the pass) and the private
memory (``RssAnon`` sampled by a thread) it adds over the process's state before the pass.
Peak RSS includes file-backed pages of mapped corpus files; ``RssAnon`` does not.

A peer that is not installed is skipped with the pip line that installs it without
replacing the pinned CPU torch. Results: a markdown table (printed and written to
``--table``), the same figures as JSON (``--json``) and a bar chart (``--png``).

    python -m tools.bench_peers                    # 100M tokens / 200k documents, a few minutes
    python -m tools.bench_peers --quick            # the CI smoke run (under a minute)
    python -m tools.bench_peers --png docs/peers.png --table /tmp/peers.md
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import shutil
import threading
import time
import warnings
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tools._memory import status_kib
from tools._peer_methods import (
    DISTRIBUTIONS,
    INSTALL,
    VOCAB,
    Corpus,
    Method,
    close_mds,
    installed,
    read_methods,
    row_methods,
    write_methods,
)


# -- the corpus --------------------------------------------------------------------------
def make_corpus(tokens: int, num_documents: int, seed: int, work: Path) -> Corpus:
    """``num_documents`` documents of geometric length summing to exactly ``tokens``."""
    rng = np.random.default_rng(seed)
    lengths = rng.geometric(num_documents / tokens, size=num_documents).astype(np.int64)
    lengths = np.maximum(1, np.round(lengths * (tokens / lengths.sum()))).astype(np.int64)
    lengths[-1] += tokens - int(lengths.sum())  # absorb the rounding in the last document
    if lengths[-1] < 1:
        raise SystemExit(f"--tokens {tokens} is too few for --documents {num_documents}")
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    flat = rng.integers(0, VOCAB, size=tokens, dtype=np.uint16)
    documents = [flat[offsets[i] : offsets[i + 1]] for i in range(num_documents)]
    return Corpus(offsets, documents, work)


# -- memory ------------------------------------------------------------------------------
def measure_memory(run: Callable[[], object]) -> tuple[float, float]:
    """Run ``run`` once; return (peak RSS growth, RssAnon growth) in MB over the start."""
    gc.collect()
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # reset VmHWM (peak RSS) to the current RSS
    rss_before, anon_before = status_kib("VmRSS"), status_kib("RssAnon")
    highest = [anon_before]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.002):
            highest[0] = max(highest[0], status_kib("RssAnon"))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        run()
    finally:
        done.set()
        sampler.join()
    highest[0] = max(highest[0], status_kib("RssAnon"))
    return (status_kib("VmHWM") - rss_before) / 1024, (highest[0] - anon_before) / 1024


# -- running -------------------------------------------------------------------------------
def run_rounds(
    methods: list[Method], rounds: int, count: int, budget: float, *, warm_up: bool = True
) -> None:
    """Interleaved rounds: each method does ``count`` units or stops after ``budget`` s.

    The order rotates every round, so no method always runs right after the same one.
    """
    for method in methods:  # build, then warm up: page cache, lazy opens, index builds
        method.step = method.make()
        if warm_up:
            timed(method.step, max(1, count // 10), budget)
    for round_number in range(rounds):
        shift = round_number % len(methods)
        for method in methods[shift:] + methods[:shift]:
            assert method.step is not None
            units, seconds = timed(method.step, count, budget)
            method.units.append(units)
            method.seconds.append(seconds)


def timed(step: Callable[[], int], count: int, budget: float) -> tuple[int, float]:
    units, done = 0, 0
    start = time.perf_counter()
    while done < count:
        units += step()
        done += 1
        if done % 8 == 0 and time.perf_counter() - start > budget:
            break
    return units, time.perf_counter() - start


def measure_all_memory(methods: list[Method], count: int, budget: float) -> None:
    """Build each method afresh and run it once, measuring what it maps and allocates."""
    for method in methods:
        method.step = None  # unmap what the timed rounds touched
        method.memory = measure_memory(functools.partial(run_fresh, method, count, budget))


def run_fresh(method: Method, count: int, budget: float) -> tuple[int, float]:
    return timed(method.make(), count, budget)


# -- reporting -----------------------------------------------------------------------------
GROUPS = {
    "write": ("Write from an in-memory list", "M tokens/s"),
    "read": ("Random document read", "µs/document"),
    "rows": ("Packed rows and random windows (int64 rows of block + 1)", "M tokens/s"),
}


def results(methods: list[Method]) -> list[dict[str, Any]]:
    rows = []
    for group in GROUPS:
        members = [m for m in methods if m.group == group]
        if not members:
            continue
        floor = next(m for m in members if m.kind == "floor").rate()
        for method in members:
            rate = method.rate()
            shown = 1e6 / rate if group == "read" else rate / 1e6
            peak, private = method.memory if method.memory else (float("nan"), float("nan"))
            rows.append(
                {
                    "group": group,
                    "method": method.name,
                    "what": method.what,
                    "kind": method.kind,
                    "value": shown,
                    "unit": GROUPS[group][1],
                    "ratio": rate / floor,
                    "rounds": len(method.seconds),
                    "peak_rss_mb": peak,
                    "rss_anon_mb": private,
                }
            )
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| measure | method | what | figure | × floor | peak RSS +MB | RssAnon +MB |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        name = f"**{row['method']}**" if row["kind"] == "mixle" else row["method"]
        lines.append(
            f"| {row['group']} | {name} | {row['what']} | {row['value']:,.2f} {row['unit']} "
            f"| {row['ratio']:.2f} | {row['peak_rss_mb']:.0f} | {row['rss_anon_mb']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def chart(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [g for g in GROUPS if any(r["group"] == g for r in rows)]
    heights = [sum(r["group"] == g for r in rows) for g in groups]
    figure, axes = plt.subplots(
        len(groups),
        1,
        figsize=(9, 1.2 + 0.42 * sum(heights)),
        gridspec_kw={"height_ratios": heights},
        squeeze=False,
    )
    colours = {"floor": "#888888", "reference": "#bbbbbb", "mixle": "#1f77b4", "peer": "#ff7f0e"}
    for axis, group in zip(axes[:, 0], groups, strict=True):
        members = [r for r in rows if r["group"] == group][::-1]
        ratios = [r["ratio"] for r in members]
        axis.barh(
            [r["method"] for r in members], ratios, color=[colours[r["kind"]] for r in members]
        )
        for y, ratio in enumerate(ratios):
            axis.text(ratio, y, f" {ratio:.2f}x", va="center", fontsize=8)
        axis.axvline(1.0, color="black", linewidth=0.8)
        axis.set_xlim(0, max(ratios) * 1.2)
        axis.set_title(f"{GROUPS[group][0]}: × floor (higher is faster)", fontsize=10)
        axis.tick_params(axis="y", labelsize=8)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def versions(peers: set[str]) -> dict[str, str]:
    found = {"numpy": np.__version__, "torch": torch.__version__}
    found.update({DISTRIBUTIONS[p]: version(DISTRIBUTIONS[p]) for p in sorted(peers)})
    return found


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/peers-bench"))
    parser.add_argument("--tokens", type=int, default=100_000_000, help="uint16 tokens")
    parser.add_argument("--documents", type=int, default=200_000)
    parser.add_argument("--block", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--write-rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=2000, help="batches per timed measurement")
    parser.add_argument("--reads", type=int, default=200_000, help="reads per timed measurement")
    parser.add_argument("--budget", type=float, default=2.0, help="seconds cap per measurement")
    parser.add_argument("--peers", default="megatron,litdata,mds", help="comma-separated subset")
    parser.add_argument("--table", type=Path, default=Path("peers.md"))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--png", type=Path, default=Path("peers.png"))
    parser.add_argument("--keep", action="store_true", help="keep the written corpora")
    parser.add_argument(
        "--quick", action="store_true", help="2M tokens, 2 rounds: the CI smoke run"
    )
    args = parser.parse_args()
    if args.quick:
        args.tokens, args.documents, args.rounds, args.write_rounds = 2_000_000, 4_000, 2, 1
        args.batches, args.reads, args.budget = 20, 2_000, 0.3
    requested = {p for p in args.peers.split(",") if p}
    unknown = requested - set(INSTALL)
    if unknown:
        parser.error(f"--peers: unknown {sorted(unknown)}; choose from {sorted(INSTALL)}")
    warnings.filterwarnings("ignore")  # peers warn at import (no Transformer Engine, ...)
    peers = {p for p in sorted(requested) if installed(p)}
    work = args.workdir
    load_before = os.getloadavg()[0]
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        started = time.perf_counter()
        corpus = make_corpus(args.tokens, args.documents, seed=0, work=work)
        print(
            f"corpus: {corpus.num_tokens:,} uint16 tokens, {args.documents:,} documents; "
            f"peers: {', '.join(sorted(peers)) or 'none'}"
        )
        methods = write_methods(corpus, peers)
        run_rounds(methods, args.write_rounds, 1, float("inf"), warm_up=False)
        measure_all_memory(methods, 1, float("inf"))
        print(f"writes done ({time.perf_counter() - started:.0f} s)")
        corpus.documents = []  # the readers below see files only
        gc.collect()
        indices = np.random.default_rng(1).integers(0, args.documents, args.reads).tolist()
        reads = read_methods(corpus, peers, indices)
        run_rounds(reads, args.rounds, args.reads, args.budget)
        measure_all_memory(reads, args.reads, args.budget)
        print(f"reads done ({time.perf_counter() - started:.0f} s)")
        rows = row_methods(corpus, peers, args.block, args.batch_size)
        run_rounds(rows, args.rounds, args.batches, args.budget)
        measure_all_memory(rows, args.batches, args.budget)
        methods += reads + rows
        print(f"rows done ({time.perf_counter() - started:.0f} s)")
    finally:
        close_mds()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    table = results(methods)
    load = f"{load_before:.1f} -> {os.getloadavg()[0]:.1f}"
    header = (
        f"{corpus.num_tokens:,} uint16 tokens / {args.documents:,} documents, block {args.block}, "
        f"batch {args.batch_size}, {args.rounds} rounds (writes {args.write_rounds}), medians; "
        f"load average {load} on {os.cpu_count()} cores; "
        + ", ".join(f"{k} {v}" for k, v in versions(peers).items())
    )
    text = header + "\n\n" + markdown(table)
    print("\n" + text)
    args.table.write_text(text)
    if args.json is not None:
        args.json.write_text(json.dumps({"header": header, "rows": table}, indent=1))
    chart(table, args.png, header.split("; load")[0])
    print(f"wrote {args.table} and {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
