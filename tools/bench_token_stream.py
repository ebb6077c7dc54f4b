"""Benchmark ``TokenStream`` over a sharded mmap corpus against two same-run baselines.

Generates a corpus (default >= 2 GB of uint16 tokens, mean document 512 tokens) with
``CorpusWriter`` plus a flat ``train.bin`` holding the same tokens, then measures, in
interleaved rounds (medians reported):

* floor     sequential slices of one ``np.memmap`` copied into int64 rows of block + 1;
* nanogpt   nanoGPT's ``get_batch``: a fresh ``np.memmap`` per batch, random windows
            (with replacement) sliced and stacked as int64 tensors;
* rand-floor  (reference) random window starts sliced from one persistent memmap;
* ours      ``TokenStream`` (shuffled) over ``open_corpus(...)``: one
            ``ShardedDocuments.read_tokens`` range read per window, prefetch hints on
            (the default);
* ours-nopf the same with ``prefetch=False``;
* ours-docs the same (``prefetch=False``) through a plain ``Sequence`` wrapper that hides
            ``read_tokens`` and ``take``: one read per overlapped document piece, what
            any other document sequence gets;
* ours-seq  ``TokenStream`` with ``shuffle=False``.

Then RSS growth (``RssAnon``, private memory) over 1M windows, and the latency of
``load_state_dict`` + first batch at the start and at the end of an epoch.

    python -m tools.bench_token_stream            # the issue's configuration
    python -m tools.bench_token_stream --quick    # a small smoke run
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from mixle.corpus import CorpusWriter, ShardedDocuments, open_corpus
from mixle.data.stream_token_source import TokenStream
from tools._memory import peak_rss_mb, rss_anon_mb


def generate(root: str, num_tokens: int, mean_doc: int, seed: int) -> tuple[str, str]:
    """Write the corpus and a flat train.bin of the same uint16 tokens."""
    corpus, flat = os.path.join(root, "corpus"), os.path.join(root, "train.bin")
    rng = np.random.default_rng(seed)
    written = 0
    started = time.perf_counter()
    with CorpusWriter(corpus, vocab_size=50257, overwrite=True) as writer, open(flat, "wb") as out:
        while written < num_tokens:
            chunk = min(32 * 1024 * 1024, num_tokens - written)
            tokens = rng.integers(0, 50257, chunk, dtype=np.uint16)
            lengths = np.maximum(rng.geometric(1 / mean_doc, chunk // mean_doc * 2), 1)
            cuts = np.cumsum(lengths)
            cuts = cuts[cuts < chunk]
            writer.add_many(np.split(tokens, cuts))
            tokens.tofile(out)
            written += chunk
    print(f"generated {written / 1e6:.0f}M tokens in {time.perf_counter() - started:.0f}s")
    return corpus, flat


class PlainSequence(Sequence[np.ndarray]):
    """The corpus's documents, lengths and fingerprint only (no range reads, no ``take``)."""

    def __init__(self, docs: ShardedDocuments) -> None:
        self.docs = docs

    def __len__(self) -> int:
        return len(self.docs)

    def __getitem__(self, index: Any) -> Any:
        return self.docs[index]

    @property
    def lengths(self) -> np.ndarray:
        return self.docs.lengths

    @property
    def fingerprint(self) -> str:
        return self.docs.fingerprint

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.docs.dtype


def floor_batches(flat: str, block: int, batch: int) -> Iterator[np.ndarray]:
    data = np.memmap(flat, dtype=np.uint16, mode="r")
    position, limit = 0, data.shape[0] - batch * block - 1
    while True:
        rows = np.empty((batch, block + 1), dtype=np.int64)
        for row in range(batch):
            rows[row] = data[position : position + block + 1]
            position += block
        if position > limit:
            position = 0
        yield rows


def random_floor_batches(flat: str, block: int, batch: int) -> Iterator[np.ndarray]:
    """Reference, not a target: random window starts, one memmap, int64 rows.

    What any shuffled reader pays for random access alone (page faults, cache misses).
    """
    data = np.memmap(flat, dtype=np.uint16, mode="r")
    rng = np.random.default_rng(0)
    while True:
        rows = np.empty((batch, block + 1), dtype=np.int64)
        for row, start in enumerate(rng.integers(0, data.shape[0] - block - 1, batch).tolist()):
            rows[row] = data[start : start + block + 1]
        yield rows


def nanogpt_batches(flat: str, block: int, batch: int) -> Iterator[Any]:
    while True:  # nanoGPT's get_batch, CPU branch
        data = np.memmap(flat, dtype=np.uint16, mode="r")
        ix = torch.randint(len(data) - block, (batch,))
        x = torch.stack([torch.from_numpy(data[i : i + block].astype(np.int64)) for i in ix])
        y = torch.stack(
            [torch.from_numpy(data[i + 1 : i + 1 + block].astype(np.int64)) for i in ix]
        )
        yield x, y


