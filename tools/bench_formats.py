"""Benchmark ingestion per input format, against another checkout, and the cost of
record origins (issue #28, item 1: the format registry must not slow ingest down).

Inputs (one per built-in format, generated into ``--dir``, tmpfs by default so that
page-cache eviction cannot favour one side): JSONL of ids, Parquet, a directory of
``.npy`` documents, ``.npz``, a Megatron ``.bin/.idx`` pair and text files.

1. ``ingest(..., workers=1)`` of each input in a fresh process per run, wall and CPU
   time, rounds interleaved in alternating order between this checkout and, with
   ``--baseline DIR``, the ``mixle`` package in ``DIR`` (e.g. an export of another
   commit: ``git archive 3db65e4 mixle | tar -x -C /tmp/before``); reported: medians
   and the candidate/baseline ratio of CPU time.
2. Reading every unit of each input in this process, asking each batch for its
   :class:`~mixle.corpus.ingestion.formats.RecordOrigins`; reported: the CPU time
   inside ``record_origins`` as a fraction of the CPU time of reading (timed around
   the call itself: two separate runs differ by more than it costs on a loaded machine).

    python -m tools.bench_formats --baseline /tmp/before     # ~2 minutes
    python -m tools.bench_formats --quick                    # smoke run, seconds
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mixle.corpus.ingestion.input_readers import ReadOptions, read_unit, record_origins
from mixle.corpus.ingestion.inputs import plan_units, resolve_inputs
from tests.corpus.ingest_helpers import write_megatron

ROOT = Path(__file__).resolve().parents[1]

# CPU time of the ingest call: this process and any it waited for (a worker).
_CHILD = """
import json, resource, sys, time
from mixle.corpus import ingest
def cpu():
    return sum(
        usage.ru_utime + usage.ru_stime
        for usage in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    )
inputs, output, options = json.loads(sys.argv[1])
start, begin = time.perf_counter(), cpu()
ingest(inputs, output, workers=1, **options)
print(json.dumps({"wall": time.perf_counter() - start, "cpu": cpu() - begin}))
"""


def make_inputs(directory: Path, documents: int) -> dict[str, tuple[list[str], dict[str, object]]]:
    """Write one input per format holding ``documents`` documents of 50..950 ids."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(50, 950, size=documents)
    tokens = rng.integers(0, 50_000, size=int(lengths.sum()), dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    docs = [tokens[offsets[i] : offsets[i + 1]] for i in range(documents)]
    with open(directory / "a.jsonl", "w") as handle:
        for doc in docs:
            handle.write(json.dumps({"input_ids": doc.tolist()}) + "\n")
    pq.write_table(
        pa.table({"input_ids": [doc.tolist() for doc in docs]}),
        directory / "a.parquet",
        row_group_size=2000,
    )
    (directory / "npy").mkdir()
    for index, doc in enumerate(docs[: documents // 4]):
        np.save(directory / "npy" / f"{index:06d}.npy", doc.astype(np.uint16))
    np.savez(directory / "a.npz", tokens=tokens.astype(np.uint16), offsets=offsets)
    write_megatron(directory / "m", [[doc.astype(np.int32)] for doc in docs], np.dtype(np.int32))
    (directory / "text").mkdir()
    words = np.array(["alpha", "beta", "gamma", "delta", "epsilon"])
    for index in range(documents // 20):
        body = " ".join(words[rng.integers(0, 5, size=800)])
        (directory / "text" / f"{index:05d}.txt").write_text(body + "\n\n" + body + "\n")
    shard = {"shard_size": 1 << 24, "unit_size": 1 << 24, "vocab_size": 50_000}
    return {
        "jsonl": ([str(directory / "a.jsonl")], shard),
        "parquet": ([str(directory / "a.parquet")], shard),
        "npy": ([str(directory / "npy")], shard),
        "npz": ([str(directory / "a.npz")], shard),
        "megatron": ([str(directory / "m")], shard),
        "text": ([str(directory / "text")], {"split": "paragraphs"}),
    }


def _ingest(
    tree: Path, inputs: list[str], output: Path, options: dict[str, object]
) -> dict[str, float]:
    shutil.rmtree(output, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=str(tree))
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps([inputs, str(output), options])],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(result.stdout.splitlines()[-1]))


def _read_cpu(inputs: list[str]) -> tuple[float, float]:
    """CPU seconds of reading every unit of ``inputs``, and of those, inside
    ``record_origins``."""
    files = resolve_inputs(inputs)
    options = ReadOptions(("input_ids", "tokens"), None, "paragraphs")
    start, origins = time.process_time(), 0.0
    for unit in plan_units(files, 1 << 24):
        for batch in read_unit(unit, options):
            before = time.process_time()
            record_origins(unit, batch)
            origins += time.process_time() - before
    return time.process_time() - start, origins


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", default="/dev/shm/mixle-format-bench", help="scratch directory")
    parser.add_argument("--documents", type=int, default=40_000, help="documents per input")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--baseline", type=Path, help="a directory holding another `mixle`")
    parser.add_argument("--quick", action="store_true", help="2,000 documents, 1 round")
    args = parser.parse_args()
    if args.quick:
        args.documents, args.rounds = 2000, 1
    root = Path(args.dir)
    shutil.rmtree(root, ignore_errors=True)
    (root / "in").mkdir(parents=True)
    trees = {"candidate": ROOT} | ({"baseline": args.baseline} if args.baseline else {})
    try:
        cases = make_inputs(root / "in", args.documents)
        ingest: dict[tuple[str, str], list[dict[str, float]]] = {}
        reading: dict[str, list[tuple[float, float]]] = {}
        for round_ in range(args.rounds):
            order = list(trees) if round_ % 2 == 0 else list(trees)[::-1]
            for name, (inputs, options) in cases.items():
                for kind in order:
                    run = _ingest(trees[kind], inputs, root / "out" / kind, options)
                    ingest.setdefault((name, kind), []).append(run)
                reading.setdefault(name, []).append(_read_cpu(inputs))
        print(f"{args.documents} documents per input, {args.rounds} rounds, medians")
        print("format    tree       wall s   cpu s   cpu vs baseline")
        for name in cases:
            for kind in trees:
                runs = ingest[(name, kind)]
                wall = statistics.median(r["wall"] for r in runs)
                cpu = statistics.median(r["cpu"] for r in runs)
                ratio = ""
                if "baseline" in trees:
                    base = statistics.median(r["cpu"] for r in ingest[(name, "baseline")])
                    ratio = f"{cpu / base:.3f}x"
                print(f"{name:9} {kind:10} {wall:7.3f} {cpu:7.3f}   {ratio}")
        print("format    read cpu s   in record_origins   share")
        for name in cases:
            read = statistics.median(total for total, _ in reading[name])
            origins = statistics.median(part for _, part in reading[name])
            print(f"{name:9} {read:10.3f} {origins:19.4f}   {origins / read:.2%}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
