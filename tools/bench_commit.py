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

Usage::

    python tools/bench_commit.py --units 1000 --rounds 3 --work /tmp/bench-commit
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mixle.corpus import IngestOptions, commit_ingest, open_corpus, plan_ingest, run_unit
from mixle.corpus.ingestion import publishing

VOCAB = 50_257


def _read_chars() -> int:
    with open("/proc/self/io", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise RuntimeError("no rchar in /proc/self/io")


def make_template(work: Path, units: int) -> Path:
    """Run every unit of a ``units``-unit plan into ``work/template`` (once)."""
    template = work / "template"
    marker = work / f"template-{units}.done"
    if marker.exists():
        return template
    shutil.rmtree(template, ignore_errors=True)
    source = work / "commit-input.jsonl"
    rng = np.random.default_rng(1)
    with open(source, "w", encoding="ascii") as handle:
        for _ in range(units * 4):
            handle.write(json.dumps({"input_ids": rng.integers(0, VOCAB, 200).tolist()}) + "\n")
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--units", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", default="/tmp/mixle-bench-commit")
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
    results["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
