"""Benchmark the corpus reader and writer against same-run baselines (issue #3).

Measures, each against a baseline timed in the same run, interleaved (baseline,
ours, baseline, ours, ...; medians reported), because the machine is shared:

(a) random ``docs[i]`` (ns per document) vs raw ``np.memmap`` slicing with the
    offsets already in hand (target <= 1.5x); also a stricter baseline (slicing a
    plain ndarray over the mapping) and the batched ``docs.take`` (target: faster
    per document than single access).
(b) full sequential scan vs ``np.fromfile`` of the same token files (target >= 0.7x
    throughput): iterate every document and copy its tokens into memory, ~1M tokens
    per ``np.concatenate`` (as a packer would), so both sides copy every byte once.
(c) ``CorpusWriter`` throughput for an in-memory list of documents vs
    ``np.concatenate`` + ``tofile`` (issue #17 item 4: >= 0.8x without fsync, >= 1.0x
    with fsync on both sides); wall and CPU medians, rounds in rotated order.
(d) open time and memory for 1,000 shards / 10M documents (in a fresh process).

Everything is generated under ``--dir`` and deleted afterwards unless ``--keep``.

Usage::

    python -m tools.bench_reader            # full run (>= 2 GB corpus)
    python -m tools.bench_reader --quick    # smoke run, seconds
"""

from __future__ import annotations

import argparse
import hashlib
import json
import mmap
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

import mixle.corpus.format.shard as shard_module  # noqa: E402
from mixle.corpus import CorpusWriter, ShardWriter, commit_manifest, open_corpus  # noqa: E402
from tools._memory import peak_rss_mb, rss_anon_mb  # noqa: E402

VOCAB = 50257  # GPT-2: ids < 65536, so uint16 on disk


def memory() -> dict[str, float]:
    """Peak RSS (ru_maxrss) and current private memory (RssAnon), MiB."""
    return {"peak_rss_mib": peak_rss_mb(), "rss_anon_mib": rss_anon_mb()}


def document_lengths(rng: np.random.Generator, total_tokens: int, mean: int) -> np.ndarray:
    """Log-normal document lengths (>= 1) adding up to about ``total_tokens``."""
    count = max(total_tokens // mean, 1)
    sigma = 1.0
    lengths = rng.lognormal(np.log(mean) - sigma**2 / 2, sigma, size=count)
    return np.maximum(lengths.astype(np.int64), 1)


def make_documents(rng: np.random.Generator, total_tokens: int, mean: int) -> list[np.ndarray]:
    """Documents as uint16 views into one random pool (cheap to generate, realistic ids)."""
    pool = rng.integers(0, VOCAB, size=1 << 24, dtype=np.uint16)
    lengths = np.minimum(document_lengths(rng, total_tokens, mean), pool.shape[0])
    starts = rng.integers(0, pool.shape[0] - lengths + 1)
    return [pool[s : s + n] for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)]


def interleave(runs: dict[str, Callable[[], float]], reps: int) -> dict[str, float]:
    """Run each callable ``reps`` times, alternating; return the median of each."""
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(reps):
        for name, run in runs.items():
            samples[name].append(run())
    return {name: statistics.median(values) for name, values in samples.items()}


# -- (c) writer -----------------------------------------------------------------------
class _NoHash:
    def update(self, data: object) -> None:
        pass

    def hexdigest(self) -> str:
        return "0" * 64


class _NoHashlib:
    @staticmethod
    def sha256(data: bytes = b"") -> _NoHash:
        return _NoHash()


