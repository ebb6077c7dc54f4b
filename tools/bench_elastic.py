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

    python -m tools.bench_elastic            # 400M tokens
    python -m tools.bench_elastic --quick    # 40M tokens

Throughput is measured warm (a first pass over the epoch maps every page of both
corpora). The ratio is reported two ways: of the two layouts' medians, and as the
median of each round's paired ratio (both layouts back to back from the same batch).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from mixle._gather import gather_backend
from mixle.data import StreamingCorpus
from tools._bench import (
    corpus_bench_header,
    interleaved,
    medians,
    run_corpus_bench,
    streaming_corpus,
)
from tools.bench_stream import peak_rss_mb

LAYOUTS = ("per-rank", "global")


def make(path: Path, layout: str, args: argparse.Namespace) -> StreamingCorpus:
    return streaming_corpus(path, args, rank=1, layout=layout)


def throughput(path: Path, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Median tokens/s per layout, ``{"wall": {...}, "cpu": {...}}`` (``time.process_time``)."""
    corpora = {layout: make(path, layout, args) for layout in LAYOUTS}
    for corpus in corpora.values():
        # Warm: one pass over the epoch maps every page of both corpora (first-touch page
        # faults otherwise land on whichever rounds come first, and dominate them).
        for _ in corpus.epoch_batches(0):
            pass
    rates: dict[str, dict[str, list[float]]] = {
        clock: {layout: [] for layout in LAYOUTS} for clock in ("wall", "cpu")
    }
    for round_ in range(args.rounds):
        for layout in interleaved(LAYOUTS, round_):
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
    out = {clock: medians(table) for clock, table in rates.items()}
    # Each round's global / per-rank ratio (same start batch, back to back): the median of
    # these paired ratios shrugs off load that drifts between rounds.
    for clock, table in rates.items():
        paired = [g / p for g, p in zip(table["global"], table["per-rank"], strict=True)]
        out[clock]["paired"] = statistics.median(paired)
    return out


def resume_latency(path: Path, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for where in ("start", "middle", "end"):
        times: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
        for round_ in range(args.rounds):
            for layout in interleaved(LAYOUTS, round_):
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
        out[where] = medians(times)
    return out


def measure(path: Path, args: argparse.Namespace) -> tuple[Any, Any, dict[str, int]]:
    rates = throughput(path, args)
    latency = resume_latency(path, args)
    sizes = {layout: len(json.dumps(make(path, layout, args).state_dict())) for layout in LAYOUTS}
    return rates, latency, sizes


def main() -> int:
    args, (rates, latency, sizes) = run_corpus_bench(
        __doc__, measure, workdir="/tmp/elastic-bench", world_size=4, batches=200, rounds=7
    )
    print(corpus_bench_header(args, "rank 1"))
    print(f"  gather backend: {gather_backend()}")
    for layout in LAYOUTS:
        print(
            f"  throughput {layout:>8}: {rates['wall'][layout] / 1e6:8.1f} M tokens/s wall, "
            f"{rates['cpu'][layout] / 1e6:8.1f} M tokens/s CPU"
        )
    for clock in ("cpu", "wall"):
        ratio = rates[clock]["global"] / rates[clock]["per-rank"]
        print(
            f"  global / per-rank ({clock}): {ratio:.3f}x of the medians, "
            f"{rates[clock]['paired']:.3f}x median of paired rounds (target >= 0.95x)"
        )
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
