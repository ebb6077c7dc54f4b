"""Benchmark the commit of a distributed ingest (issue #15): 1,000 small units.

The units of one plan are run once into a template output; every round copies the
template (then ``sync``, so the unit files are on disk as after a real run) and
times :func:`mixle.corpus.commit_ingest` on the copy. Two variants, interleaved
round by round, medians reported:

* ``parallel``: the shipped commit (the work directory's files deleted by 16 threads);
* ``serial``: the same commit with one deleting thread (the baseline: what deleting
  the unit directories one by one costs on this disk).

For each: wall time of the call, the moment the manifest appeared (relative to the
start), the process CPU time, and the bytes read (``rchar`` of ``/proc/self/io``)
against the bytes of token and offsets files published.

With ``--s3-units N`` (N > 0) also: the commit of N units run straight into a moto S3
server on 127.0.0.1 (records read in one concurrent batch, shards copied server-side,
manifest last), fresh units every round.

Usage::

    python -m tools.bench_commit --units 1000 --rounds 3 --work /tmp/bench-commit
    python -m tools.bench_commit --units 1000 --rounds 3 --s3-units 200
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np

from mixle.corpus import IngestOptions, commit_ingest, open_corpus, plan_ingest, run_unit
from mixle.corpus.storage import publish as publishing

VOCAB = 50_257


def _read_chars() -> int:
    with open("/proc/self/io", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise RuntimeError("no rchar in /proc/self/io")


def write_input(path: Path, units: int, seed: int) -> None:
    """A JSONL file of ``4 * units`` documents of 200 random ids."""
    rng = np.random.default_rng(seed)
    with open(path, "w", encoding="ascii") as handle:
        for _ in range(units * 4):
            handle.write(json.dumps({"input_ids": rng.integers(0, VOCAB, 200).tolist()}) + "\n")


def make_template(work: Path, units: int) -> Path:
    """Run every unit of a ``units``-unit plan into ``work/template`` (once)."""
    template = work / "template"
    marker = work / f"template-{units}.done"
    if marker.exists():
        return template
    shutil.rmtree(template, ignore_errors=True)
    source = work / "commit-input.jsonl"
    write_input(source, units, 1)
    options = IngestOptions(vocab_size=VOCAB, unit_size=source.stat().st_size // units + 1)
    plan = plan_ingest([str(source)], options)
    for unit in plan.units:
        run_unit(plan, unit.index, template)
    marker.touch()
    return template


def commit_round(template: Path, out: Path, removers: int) -> dict[str, float]:
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run(["cp", "-a", str(template), str(out)], check=True)
    os.sync()  # the unit files reach the disk, as they have long before a real commit
    publishing._REMOVERS = removers
    before = _read_chars()
    cpu = time.process_time()
    wall = time.time()
    begin = time.perf_counter()
    commit_ingest(out)
    seconds = time.perf_counter() - begin
    cpu = time.process_time() - cpu
    read = _read_chars() - before
    manifest = open_corpus(out).manifest
    published = sum(e["tokens_bytes"] + e["offsets_bytes"] for e in manifest["shards"])
    assert not (out / ".mixle-ingest").exists()
    return {
        "commit_s": seconds,
        "cpu_s": cpu,
        "manifest_after_s": (out / "manifest.json").stat().st_mtime - wall,
        "bytes_read": read,
        "shard_bytes": published,
        "units": len(os.listdir(template / ".mixle-ingest")) - 1,
    }


def s3_rounds(work: Path, units: int, rounds: int) -> dict[str, object]:
    """Median commit time of ``units`` units run into moto S3 (fresh units per round)."""
    import uuid

    from tests.corpus._servers import moto_s3

    source = work / f"s3-input-{units}.jsonl"
    write_input(source, units, 2)
    options = IngestOptions(vocab_size=VOCAB, unit_size=source.stat().st_size // units + 1)
    plan = plan_ingest([str(source)], options)
    times, cpus = [], []
    with moto_s3() as storage:
        from mixle.corpus.storage.fs import filesystem

        filesystem("s3", storage).mkdir("bench")
        for _ in range(rounds):
            url = f"s3://bench/{uuid.uuid4().hex}"
            for unit in plan.units:
                run_unit(plan, unit.index, url, storage_options=storage)
            cpu = time.process_time()
            begin = time.perf_counter()
            commit_ingest(url, storage_options=storage)
            times.append(time.perf_counter() - begin)
            cpus.append(time.process_time() - cpu)
            print("s3", json.dumps({"commit_s": times[-1], "cpu_s": cpus[-1]}), flush=True)
    return {
        "units": len(plan.units),
        "commit_s": statistics.median(times),
        "cpu_s": statistics.median(cpus),
        "rounds_s": times,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--units", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", default="/tmp/mixle-bench-commit")
    parser.add_argument("--s3-units", type=int, default=0)
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    template = make_template(work, args.units)
    with open("/proc/loadavg", encoding="ascii") as handle:
        results: dict[str, object] = {"loadavg_at_start": handle.read().strip()}
    shipped = publishing._REMOVERS
    rounds: dict[str, list[dict[str, float]]] = {"parallel": [], "serial": []}
    for _ in range(args.rounds):
        for name, removers in (("parallel", shipped), ("serial", 1)):
            row = commit_round(template, work / f"out-{name}", removers)
            rounds[name].append(row)
            print(name, json.dumps(row), flush=True)
    publishing._REMOVERS = shipped
    for name, rows in rounds.items():
        results[name] = {
            key: statistics.median(row[key] for row in rows)
            for key in ("commit_s", "cpu_s", "manifest_after_s", "bytes_read", "shard_bytes")
        }
    results["ratio_serial_over_parallel"] = (
        results["serial"]["commit_s"] / results["parallel"]["commit_s"]  # type: ignore[index]
    )
    if args.s3_units:
        results["s3"] = s3_rounds(work, args.s3_units, args.rounds)
    results["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
