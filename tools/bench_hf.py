"""Benchmark: ``mixle.hf.GlobalRowDataset`` behind accelerate's slicing (issue #19).

Generates a corpus with ``tools/bench_stream.generate`` under ``--workdir`` (deleted at
the end) and measures, interleaved in the same run (figures are medians):

(1) what process 1 of ``--world-size`` receives per second: the baseline is
    ``StreamingCorpus(layout="global", rank=1)`` read directly; against it, a DataLoader
    over ``GlobalRowDataset`` prepared by the real ``accelerate.data_loader
    .prepare_data_loader(..., dispatch_batches=False)`` (``IterableDatasetShard``: every
    process reads every row and keeps its share, so expect about 1 / world size);
(2) ``load_state_dict`` + first global batch of a fresh ``GlobalRowDataset`` at the
    start, middle and end of epoch 0 (O(1) resume: no replay, so no growth with the row).

    python -m tools.bench_hf --quick --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from accelerate.data_loader import prepare_data_loader
from torch.utils.data import DataLoader

from mixle.data import StreamingCorpus
from mixle.hf import GlobalRowDataset
from tools._bench import (
    corpus_bench_header,
    interleaved,
    medians,
    run_corpus_bench,
    streaming_corpus,
)
from tools._memory import peak_rss_mb


def make(path: Path, rank: int, args: argparse.Namespace) -> StreamingCorpus:
    return streaming_corpus(path, args, rank=rank, layout="global")


def throughput(path: Path, args: argparse.Namespace) -> dict[str, float]:
    rates: dict[str, list[float]] = {"direct": [], "accelerate": []}
    for round_ in range(args.rounds):
        for kind in interleaved(("direct", "accelerate"), round_):
            corpus = make(path, 1, args)
            state = corpus.state_dict()
            state["row"] = round_ * args.batches * corpus.global_batch_size  # fresh pages
            corpus.load_state_dict(state)
            if kind == "direct":
                batches = iter(corpus)
            else:
                loader = prepare_data_loader(
                    DataLoader(GlobalRowDataset(corpus), batch_size=args.batch_size),
                    num_processes=args.world_size,
                    process_index=1,
                    dispatch_batches=False,
                    put_on_device=False,
                )
                batches = iter(loader)
            began = time.perf_counter()
            tokens = 0
            for count, batch in enumerate(batches):
                tokens += batch[0].size if kind == "direct" else batch["context"].numel()
                if count + 1 == args.batches:
                    break
            rates[kind].append(tokens / (time.perf_counter() - began))
    return medians(rates)


def resume_latency(path: Path, args: argparse.Namespace) -> dict[str, float]:
    out: dict[str, float] = {}
    source = make(path, 0, args)
    total, size = source.num_rows(0), source.global_batch_size
    for where in ("start", "middle", "end"):
        row = {"start": 0, "middle": total // 2, "end": total - 1}[where] // size * size
        state = {**source.state_dict(), "epoch": 0, "row": row}
        times = []
        for _ in range(args.rounds):
            fresh = GlobalRowDataset(make(path, 0, args))
            began = time.perf_counter()
            fresh.load_state_dict(state)
            rows = iter(fresh)
            for _ in range(size):
                next(rows)
            times.append((time.perf_counter() - began) * 1000)
        out[where] = statistics.median(times)
    return out


def measure(path: Path, args: argparse.Namespace) -> tuple[dict[str, float], dict[str, float]]:
    return throughput(path, args), resume_latency(path, args)


def main() -> int:
    args, (rates, latency) = run_corpus_bench(
        __doc__, measure, workdir="/tmp/hf-bench", world_size=2, batches=100, rounds=5
    )
    print(corpus_bench_header(args, "process 1"))
    for kind, rate in rates.items():
        print(f"  tokens received by the process, {kind:>10}: {rate / 1e6:8.1f} M tokens/s")
    print(f"  accelerate / direct: {rates['accelerate'] / rates['direct']:.3f}x")
    for where, value in latency.items():
        print(f"  load_state_dict + first global batch at {where:>6}: {value:7.1f} ms")
    print(f"  peak RSS {peak_rss_mb():.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
