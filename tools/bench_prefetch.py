"""Benchmark: data wait per step of ``mixle train``, with and without input prefetch.

Trains the default model (``TrainConfig`` defaults: d_model 128, 4 layers, 4 heads,
block 64, batch 16) on the CPU for ``--steps`` steps, alternately with ``prefetch=0``
(batches read on the training thread) and ``prefetch=2`` (a background thread two
batches ahead), ``--rounds`` times each, interleaved. Reads the ``data_wait_s`` and
``step_s`` fields of every step record of the metrics log and reports, per setting, the
median over rounds of (sum of data waits) / (sum of step times), the median per-step
wait, and the median tokens/s. Target: data wait < 2% of step time with prefetch.

    python -m tools.bench_prefetch                      # shards/sample, 200 steps, 3 rounds
    python -m tools.bench_prefetch --corpus DIR --steps 100 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from mixle.train import TrainConfig, read_metrics, train
from tools._memory import peak_rss_mb


def _run(corpus: str, steps: int, prefetch: int, threads: int, directory: str) -> dict[str, float]:
    metrics = f"{directory}/metrics-{prefetch}.jsonl"
    config = TrainConfig(
        corpus=corpus,
        steps=steps,
        prefetch=prefetch,
        threads=threads,
        metrics=metrics,
        log_every=0,
        progress=False,
    )
    summary = train(config, log=lambda line: None)
    steps_records = [r for r in read_metrics(metrics) if r["type"] == "step"][5:]  # warm-up
    Path(metrics).unlink()
    waits = [r["data_wait_s"] for r in steps_records]
    totals = [r["step_s"] for r in steps_records]
    return {
        "fraction": sum(waits) / sum(totals),
        "wait_us": statistics.median(waits) * 1e6,
        "step_ms": statistics.median(totals) * 1e3,
        "tokens_per_s": summary.tokens_per_second,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--corpus", default="shards/sample")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    results: dict[int, list[dict[str, float]]] = {0: [], 2: []}
    with tempfile.TemporaryDirectory() as directory:
        for round_number in range(args.rounds):
            order = (0, 2) if round_number % 2 == 0 else (2, 0)
            for prefetch in order:
                results[prefetch].append(
                    _run(args.corpus, args.steps, prefetch, args.threads, directory)
                )
    for prefetch, runs in results.items():
        fraction = statistics.median(r["fraction"] for r in runs)
        print(
            f"prefetch={prefetch}: data wait {fraction * 100:.2f}% of step time "
            f"(median per step {statistics.median(r['wait_us'] for r in runs):.0f} us of "
            f"{statistics.median(r['step_ms'] for r in runs):.1f} ms), "
            f"{statistics.median(r['tokens_per_s'] for r in runs):,.0f} tokens/s "
            f"(median of {len(runs)} rounds of {args.steps} steps)"
        )
    fraction = statistics.median(r["fraction"] for r in results[2])
    print(f"target < 2% with prefetch: {'met' if fraction < 0.02 else 'NOT met'}")
    print(f"peak RSS {peak_rss_mb():.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
