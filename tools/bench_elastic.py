"""Benchmark: the global layout against the per-rank layout (issue #13).

Generates a corpus with ``tools/bench_stream.generate`` under ``--workdir`` (deleted at
the end) and measures, interleaved in the same run (figures are medians):

(1) per-rank throughput: rank 1 of ``--world-size`` streaming ``--batches`` batches of
    ``StreamingCorpus(open_corpus(...), layout=...)`` for both layouts (target: global
    >= 0.95x per-rank);
(2) ``load_state_dict`` + first batch on a fresh corpus object at the start, middle
    and end of an epoch, version-1 (per-rank) cursor vs version-2 row cursor (target:
    global no slower);
(3) the JSON size of both state dicts (target: <= 1 KB).

    python tools/bench_elastic.py            # 400M tokens
    python tools/bench_elastic.py --quick    # 40M tokens
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_stream import generate, peak_rss_mb

from mixle.corpus import open_corpus
from mixle.data import StreamingCorpus
from mixle.data._gather import gather_backend, set_gather_backend

LAYOUTS = ("per-rank", "global")


def make(path: Path, layout: str, args: argparse.Namespace) -> StreamingCorpus:
    return StreamingCorpus(
        open_corpus(path),
        rank=1,
        world_size=args.world_size,
        block=args.block,
        batch_size=args.batch_size,
        boundary_id=0,
        layout=layout,
    )


def throughput(path: Path, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Median tokens/s per layout, ``{"wall": {...}, "cpu": {...}}`` (``time.process_time``)."""
    corpora = {layout: make(path, layout, args) for layout in LAYOUTS}
    rates: dict[str, dict[str, list[float]]] = {
        clock: {layout: [] for layout in LAYOUTS} for clock in ("wall", "cpu")
    }
    for round_ in range(args.rounds):
        for layout in LAYOUTS if round_ % 2 == 0 else LAYOUTS[::-1]:
            corpus = corpora[layout]
            # Fresh pages every round, both layouts (wrapping round at the epoch's end).
            start_batch = round_ * args.batches % max(corpus.num_batches(0) - args.batches, 1)
            began, cpu = time.perf_counter(), time.process_time()
            tokens = 0
            for count, batch in enumerate(corpus.epoch_batches(0, start_batch=start_batch)):
                tokens += batch[0].size
                if count + 1 == args.batches:
                    break
            rates["wall"][layout].append(tokens / (time.perf_counter() - began))
            rates["cpu"][layout].append(tokens / (time.process_time() - cpu))
    return {
        clock: {layout: statistics.median(values) for layout, values in table.items()}
        for clock, table in rates.items()
    }


def resume_latency(path: Path, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for where in ("start", "middle", "end"):
        times: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
        for round_ in range(args.rounds):
            for layout in LAYOUTS if round_ % 2 == 0 else LAYOUTS[::-1]:
                source = make(path, layout, args)
                if layout == "global":
                    total = source.num_rows(0)
                    step = source.global_batch_size
                else:
                    total, step = source.num_batches(0), 1
                index = {"start": 0, "middle": total // 2, "end": total - 1}[where]
                state = {**source.state_dict(), "epoch": 0}
                state["row" if layout == "global" else "batch"] = index // step * step
                fresh = make(path, layout, args)
                began = time.perf_counter()
                fresh.load_state_dict(state)
                next(iter(fresh))
                times[layout].append((time.perf_counter() - began) * 1000)
        out[where] = {layout: statistics.median(values) for layout, values in times.items()}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", default="/tmp/elastic-bench")
    parser.add_argument("--tokens", type=int, default=400_000_000)
    parser.add_argument("--quick", action="store_true", help="40M tokens")
    parser.add_argument("--mean-length", type=float, default=600.0)
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--block", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--gather", choices=["auto", "numpy", "numba"], default="auto")
    args = parser.parse_args()
    set_gather_backend(args.gather)  # auto: the compiled gather when numba is installed
    if args.quick:
        args.tokens = 40_000_000
    workdir = Path(args.workdir)
    path = workdir / "corpus"
    try:
        generate(path, args.tokens, args.mean_length, seed=0)
        rates = throughput(path, args)
        latency = resume_latency(path, args)
        sizes: dict[str, Any] = {
            layout: len(json.dumps(make(path, layout, args).state_dict())) for layout in LAYOUTS
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"corpus: {args.tokens:,} tokens; rank 1 of {args.world_size}, block {args.block}, "
        f"batch {args.batch_size}; {args.rounds} interleaved rounds (medians)"
    )
    print(f"  gather backend: {gather_backend()}")
    for layout in LAYOUTS:
        print(
            f"  throughput {layout:>8}: {rates['wall'][layout] / 1e6:8.1f} M tokens/s wall, "
            f"{rates['cpu'][layout] / 1e6:8.1f} M tokens/s CPU"
        )
    for clock in ("cpu", "wall"):
        ratio = rates[clock]["global"] / rates[clock]["per-rank"]
        print(f"  global / per-rank ({clock}): {ratio:.3f}x (target >= 0.95x)")
    for where, values in latency.items():
        print(
            f"  load_state_dict + first batch at {where:>6}: per-rank v1 "
            f"{values['per-rank']:7.1f} ms | global v2 {values['global']:7.1f} ms"
        )
    print(f"  state dict JSON: per-rank v1 {sizes['per-rank']} B | global v2 {sizes['global']} B")
    print(f"  peak RSS {peak_rss_mb():.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