def bench_writer(directory: Path, tokens: int, reps: int) -> dict[str, Any]:
    """Writer vs ``np.concatenate`` + ``tofile``, with and without fsync (issue #17 item 4).

    Every configuration runs once per round, in an order rotated every round; wall and
    CPU (``process_time``: all threads of this process) medians are reported, because
    on a shared machine only the same-run wall ratio and the CPU cost are comparable.
    """
    rng = np.random.default_rng(3)
    documents = make_documents(rng, tokens, 1000)
    total = sum(doc.shape[0] for doc in documents)
    baseline_path = directory / "baseline.bin"
    corpus_path = directory / "written"

    def baseline(fsync: bool, checksum: bool = False) -> Callable[[], None]:
        def run() -> None:
            with open(baseline_path, "wb") as handle:
                flat = np.concatenate(documents)
                flat.tofile(handle)
                if checksum:
                    hashlib.sha256(flat.data.cast("B")).hexdigest()
                if fsync:
                    handle.flush()
                    os.fsync(handle.fileno())

        return run

    def ours(durable: bool, checksum: bool = True) -> Callable[[], None]:
        def run() -> None:
            saved = shard_module.hashlib
            if not checksum:  # diagnostic only: what the writer costs without SHA-256
                shard_module.hashlib = _NoHashlib  # type: ignore[assignment]
            try:
                with CorpusWriter(corpus_path, vocab_size=VOCAB, durable=durable) as writer:
                    writer.add_many(documents)
            finally:
                shard_module.hashlib = saved

        return run

    runs = {
        "concat_tofile": baseline(False),
        "writer_no_fsync": ours(False),
        "concat_tofile_fsync": baseline(True),
        "writer_fsync": ours(True),
        "concat_tofile_sha256": baseline(False, checksum=True),
        "writer_no_fsync_no_sha256": ours(False, checksum=False),
    }
    wall: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for round_number in range(reps):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            start, start_cpu = time.perf_counter(), time.process_time()
            runs[name]()
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
            # Deleting 200 MB is not part of either side's cost.
            shutil.rmtree(corpus_path, ignore_errors=True)
            baseline_path.unlink(missing_ok=True)
    times = {name: statistics.median(values) for name, values in wall.items()}
    cpu_s = {name: statistics.median(values) for name, values in cpu.items()}
    return {
        "tokens": total,
        "documents": len(documents),
        "rounds": reps,
        "load_average": os.getloadavg()[0],
        "wall_s": times,
        "cpu_s": cpu_s,
        "mtokens_per_s": {name: total / seconds / 1e6 for name, seconds in times.items()},
        "ratio_no_fsync": times["concat_tofile"] / times["writer_no_fsync"],
        "ratio_fsync": times["concat_tofile_fsync"] / times["writer_fsync"],
        "ratio_vs_concat_tofile_sha256": times["concat_tofile_sha256"] / times["writer_no_fsync"],
        "ratio_no_fsync_no_sha256": times["concat_tofile"] / times["writer_no_fsync_no_sha256"],
        "cpu_ratio_no_fsync": cpu_s["concat_tofile"] / cpu_s["writer_no_fsync"],
    }


def build_corpus(path: Path, size_bytes: int) -> None:
    rng = np.random.default_rng(1)
    with CorpusWriter(path, vocab_size=VOCAB, durable=False) as writer:
        remaining = size_bytes // 2
        while remaining > 0:
            batch = make_documents(rng, min(remaining, 50_000_000), 1000)
            writer.add_many(batch)
            remaining -= sum(doc.shape[0] for doc in batch)


