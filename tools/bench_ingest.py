"""Benchmark ``mixle ingest`` (issue #4) against same-run baselines.

Measures, interleaving baseline and ingest runs and taking medians (the machine is
shared, so only same-run ratios mean anything):

1. flat ``.npz`` (uncompressed, memory-mapped) import vs ``ndarray.tofile`` of the
   same token bytes (target >= 0.5x);
2. Megatron ``.bin/.idx`` import vs the same ``tofile`` floor (target >= 0.3x);
3. JSONL tokens/s with 1 and 2 workers (target >= 1.6x);
4. peak memory of ingesting a 1 GB and a 4 GB flat input in a fresh process,
   ``ru_maxrss`` (coordinator and workers) and the sampled peak ``RssAnon``
   (target: the two sizes within 20%).

Data lives under ``--dir`` (default /tmp/ingest-bench) and is deleted at the end.

    python -m tools.bench_ingest            # full run (about 10 minutes, ~12 GB disk)
    python -m tools.bench_ingest --quick    # smoke run in seconds
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from mixle.corpus import ingest  # noqa: E402

_CHUNK = 1 << 24


def _rss_anon_kb() -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    return 0


def make_flat(directory: Path, tokens: int, seed: int) -> tuple[Path, Path]:
    """Write ``flat.npz`` and ``mega.bin/.idx`` with the same uint16 documents (~1000 ids each)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(200, 1800, size=tokens // 1000 + 2)
    ends = np.cumsum(lengths)
    lengths = lengths[: int(np.searchsorted(ends, tokens)) + 1]
    lengths[-1] -= int(lengths.sum()) - tokens
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    token_path = directory / "flat.tokens.npy"
    array = np.lib.format.open_memmap(token_path, mode="w+", dtype=np.uint16, shape=(tokens,))
    for start in range(0, tokens, _CHUNK):
        stop = min(start + _CHUNK, tokens)
        array[start:stop] = rng.integers(0, 50257, size=stop - start, dtype=np.uint16)
    array.flush()
    del array
    np.save(directory / "flat.offsets.npy", offsets)
    # Megatron pair over the same bytes: one sequence per document.
    with open(token_path, "rb") as handle:
        np.lib.format.read_magic(handle)
        np.lib.format.read_array_header_1_0(handle)
        skip = handle.tell()
    with open(directory / "mega.bin", "wb") as out, open(token_path, "rb") as src:
        src.seek(skip)
        shutil.copyfileobj(src, out, 1 << 24)
    sizes = lengths.astype("<i4")
    pointers = (offsets[:-1] * 2).astype("<i8")
    with open(directory / "mega.idx", "wb") as idx:
        idx.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(sizes), len(sizes) + 1))
        idx.write(sizes.tobytes() + pointers.tobytes())
        idx.write(np.arange(len(sizes) + 1, dtype="<i8").tobytes())
    return token_path, directory / "mega.bin"


def tofile_floor(token_path: Path, target: Path) -> float:
    """Seconds to write the same token bytes with ``ndarray.tofile`` (read via mmap)."""
    started = time.perf_counter()
    array = np.load(token_path, mmap_mode="r")
    with open(target, "wb") as handle:
        for start in range(0, array.shape[0], _CHUNK):
            array[start : start + _CHUNK].tofile(handle)
        handle.flush()
        os.fsync(handle.fileno())
    seconds = time.perf_counter() - started
    os.unlink(target)
    return seconds


def tofile_sha_floor(token_path: Path, target: Path) -> float:
    """Like :func:`tofile_floor` plus SHA-256 of the bytes (the format requires a checksum)."""
    import hashlib

    started = time.perf_counter()
    array = np.load(token_path, mmap_mode="r")
    digest = hashlib.sha256()
    with open(target, "wb") as handle:
        for start in range(0, array.shape[0], _CHUNK):
            chunk = array[start : start + _CHUNK]
            digest.update(chunk.data)
            chunk.tofile(handle)
        handle.flush()
        os.fsync(handle.fileno())
    digest.hexdigest()
    seconds = time.perf_counter() - started
    os.unlink(target)
    return seconds


def timed_ingest(source: Path | str, output: Path, **options: object) -> tuple[float, int]:
    started = time.perf_counter()
    summary = ingest(source, output, overwrite=True, progress=False, **options)  # type: ignore[arg-type]
    seconds = time.perf_counter() - started
    shutil.rmtree(output)
    return seconds, summary.tokens


