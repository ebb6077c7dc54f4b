"""Benchmark the writer on tiny documents: ``CorpusWriter.add_many`` vs ``add_flat``.

Issue #25 item 4 needs a 10^9-document corpus of ~4 tokens per document (~16 GB) built
in minutes. This writes ``--documents`` documents of 1..7 tokens (mean 4, uint16) to a
scratch directory (tmpfs by default), once through ``add_many`` (one numpy array per
document, as a tokenizer would hand them over; building those arrays is not timed)
and once through ``add_flat`` (one flat token array and its lengths per call of
``--chunk`` documents), ``durable=False`` both (scratch), interleaved round by round,
and prints documents/s, tokens/s, output MB/s and the time ``add_flat`` would take for
10^9 documents at the measured rate. Both outputs are compared byte for byte once.

Usage::

    python -m tools.bench_bulk_write --documents 10000000 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
from pathlib import Path

import numpy as np

from mixle.corpus import CorpusWriter


def _corpus_bytes(path: Path) -> int:
    return sum(entry.stat().st_size for entry in path.iterdir())


def _same_files(a: Path, b: Path) -> bool:
    names = sorted(os.listdir(a))
    return names == sorted(os.listdir(b)) and all(
        (a / name).read_bytes() == (b / name).read_bytes() for name in names
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=10_000_000)
    parser.add_argument("--chunk", type=int, default=1 << 22, help="documents per add_flat call")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--work", default="/dev/shm/mixle-bench-bulk-write")
    args = parser.parse_args()
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 8, args.documents, dtype=np.int64)
    tokens = rng.integers(0, 50_257, int(lengths.sum()), dtype=np.int64).astype(np.uint16)
    ends = np.cumsum(lengths)
    documents = np.split(tokens, ends[:-1])  # views: one ndarray per document

    def run_many(path: Path) -> float:
        start = time.perf_counter()
        with CorpusWriter(path, vocab_size=50_257, durable=False) as writer:
            writer.add_many(documents)
        return time.perf_counter() - start

    def run_flat(path: Path) -> float:
        start = time.perf_counter()
        with CorpusWriter(path, vocab_size=50_257, durable=False) as writer:
            for first in range(0, args.documents, args.chunk):
                last = min(first + args.chunk, args.documents)
                begin = int(ends[first - 1]) if first else 0
                writer.add_flat(tokens[begin : int(ends[last - 1])], lengths[first:last])
        return time.perf_counter() - start

    runs = {"add_many": run_many, "add_flat": run_flat}
    samples: dict[str, list[float]] = {name: [] for name in runs}
    size = 0
    try:
        for round_ in range(args.rounds):
            order = list(runs) if round_ % 2 == 0 else list(reversed(runs))
            for name in order:
                path = work / name
                shutil.rmtree(path, ignore_errors=True)
                samples[name].append(runs[name](path))
            if round_ == 0:
                size = _corpus_bytes(work / "add_flat")
                assert _same_files(work / "add_many", work / "add_flat"), "outputs differ"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"{args.documents:,} documents, {tokens.size:,} uint16 tokens, {size / 1e6:,.0f} MB "
        f"written, {args.rounds} rounds (median), outputs byte-identical"
    )
    print("| path | seconds | documents/s | tokens/s | MB/s |")
    print("|---|---|---|---|---|")
    for name, values in samples.items():
        seconds = statistics.median(values)
        print(
            f"| `{name}` | {seconds:.2f} | {args.documents / seconds:,.0f} | "
            f"{tokens.size / seconds:,.0f} | {size / seconds / 1e6:,.0f} |"
        )
    flat = statistics.median(samples["add_flat"])
    print(f"projected add_flat time for 10^9 such documents: {flat * 1e9 / args.documents:,.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
