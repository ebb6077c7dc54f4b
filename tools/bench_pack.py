"""Benchmark: packing throughput against the memory-bound floor (issue #2, item 7).

Measures tokens/s of ``pack_documents`` and of ``StreamingCorpus.epoch_batches`` over
in-memory documents, and in the same run, interleaved, the floor of any packer:
``np.concatenate`` of the same arrays (same order) into one int64 buffer. Reports
medians and the ratio to the baseline (target: packer >= 0.5x).

    python -m tools.bench_pack            # 50M tokens, mean document 512, block 2048, batch 8
    python -m tools.bench_pack --quick    # 2M tokens smoke run
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from mixle.data.streaming_corpus import StreamingCorpus, global_document_order, pack_documents
from tools._memory import peak_rss_mb, rss_anon_mb


def make_documents(total_tokens: int, mean_length: int, dtype: str, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths: list[int] = []
    remaining = total_tokens
    while remaining > 0:
        chunk = np.maximum(rng.geometric(1.0 / mean_length, size=10_000), 1)
        for length in chunk.tolist():
            take = min(length, remaining)
            lengths.append(take)
            remaining -= take
            if remaining == 0:
                break
    flat = rng.integers(0, 50_000, size=total_tokens).astype(dtype)
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    return [flat[bounds[i] : bounds[i + 1]] for i in range(len(lengths))]


def timed(function: Callable[[], int]) -> tuple[float, int]:
    start = time.perf_counter()
    tokens = function()
    return time.perf_counter() - start, tokens


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens", type=int, default=50_000_000)
    parser.add_argument("--mean-length", type=int, default=512)
    parser.add_argument("--block", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--dtype", default="int32", help="dtype of the in-memory documents")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--quick", action="store_true", help="2M tokens, 3 rounds")
    args = parser.parse_args()
    if args.quick:
        args.tokens, args.rounds = 2_000_000, 3

    documents = make_documents(args.tokens, args.mean_length, args.dtype, seed=0)
    order = global_document_order(len(documents), seed=0, epoch=0)
    ordered = [documents[i] for i in order.tolist()]
    corpus = StreamingCorpus(
        documents, rank=0, world_size=1, block=args.block, batch_size=args.batch_size, boundary_id=0
    )
    print(
        f"{len(documents):,} documents, {args.tokens:,} tokens ({args.dtype}), "
        f"block {args.block}, batch {args.batch_size}, {args.rounds} rounds"
    )

    def baseline() -> int:
        return int(np.concatenate(ordered, dtype=np.int64).shape[0])

    def packer() -> int:
        return int(pack_documents(documents, order, args.block, boundary_id=0).real_tokens)

    def streamer() -> int:
        return sum(int(batch[2].sum()) for batch in corpus.epoch_batches(0))

    times: dict[str, list[float]] = {"baseline": [], "pack_documents": [], "epoch_batches": []}
    tokens: dict[str, int] = {}
    for _ in range(args.rounds):  # interleaved: baseline next to each candidate
        for name, function in (
            ("baseline", baseline),
            ("pack_documents", packer),
            ("baseline", baseline),
            ("epoch_batches", streamer),
        ):
            seconds, count = timed(function)
            times[name].append(seconds)
            tokens[name] = count
    rate = {name: tokens[name] / statistics.median(values) for name, values in times.items()}
    for name in ("baseline", "pack_documents", "epoch_batches"):
        ratio = rate[name] / rate["baseline"]
        best = (tokens[name] / min(times[name])) / (tokens["baseline"] / min(times["baseline"]))
        print(
            f"{name:>15}: {rate[name] / 1e6:8.1f} M tokens/s  ({ratio:.2f}x baseline, median of "
            f"{len(times[name])}; best-of ratio {best:.2f}x)"
        )
    target = min(rate["pack_documents"], rate["epoch_batches"]) / rate["baseline"]
    print(
        f"target packer >= 0.5x baseline: {'met' if target >= 0.5 else 'NOT met'} ({target:.2f}x)"
    )
    print(f"peak RSS {peak_rss_mb():.0f} MB, RssAnon now {rss_anon_mb():.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