def compare_with_floor(
    name: str, source: Path | str, token_path: Path, work: Path, reps: int, workers: int
) -> dict[str, float]:
    ours, floor, floor_sha = [], [], []
    tokens = 0
    for _ in range(reps):
        floor.append(tofile_floor(token_path, work / "floor.bin"))
        seconds, tokens = timed_ingest(source, work / "out", workers=workers)
        ours.append(seconds)
        floor_sha.append(tofile_sha_floor(token_path, work / "floor.bin"))
    ours_s, floor_s, sha_s = (statistics.median(v) for v in (ours, floor, floor_sha))
    result = {
        "tokens": tokens,
        "ingest_tokens_per_s": tokens / ours_s,
        "tofile_tokens_per_s": tokens / floor_s,
        "ratio": floor_s / ours_s,
        "ratio_to_tofile_plus_sha256": sha_s / ours_s,
    }
    print(
        f"{name} (workers={workers}): ingest {tokens / ours_s / 1e6:.1f} M tokens/s, "
        f"tofile floor {tokens / floor_s / 1e6:.1f} M tokens/s, ratio {floor_s / ours_s:.2f}x; "
        f"tofile+sha256 {tokens / sha_s / 1e6:.1f} M tokens/s, ratio {sha_s / ours_s:.2f}x "
        f"(median of {reps})"
    )
    return result


def make_jsonl(path: Path, target_bytes: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    written = 0
    with open(path, "w") as handle:
        while written < target_bytes:
            lines = [
                json.dumps({"input_ids": rng.integers(0, 50257, size=int(n)).tolist()}) + "\n"
                for n in rng.integers(100, 1500, size=200)
            ]
            text = "".join(lines)
            handle.write(text)
            written += len(text)


def _burn(steps: int) -> int:
    total = 0
    for i in range(steps):
        total += i * i
    return total


def cpu_ceiling() -> float:
    """Speed-up of a pure-Python CPU burn from 1 to 2 processes right now (spawn pool).

    The machine is shared: when other jobs keep both cores busy, no program can scale,
    so the JSONL speed-up is reported next to this same-run ceiling.
    """
    import concurrent.futures
    import multiprocessing

    jobs = [4_000_000] * 4
    started = time.perf_counter()
    for steps in jobs:
        _burn(steps)
    one = time.perf_counter() - started
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=context) as pool:
        list(pool.map(_burn, [1, 1]))  # start both workers before timing
        started = time.perf_counter()
        list(pool.map(_burn, jobs))
        two = time.perf_counter() - started
    return one / two


def jsonl_scaling(path: Path, work: Path, reps: int, unit_size: int) -> dict[str, float]:
    one, two, ceiling = [], [], []
    tokens = 0
    for _ in range(reps):
        ceiling.append(cpu_ceiling())
        seconds, tokens = timed_ingest(path, work / "out", workers=1, unit_size=unit_size)
        one.append(seconds)
        seconds, tokens = timed_ingest(path, work / "out", workers=2, unit_size=unit_size)
        two.append(seconds)
    one_s, two_s = statistics.median(one), statistics.median(two)
    top = statistics.median(ceiling)
    print(
        f"JSONL ({path.stat().st_size / 1e6:.0f} MB): 1 worker {tokens / one_s / 1e6:.2f} M tokens/s, "
        f"2 workers {tokens / two_s / 1e6:.2f} M tokens/s, speed-up {one_s / two_s:.2f}x; "
        f"same-run CPU-burn ceiling {top:.2f}x; load average {os.getloadavg()[0]:.1f} "
        f"(median of {reps})"
    )
    return {
        "tokens": tokens,
        "one_worker_tokens_per_s": tokens / one_s,
        "two_workers_tokens_per_s": tokens / two_s,
        "speedup": one_s / two_s,
        "cpu_ceiling": top,
    }


_RSS_CHILD = """
import json, resource, sys, threading, time
sys.path.insert(0, sys.argv[4])
from mixle.corpus import ingest
peak = [0]
def sample():
    while True:
        with open('/proc/self/status') as f:
            for line in f:
                if line.startswith('RssAnon:'):
                    peak[0] = max(peak[0], int(line.split()[1]))
        time.sleep(0.05)
threading.Thread(target=sample, daemon=True).start()
summary = ingest(sys.argv[1], sys.argv[2], workers=int(sys.argv[3]), progress=False, overwrite=True)
# VmHWM, not ru_maxrss: Linux carries ru_maxrss of the parent across exec, so the
# benchmark's own page cache would show up here.
with open('/proc/self/status') as f:
    own = next(int(line.split()[1]) for line in f if line.startswith('VmHWM:'))
kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"maxrss_kb": own, "children_maxrss_kb": kids, "rss_anon_peak_kb": peak[0], "tokens": summary.tokens}))
"""


