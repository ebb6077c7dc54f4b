"""Cost of the origins sidecar (issue #29 item 1): ingest time and bytes per document.

Ingests one JSONL file of many short documents (the worst case for a per-document
cost: little tokenizing work per record) with this tree and with ``--baseline``, a
copy of mixle without origins (``git archive <commit> mixle | tar -x -C DIR``), each in
a fresh process, alternating, ``--reps`` times; reports the median wall and CPU time
of both, their ratio (target <= 1.10) and ``origins.bin``'s bytes per document
(target <= 8 for line-indexed inputs). Every record also carries an id
(``"id": "doc-00000042"``); with ``--id-field`` this tree's ingest records it
(``--id-field id``: the sidecar's id column, version 2), so the figures are those of
origins with ids; without it, of origins alone (the baseline never reads the id).

    python -m tools.bench_origins --baseline /tmp/mixle-base [--documents 2000000] [--id-field]
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

ROOT = Path(__file__).resolve().parents[1]


def _write_input(path: Path, documents: int) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for number in range(documents):
            record = {"input_ids": [number % 1000, 7, 8, 9], "id": f"doc-{number:08d}"}
            handle.write(json.dumps(record) + "\n")


def _ingest(
    tree: str, source: Path, out: Path, workers: int, extra: tuple[str, ...] = ()
) -> tuple[float, float]:
    """Wall and CPU seconds (the child processes') of one ingest with ``tree``'s mixle
    (``extra``: more flags)."""
    shutil.rmtree(out, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "mixle.cli",
            "ingest",
            str(source),
            str(out),
            "-q",
            "--vocab-size",
            "1000",
            "--workers",
            str(workers),
            *extra,
        ],
        check=True,
        env=dict(os.environ, PYTHONPATH=tree),
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="a mixle tree without origins")
    parser.add_argument("--documents", type=int, default=2_000_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--dir", default="/tmp/origins-bench")
    parser.add_argument(
        "--id-field", action="store_true", help="record each document's id (--id-field id)"
    )
    args = parser.parse_args()
    extra = ("--id-field", "id") if args.id_field else ()
    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    source = work / "input.jsonl"
    _write_input(source, args.documents)
    times: dict[str, list[tuple[float, float]]] = {"baseline": [], "origins": []}
    for _ in range(args.reps):
        times["baseline"].append(_ingest(args.baseline, source, work / "base", args.workers))
        times["origins"].append(_ingest(str(ROOT), source, work / "out", args.workers, extra))
    sidecar = (work / "out" / "origins.bin").stat().st_size
    result = {
        name: {
            "wall_s": statistics.median(wall for wall, _ in runs),
            "cpu_s": statistics.median(cpu for _, cpu in runs),
        }
        for name, runs in times.items()
    }
    result["ratio_wall"] = result["origins"]["wall_s"] / result["baseline"]["wall_s"]
    result["ratio_cpu"] = result["origins"]["cpu_s"] / result["baseline"]["cpu_s"]
    result["documents"] = args.documents
    result["id_field"] = args.id_field
    result["sidecar_bytes"] = sidecar
    result["bytes_per_document"] = sidecar / args.documents
    result["load_average"] = os.getloadavg()[0]
    print(json.dumps(result, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