def endless(make: Callable[[], TokenStream]) -> Iterator[Any]:
    while True:
        yield from make()


def timed(iterator: Iterator[Any], batches: int) -> float:
    started = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default="/tmp/tokens-bench")
    parser.add_argument("--tokens", type=int, default=1_100_000_000, help="uint16 tokens")
    parser.add_argument("--mean-doc", type=int, default=512)
    parser.add_argument("--block", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--round-batches", type=int, default=1000)
    parser.add_argument("--rss-windows", type=int, default=1_000_000)
    parser.add_argument("--keep", action="store_true", help="keep the generated data")
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    args = parser.parse_args()
    if args.quick:
        args.tokens, args.rounds, args.round_batches, args.rss_windows = 20_000_000, 3, 200, 20_000

    os.makedirs(args.root, exist_ok=True)
    try:
        corpus, flat = generate(args.root, args.tokens, args.mean_doc, seed=0)
        docs = open_corpus(corpus)
        size_gb = (
            sum(os.path.getsize(os.path.join(corpus, s["tokens"])) for s in docs.manifest["shards"])
            / 1e9
        )
        print(
            f"corpus: {len(docs)} documents, {docs.num_tokens / 1e6:.0f}M tokens, "
            f"{docs.num_shards} shards, {size_gb:.2f} GB; block {args.block}, batch {args.batch}"
        )
        plain = PlainSequence(docs)
        block, batch = args.block, args.batch
        methods: dict[str, Iterator[Any]] = {
            "floor": floor_batches(flat, block, batch),
            "nanogpt": nanogpt_batches(flat, block, batch),
            "rand-floor": random_floor_batches(flat, block, batch),
            "ours": endless(lambda: TokenStream(docs, block, batch, epochs=1 << 20, seed=1)),
            "ours-nopf": endless(
                lambda: TokenStream(docs, block, batch, epochs=1 << 20, seed=1, prefetch=False)
            ),
            "ours-docs": endless(
                lambda: TokenStream(plain, block, batch, epochs=1 << 20, seed=1, prefetch=False)
            ),
            "ours-seq": endless(lambda: TokenStream(docs, block, batch, shuffle=False)),
        }
        for iterator in methods.values():  # warm up: page cache, imports, first chunk
            timed(iterator, max(args.round_batches // 4, 10))
        times: dict[str, list[float]] = {name: [] for name in methods}
        for _ in range(args.rounds):
            for name, iterator in methods.items():
                times[name].append(timed(iterator, args.round_batches))
        tokens_per_round = args.round_batches * batch * block
        rate = {name: tokens_per_round / statistics.median(t) for name, t in times.items()}
        print(f"\nthroughput (context tokens/s, median of {args.rounds} interleaved rounds):")
        for name, value in rate.items():
            print(
                f"  {name:10s} {value / 1e6:8.1f} M/s   {value / rate['floor']:5.2f}x floor   "
                f"{value / rate['nanogpt']:5.2f}x nanogpt"
            )

        stream = TokenStream(docs, block, batch, epochs=1 << 20, seed=2)
        iterator = iter(stream)
        timed(iterator, 100)
        anon_before, peak_before = rss_anon_mb(), peak_rss_mb()
        started = time.perf_counter()
        timed(iterator, args.rss_windows // batch)
        elapsed = time.perf_counter() - started
        anon_after, peak_after = rss_anon_mb(), peak_rss_mb()
        print(
            f"\nRSS over {args.rss_windows} windows ({elapsed:.1f}s): RssAnon {anon_before:.1f} -> "
            f"{anon_after:.1f} MB (growth {anon_after - anon_before:+.1f} MB, target < 32); "
            f"ru_maxrss {peak_before:.0f} -> {peak_after:.0f} MB (includes page cache of the mmaps)"
        )

        template = TokenStream(docs, block, batch, seed=3)
        last = (template.num_batches() - 1) * batch
        for label, position in (("start", 0), ("end", last)):
            samples = []
            for _ in range(5):
                state = {**template.state_dict(), "epoch": 0, "position": position}
                resumed = TokenStream(docs, block, batch, seed=3)
                started = time.perf_counter()
                resumed.load_state_dict(state)
                next(iter(resumed))
                samples.append(time.perf_counter() - started)
            print(
                f"resume at the {label} of an epoch (load_state_dict + first batch): "
                f"median {statistics.median(samples) * 1e3:.2f} ms"
            )
        started = time.perf_counter()
        TokenStream(docs, block, batch, seed=3)
        print(
            f"TokenStream construction (lengths, prefix sums): {(time.perf_counter() - started) * 1e3:.0f} ms"
        )
        print(f"peak RSS (ru_maxrss) {peak_rss_mb():.0f} MB; RssAnon {rss_anon_mb():.0f} MB")
    finally:
        if not args.keep:
            shutil.rmtree(args.root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