def bench_random(path: Path, reads: int, batch: int, reps: int) -> dict[str, Any]:
    documents = open_corpus(path)
    rng = np.random.default_rng(2)
    indices = rng.integers(0, len(documents), size=reads)
    index_list = indices.tolist()
    # Baseline: one np.memmap per shard and the (shard, begin, end) of every read in hand.
    manifest = documents.manifest
    starts = np.cumsum([0] + [s["num_documents"] for s in manifest["shards"]])
    memmaps, arrays, offsets = [], [], []
    for shard in manifest["shards"]:
        memmaps.append(np.memmap(path / shard["tokens"], dtype="<u2", mode="r"))
        with open(path / shard["tokens"], "rb") as handle:
            arrays.append(
                np.frombuffer(mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ), "<u2")
            )
        offsets.append(np.fromfile(path / shard["offsets"], dtype="<i8", offset=32))
    shard_of = np.searchsorted(starts, indices, side="right") - 1
    begins = [
        int(offsets[s][i - starts[s]]) for s, i in zip(shard_of.tolist(), index_list, strict=True)
    ]
    ends = [
        int(offsets[s][i - starts[s] + 1])
        for s, i in zip(shard_of.tolist(), index_list, strict=True)
    ]
    raw_memmap = [
        (memmaps[s], b, e) for s, b, e in zip(shard_of.tolist(), begins, ends, strict=True)
    ]
    raw_array = [(arrays[s], b, e) for s, b, e in zip(shard_of.tolist(), begins, ends, strict=True)]
    for index in index_list[:1000]:  # map every shard once before timing
        documents[index]

    def timed(body: Callable[[], None]) -> Callable[[], float]:
        def run() -> float:
            start = time.perf_counter_ns()
            body()
            return (time.perf_counter_ns() - start) / reads

        return run

    def memmap_slices() -> None:
        for tokens, begin, end in raw_memmap:
            tokens[begin:end]

    def array_slices() -> None:
        for tokens, begin, end in raw_array:
            tokens[begin:end]

    def single() -> None:
        for index in index_list:
            documents[index]

    def single_kept() -> None:
        for start in range(0, reads, batch):
            [documents[i] for i in index_list[start : start + batch]]

    def batched() -> None:
        for start in range(0, reads, batch):
            documents.take(indices[start : start + batch])

    ns = interleave(
        {
            "np_memmap_slice": timed(memmap_slices),
            "docs_getitem": timed(single),
            "ndarray_slice": timed(array_slices),
            "docs_getitem_list": timed(single_kept),
            "docs_take": timed(batched),
        },
        reps,
    )
    return {
        "documents": len(documents),
        "shards": documents.num_shards,
        "reads": reads,
        "batch": batch,
        "ns_per_doc": ns,
        "ratio_vs_np_memmap": ns["docs_getitem"] / ns["np_memmap_slice"],
        "ratio_vs_ndarray": ns["docs_getitem"] / ns["ndarray_slice"],
        "take_vs_single_list": ns["docs_take"] / ns["docs_getitem_list"],
    }


def bench_scan(path: Path, reps: int) -> dict[str, Any]:
    documents = open_corpus(path)
    names = [path / s["tokens"] for s in documents.manifest["shards"]]
    longest = int(documents.lengths.max()) if len(documents) else 0
    buffer = np.empty((1 << 20) + longest, dtype="<u2")

    def fromfile() -> float:
        start = time.perf_counter()
        total = 0
        for name in names:
            total += np.fromfile(name, dtype="<u2").shape[0]
        return time.perf_counter() - start

    def ours() -> float:
        # A bulk consumer: gather views, copy ~1M tokens at a time into one buffer.
        reader = open_corpus(path)  # fresh mappings each time, like a new epoch/worker
        start = time.perf_counter()
        pending: list[np.ndarray] = []
        count = 0
        for doc in reader:
            pending.append(doc)
            count += len(doc)
            if count >= 1 << 20:
                np.concatenate(pending, out=buffer[:count])
                pending, count = [], 0
        if pending:
            np.concatenate(pending, out=buffer[:count])
        return time.perf_counter() - start

    ours()  # warm the page cache once for both
    times = interleave({"np_fromfile": fromfile, "docs_iter_copy": ours}, reps)
    gb = documents.num_tokens * 2 / 1e9
    return {
        "gigabytes": gb,
        "gb_per_s": {name: gb / seconds for name, seconds in times.items()},
        "ratio": times["np_fromfile"] / times["docs_iter_copy"],
    }


