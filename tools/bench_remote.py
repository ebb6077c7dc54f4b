"""Benchmark remote corpora against moto's S3 server on loopback (issue #7).

Measures, with the baselines interleaved in the same run (medians of ``--repeats``):

1. cold-cache streaming throughput (open + read every document in order, the cache
   empty, prefetch hints one window ahead) against ``s3fs.get`` of the same files;
   target >= 0.7x;
2. warm-cache throughput against the same corpus on local disk; target >= 0.9x;
3. time to first batch (open + first ``--batch`` documents), cold cache and local;
4. bytes fetched per document read in range mode (single reads and coalesced
   ``take``), against the document's own size and against what ``fs.open()`` with
   s3fs's default 50 MiB block would transfer;
5. the zarr layout's compression ratio on ``shards/sample`` (if present) and on the
   generated corpus.

moto runs as a separate process (``moto_server``) so that it does not share the
client's GIL. Prints figures, ratios and peak memory (ru_maxrss, RssAnon).

Example: ``python -m tools.bench_remote`` (defaults), ``--quick`` for a smoke run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mixle.corpus import CorpusWriter, convert_corpus, open_corpus, publish_corpus
from mixle.corpus.storage.publish import stored_bytes
from tools._memory import peak_rss_mb, rss_anon_mb


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_moto() -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_EC2_METADATA_DISABLED="true",
    )
    port = free_port()
    exe = shutil.which("moto_server") or os.path.join(
        os.path.dirname(sys.executable), "moto_server"
    )
    process = subprocess.Popen(
        [exe, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.1)
    return process, {"client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}"}}


def make_corpus(path: Path, total_tokens: int, shard_bytes: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    written = 0
    with CorpusWriter(path, vocab_size=50_257, shard_max_bytes=shard_bytes) as writer:
        while written < total_tokens:
            lengths = np.maximum(1, rng.lognormal(6.5, 0.8, size=2000).astype(np.int64))
            ids = rng.integers(0, 50_257, size=int(lengths.sum()), dtype=np.int64)
            # Zipf-ish ids so that compression ratios are not those of uniform noise.
            ids = np.minimum(ids, rng.zipf(1.3, size=ids.shape[0]) - 1) % 50_257
            writer.add_many(np.split(ids, np.cumsum(lengths)[:-1]))
            written += int(lengths.sum())


def consume(documents: Any, window: int, prefetch: bool, ahead: int = 32) -> int:
    """Read every document in order in windows (like a streaming consumer); return tokens."""
    total = 0
    count = len(documents)
    for start in range(0, count, window):
        if prefetch:
            # Hint the next `ahead` windows, as a streaming consumer that knows its order does.
            documents.prefetch(np.arange(start + window, min(count, start + ahead * window)))
        batch = documents.take(np.arange(start, min(count, start + window)))
        total += int(np.concatenate(batch).sum(dtype=np.int64)) if batch else 0
    return total


def timed(function: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = function()
    return time.perf_counter() - started, result


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_cpu(function: Callable[[], Any], server: int) -> tuple[float, float, float, Any]:
    """``(wall, client CPU, server CPU, result)`` of one call (CPU of every thread)."""
    client, before = time.process_time(), process_cpu(server)
    wall, result = timed(function)
    return wall, time.process_time() - client, process_cpu(server) - before, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=64 * 2**20, help="corpus size in tokens")
    parser.add_argument("--shard-mib", type=int, default=8, help="shard size (MiB of tokens)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--window", type=int, default=1024, help="documents per take()")
    parser.add_argument("--batch", type=int, default=64, help="documents in the first batch")
    parser.add_argument("--range-reads", type=int, default=200)
    parser.add_argument("--workdir", default="/tmp/remote-eng/bench")
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    args = parser.parse_args()
    if args.quick:
        args.tokens, args.shard_mib, args.repeats, args.range_reads = 4 * 2**20, 1, 1, 50

    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    process, options = start_moto()
    try:
        import s3fs

        local = work / "corpus"
        make_corpus(local, args.tokens, args.shard_mib * 2**20)
        reference = open_corpus(local)
        nbytes = sum(e["tokens_bytes"] + e["offsets_bytes"] for e in reference.manifest["shards"])
        print(
            f"corpus: {len(reference):,} documents, {reference.num_tokens:,} tokens, "
            f"{reference.num_shards} shards, {nbytes / 2**20:.1f} MiB"
        )
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
        fs.mkdir("bench")
        url = "s3://bench/corpus"
        publish_corpus(local, url, storage_options=options)
        files = [
            f"{url}/{e[k]}" for e in reference.manifest["shards"] for k in ("tokens", "offsets")
        ]
        expected = consume(reference, args.window, False)

        cold, base_cold, warm, base_warm, first_cold, first_local = [], [], [], [], [], []
        cpu: dict[str, list[float]] = {"cold": [], "get": [], "cold-moto": [], "get-moto": []}
        for repeat in range(args.repeats):
            target = work / f"s3fs-get-{repeat}"
            target.mkdir()
            cache = work / f"cache-{repeat}"

            def baseline(target: Path = target) -> None:
                wall, client, server, _ = timed_cpu(
                    lambda: fs.get(files, str(target) + "/"), process.pid
                )
                base_cold.append(wall)
                cpu["get"].append(client)
                cpu["get-moto"].append(server)

            def cold_run(cache: Path = cache) -> int:
                documents = open_corpus(url, storage_options=options, cache_dir=cache)
                documents.prefetch(np.arange(min(len(documents), 32 * args.window)))
                return consume(documents, args.window, True)

            def ours() -> None:
                wall, client, server, total = timed_cpu(cold_run, process.pid)
                assert total == expected, "cold-cache read returned different data"
                cold.append(wall)
                cpu["cold"].append(client)
                cpu["cold-moto"].append(server)

            for run in (baseline, ours) if repeat % 2 == 0 else (ours, baseline):
                run()  # interleaved: each goes first in alternate repeats
            shutil.rmtree(target)
            os.sync()  # let the cold run's writeback finish before timing warm reads
            for turn in range(4):  # fresh readers, page cache warm for both, interleaved
                warm_reader = open_corpus(url, storage_options=options, cache_dir=cache)
                local_reader = open_corpus(local)
                pair = [(warm, warm_reader), (base_warm, local_reader)]
                for samples, reader in pair if turn % 2 == 0 else pair[::-1]:
                    samples.append(timed(lambda r=reader: consume(r, args.window, False))[0])

            def first_batch(location: Any, **kw: Any) -> None:
                documents = open_corpus(location, **kw)
                documents.prefetch(np.arange(min(len(documents), 4 * args.window)))
                documents.take(np.arange(args.batch))

            first_cold.append(
                timed(
                    lambda r=repeat: first_batch(
                        url, storage_options=options, cache_dir=work / f"first-{r}"
                    )
                )[0]
            )
            first_local.append(timed(lambda: first_batch(local))[0])
            shutil.rmtree(cache)

        mib = nbytes / 2**20
        c, bc = statistics.median(cold), statistics.median(base_cold)
        w, bw = statistics.median(warm), statistics.median(base_warm)
        print(
            f"cold cache stream : {mib / c:8.1f} MiB/s  vs s3fs.get {mib / bc:8.1f} MiB/s  ratio {bc / c:.2f}x (target >= 0.7)"
        )
        print(
            "  client CPU s (median): stream {:.2f}, s3fs.get {:.2f};  moto CPU s: {:.2f}, {:.2f}".format(
                *(statistics.median(cpu[k]) for k in ("cold", "get", "cold-moto", "get-moto"))
            )
        )
        print(
            "  per repeat wall s: stream "
            + " ".join(f"{x:.2f}" for x in cold)
            + ", s3fs.get "
            + " ".join(f"{x:.2f}" for x in base_cold)
        )
        print(
            f"warm cache stream : {mib / w:8.1f} MiB/s  vs local    {mib / bw:8.1f} MiB/s  ratio {bw / w:.2f}x (target >= 0.9)"
        )
        print(
            f"first batch ({args.batch} docs): cold S3 {statistics.median(first_cold) * 1e3:.0f} ms, local {statistics.median(first_local) * 1e3:.1f} ms"
        )

        ranged = open_corpus(url, storage_options=options, cache_dir=work / "rc", mode="range")
        rng = np.random.default_rng(1)
        picks = rng.integers(0, len(ranged), size=args.range_reads)
        for number in range(ranged.num_shards):  # offsets first, so only token bytes count
            ranged._shard(number)
        before = ranged.store.bytes_fetched
        started = time.perf_counter()
        for index in picks.tolist():
            ranged[index]
        single_s = (time.perf_counter() - started) / len(picks)
        single = (ranged.store.bytes_fetched - before) / len(picks)
        doc_bytes = float(reference.lengths[picks].mean() * reference.dtype.itemsize)
        before = ranged.store.bytes_fetched
        batch = np.sort(rng.choice(len(ranged), size=min(len(ranged), 512), replace=False))
        take_s, _ = timed(lambda: ranged.take(batch))
        coalesced = (ranged.store.bytes_fetched - before) / len(batch)
        tokens_sizes = [e["tokens_bytes"] for e in reference.manifest["shards"]]
        open_block = min(50 * 2**20, statistics.median(tokens_sizes))
        print(
            f"range mode: {single:,.0f} bytes fetched per docs[i] (document mean {doc_bytes:,.0f} B, "
            f"{single_s * 1e3:.1f} ms each); take(512 random) {coalesced:,.0f} B/doc "
            f"in {take_s * 1e3:.0f} ms (coalesced; {take_s / len(batch) * 1e3:.2f} ms/doc); "
            f"fs.open() default block would read up to {open_block:,.0f} B per first touch"
        )

        zarr_dir = work / "corpus.zarr"
        convert_corpus(local, zarr_dir)
        print(f"zarr ratio (generated corpus): {stored_bytes(zarr_dir) / stored_bytes(local):.3f}")
        sample = Path(__file__).resolve().parents[1] / "shards" / "sample"
        if (sample / "manifest.json").exists():
            convert_corpus(sample, work / "sample.zarr")
            print(
                f"zarr ratio (shards/sample): {stored_bytes(work / 'sample.zarr') / stored_bytes(sample):.3f} "
                f"({stored_bytes(sample):,} -> {stored_bytes(work / 'sample.zarr'):,} bytes)"
            )
        print(f"peak RSS {peak_rss_mb():.0f} MiB, RssAnon now {rss_anon_mb():.0f} MiB")
    finally:
        process.terminate()
        process.wait(10)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
