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

    python tools/bench_hf.py --quick --rounds 5
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

from accelerate.data_loader import prepare_data_loader
from bench_stream import generate, peak_rss_mb
from torch.utils.data import DataLoader

from mixle.corpus import open_corpus
from mixle.data import StreamingCorpus
from mixle.hf import GlobalRowDataset


def make(path: Path, rank: int, args: argparse.Namespace) -> StreamingCorpus:
    return StreamingCorpus(
        open_corpus(path),
        rank=rank,
        world_size=args.world_size,
        block=args.block,
        batch_size=args.batch_size,
        boundary_id=0,
        layout="global",
    )


def throughput(path: Path, args: argparse.Namespace) -> dict[str, float]:
    rates: dict[str, list[float]] = {"direct": [], "accelerate": []}
    for round_ in range(args.rounds):
        for kind in ("direct", "accelerate") if round_ % 2 == 0 else ("accelerate", "direct"):
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
    return {kind: statistics.median(values) for kind, values in rates.items()}


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


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", default="/tmp/hf-bench")
    parser.add_argument("--tokens", type=int, default=400_000_000)
    parser.add_argument("--quick", action="store_true", help="40M tokens")
    parser.add_argument("--mean-length", type=float, default=600.0)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--block", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.quick:
        args.tokens = 40_000_000
    workdir = Path(args.workdir)
    path = workdir / "corpus"
    try:
        generate(path, args.tokens, args.mean_length, seed=0)
        rates = throughput(path, args)
        latency = resume_latency(path, args)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"corpus: {args.tokens:,} tokens; process 1 of {args.world_size}, block {args.block}, "
        f"batch {args.batch_size}; {args.rounds} interleaved rounds (medians)"
    )
    for kind, rate in rates.items():
        print(f"  tokens received by the process, {kind:>10}: {rate / 1e6:8.1f} M tokens/s")
    print(f"  accelerate / direct: {rates['accelerate'] / rates['direct']:.3f}x")
    for where, value in latency.items():
        print(f"  load_state_dict + first global batch at {where:>6}: {value:7.1f} ms")
    print(f"  peak RSS {peak_rss_mb():.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