# -- (d) open time -----------------------------------------------------------------------
def build_many_shards(path: Path, shards: int, documents: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    per_shard = documents // shards
    rng = np.random.default_rng(4)
    lengths = rng.integers(1, 4, size=per_shard).astype(np.int64)
    tokens = rng.integers(0, VOCAB, size=int(lengths.sum()), dtype=np.uint16)
    entries = []
    for index in range(shards):
        with ShardWriter(path, index, dtype="uint16", durable=False) as writer:
            writer.write(tokens, lengths)
            entries.append(writer.commit())
    commit_manifest(path, entries, dtype="uint16", vocab_size=VOCAB)


OPEN_PROBE = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
from mixle.corpus import open_corpus
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
def anon():
    return status("RssAnon")
before = anon()
start = time.perf_counter()
docs = open_corpus({path!r})
opened = time.perf_counter() - start
after = anon()
start = time.perf_counter(); docs[len(docs) // 2]; first = time.perf_counter() - start
start = time.perf_counter(); docs.lengths; lengths = time.perf_counter() - start
print(json.dumps({{"open_s": opened, "rss_anon_growth_mib": after - before,
    "first_read_s": first, "lengths_s": lengths, "documents": len(docs),
    "shards": docs.num_shards, "rss_anon_after_lengths_mib": anon(),
    "peak_rss_mib": status("VmHWM")}}))
"""


def bench_open(path: Path, reps: int) -> dict[str, Any]:
    results = []
    for _ in range(reps):
        out = subprocess.run(
            [sys.executable, "-c", OPEN_PROBE.format(root=str(ROOT), path=str(path))],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        results.append(json.loads(out))
    keys = (
        "open_s",
        "rss_anon_growth_mib",
        "first_read_s",
        "lengths_s",
        "rss_anon_after_lengths_mib",
        "peak_rss_mib",
    )
    summary = {key: statistics.median(r[key] for r in results) for key in keys}
    summary.update(documents=results[0]["documents"], shards=results[0]["shards"])
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/corpus-eng/bench"))
    parser.add_argument("--size-gb", type=float, default=2.0, help="corpus size for (a), (b)")
    parser.add_argument("--writer-tokens", type=int, default=100_000_000)
    parser.add_argument("--reads", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--open-shards", type=int, default=1000)
    parser.add_argument("--open-documents", type=int, default=10_000_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    parser.add_argument("--keep", action="store_true", help="keep the generated data")
    parser.add_argument("--only", choices=["writer", "random", "scan", "open"], action="append")
    args = parser.parse_args(argv)
    if args.quick:
        args.size_gb, args.writer_tokens, args.reads = 0.05, 5_000_000, 20_000
        args.open_shards, args.open_documents, args.reps = 50, 100_000, 3
    parts = set(args.only or ["writer", "random", "scan", "open"])
    args.dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"arguments": {k: str(v) for k, v in vars(args).items()}}
    try:
        if "writer" in parts:
            results["writer"] = bench_writer(args.dir, args.writer_tokens, args.reps)
            print(json.dumps({"writer": results["writer"]}, indent=1), flush=True)
        if parts & {"random", "scan"}:
            corpus = args.dir / "corpus"
            start = time.perf_counter()
            build_corpus(corpus, int(args.size_gb * 1e9))
            results["build_s"] = time.perf_counter() - start
            if "random" in parts:
                results["random"] = bench_random(corpus, args.reads, args.batch, args.reps)
                print(json.dumps({"random": results["random"]}, indent=1), flush=True)
            if "scan" in parts:
                results["scan"] = bench_scan(corpus, args.reps)
                print(json.dumps({"scan": results["scan"]}, indent=1), flush=True)
            shutil.rmtree(corpus)
        if "open" in parts:
            many = args.dir / "many"
            build_many_shards(many, args.open_shards, args.open_documents)
            results["open"] = bench_open(many, args.reps)
            print(json.dumps({"open": results["open"]}, indent=1), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(args.dir, ignore_errors=True)
    results["memory"] = memory()
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