def peak_rss(token_dir: Path, work: Path, workers: int) -> dict[str, int]:
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            _RSS_CHILD,
            str(token_dir),
            str(work / "rss-out"),
            str(workers),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    shutil.rmtree(work / "rss-out")
    values: dict[str, int] = json.loads(result.stdout.strip().splitlines()[-1])
    return values


def run_flat(root: Path, gigabytes: float, reps: int, workers: int) -> dict[str, object]:
    results: dict[str, object] = {}
    flat = root / "flat"
    flat.mkdir()
    token_path, mega = make_flat(flat, int(gigabytes * 1e9 / 2), seed=0)
    for count in sorted({1, workers}):
        results[f"npz_pair_w{count}"] = compare_with_floor(
            "flat tokens+offsets", token_path, token_path, root, reps, count
        )
        results[f"megatron_w{count}"] = compare_with_floor(
            "Megatron .bin/.idx", str(mega)[:-4], token_path, root, reps, count
        )
    shutil.rmtree(flat)
    return results


def run_rss(root: Path, sizes: list[float]) -> dict[str, object]:
    rss: dict[str, object] = {}
    for gb in sizes:
        folder = root / f"rss-{gb}"
        folder.mkdir()
        make_flat(folder, int(gb * 1e9 / 2), seed=2)
        for name in ("mega.bin", "mega.idx"):
            (folder / name).unlink()
        rss[f"{gb}GB"] = value = peak_rss(folder, root, workers=2)
        print(
            f"peak memory, {gb} GB input, 2 workers: coordinator VmHWM {value['maxrss_kb'] / 1024:.0f} MiB, "
            f"workers maxrss {value['children_maxrss_kb'] / 1024:.0f} MiB, coordinator RssAnon peak "
            f"{value['rss_anon_peak_kb'] / 1024:.0f} MiB"
        )
        shutil.rmtree(folder)
    small, large = (rss[f"{gb}GB"] for gb in sizes)
    assert isinstance(small, dict) and isinstance(large, dict)
    worst_small = max(small["maxrss_kb"], small["children_maxrss_kb"])  # per process
    worst_large = max(large["maxrss_kb"], large["children_maxrss_kb"])
    ratio = worst_large / worst_small
    print(f"peak RSS ratio {sizes[1]} GB / {sizes[0]} GB input: {ratio:.2f} (target <= 1.20)")
    rss["ratio"] = ratio
    return rss


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--dir", default="/tmp/ingest-bench", help="scratch directory (deleted at the end)"
    )
    parser.add_argument(
        "--flat-gb", type=float, default=1.0, help="flat/Megatron input size in GB of tokens"
    )
    parser.add_argument("--jsonl-mb", type=float, default=256, help="JSONL input size in MB")
    parser.add_argument(
        "--rss-gb", type=float, nargs=2, default=[1.0, 4.0], help="the two input sizes for peak RSS"
    )
    parser.add_argument(
        "--reps", type=int, default=3, help="interleaved repetitions (medians reported)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=2,
        help="flat/Megatron are measured with 1 and this many workers",
    )
    parser.add_argument(
        "--parts",
        default="flat,jsonl,rss",
        help="comma-separated subset of flat,jsonl,rss to run",
    )
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    args = parser.parse_args()
    if args.quick:
        args.flat_gb, args.jsonl_mb, args.rss_gb, args.reps = 0.02, 8, [0.01, 0.04], 1
    root = Path(args.dir)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    results: dict[str, object] = {}
    try:
        parts = set(args.parts.split(","))
        if "flat" in parts:
            results.update(run_flat(root, args.flat_gb, args.reps, args.workers))
        if "jsonl" in parts:
            jsonl = root / "data.jsonl"
            make_jsonl(jsonl, int(args.jsonl_mb * 1e6), seed=1)
            unit = max(int(args.jsonl_mb * 1e6) // 8, 1 << 16)
            results["jsonl"] = jsonl_scaling(jsonl, root, args.reps, unit)
            jsonl.unlink()
        if "rss" in parts:
            results["rss"] = run_rss(root, args.rss_gb)
        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(
            f"benchmark process: maxrss {own / 1024:.0f} MiB, RssAnon {_rss_anon_kb() / 1024:.0f} MiB"
        )
        print(json.dumps(results, indent=1, default=float))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
