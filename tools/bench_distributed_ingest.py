"""Benchmark distributed ingestion (issue #15): dask vs local, merge.

Two measurements (the commit of 1,000 units is tools/bench_commit.py):

1. ``--executor dask`` (a LocalCluster of 2 single-threaded workers) against
   ``--executor local --workers 2`` on a JSONL input of ``--gb`` GB; rounds
   interleaved, medians reported, ratio = dask throughput / local throughput. The
   cluster is started once (its start-up time is reported separately).
2. ``merge_corpora`` of two corpora of ``--merge-gb`` GB of tokens each on local disk.

Usage::

    python -m tools.bench_distributed_ingest --gb 1.0 --rounds 2 --work /tmp/bench-dist
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import time
from pathlib import Path

import numpy as np

from mixle.corpus import CorpusWriter, ingest, merge_corpora, open_corpus

VOCAB = 50_257


def make_jsonl(path: Path, gigabytes: float) -> Path:
    """A JSONL file of about ``gigabytes`` GB: a 16 MB block of random documents, repeated."""
    target = int(gigabytes * 1e9)
    if path.exists() and path.stat().st_size >= target:
        return path
    rng = np.random.default_rng(0)
    lines = []
    size = 0
    while size < 16 * 2**20:
        doc = rng.integers(0, VOCAB, size=int(rng.integers(50, 2000)))
        line = json.dumps({"input_ids": doc.tolist()}) + "\n"
        lines.append(line)
        size += len(line)
    block = "".join(lines).encode("ascii")
    with open(path, "wb") as handle:
        written = 0
        while written < target:
            handle.write(block)
            written += len(block)
    return path


def bench_executors(work: Path, source: Path, rounds: int) -> dict[str, object]:
    import distributed

    started = time.perf_counter()
    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        host="127.0.0.1",
        silence_logs=40,
    )
    startup = time.perf_counter() - started
    options = {"vocab_size": VOCAB, "progress": False}
    times: dict[str, list[float]] = {"local": [], "dask": []}
    tokens = 0
    try:
        for _ in range(rounds):
            for mode in ("local", "dask"):
                out = work / f"out-{mode}"
                shutil.rmtree(out, ignore_errors=True)
                begin = time.perf_counter()
                if mode == "local":
                    summary = ingest([str(source)], out, workers=2, **options)
                else:
                    summary = ingest(
                        [str(source)],
                        out,
                        executor="dask",
                        scheduler=cluster.scheduler_address,
                        **options,
                    )
                times[mode].append(time.perf_counter() - begin)
                tokens = summary.tokens
        same = (
            open_corpus(work / "out-local").fingerprint
            == open_corpus(work / "out-dask").fingerprint
        )
    finally:
        cluster.close()
    local, dask = statistics.median(times["local"]), statistics.median(times["dask"])
    return {
        "input_bytes": source.stat().st_size,
        "tokens": tokens,
        "local_s": times["local"],
        "dask_s": times["dask"],
        "local_tokens_per_s": tokens / local,
        "dask_tokens_per_s": tokens / dask,
        "ratio_dask_over_local": local / dask,
        "cluster_startup_s": startup,
        "identical_fingerprint": same,
    }


def bench_merge(work: Path, gigabytes: float) -> dict[str, object]:
    parts = []
    tokens = int(gigabytes * 1e9) // 2
    for number in range(2):
        path = work / f"merge-part-{number}"
        if not (path / "manifest.json").exists():
            shutil.rmtree(path, ignore_errors=True)
            rng = np.random.default_rng(number)
            with CorpusWriter(path, vocab_size=VOCAB) as writer:
                left = tokens
                while left:
                    count = min(left, 2**24)
                    writer.add(rng.integers(0, VOCAB, count, dtype=np.uint16))
                    left -= count
        parts.append(str(path))
    out = work / "merged"
    shutil.rmtree(out, ignore_errors=True)
    begin = time.perf_counter()
    merge_corpora(parts, out)
    seconds = time.perf_counter() - begin
    return {"merge_s": seconds, "tokens_bytes_each": tokens * 2, "documents": len(open_corpus(out))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gb", type=float, default=1.0, help="JSONL input size (GB)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--merge-gb", type=float, default=1.0)
    parser.add_argument("--work", default="/tmp/mixle-bench-distributed")
    parser.add_argument("--skip", nargs="*", default=[], choices=("executors", "merge"))
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    with open("/proc/loadavg", encoding="ascii") as handle:
        results: dict[str, object] = {"loadavg_at_start": handle.read().strip()}
    if "merge" not in args.skip:
        results["merge"] = bench_merge(work, args.merge_gb)
        print(json.dumps(results["merge"]), flush=True)
    if "executors" not in args.skip:
        source = make_jsonl(work / "input.jsonl", args.gb)
        results["executors"] = bench_executors(work, source, args.rounds)
        print(json.dumps(results["executors"]), flush=True)
    results["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    results["peak_rss_children_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
