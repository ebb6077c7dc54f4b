"""Benchmark: restart in milliseconds with the epoch-plan cache (issue #17, item 2).

Generates a ``--documents``-document corpus (``tools/bench_stream.generate``: uint16
tokens, geometric lengths with mean ``--mean-length``) under ``--workdir``, then:

1. planning: a fresh ``StreamingCorpus`` plans epoch 0 without a store (the
   permutation, the length gather, the layout), per-rank (rank 3 of 8) and global;
   then with a ``PlanFiles`` store, which also writes the plan file (medians of
   ``--rounds``). Target: <= 1 s per 10M documents. CPU time (``time.process_time``)
   is reported beside wall time: on a shared machine it is the figure that other
   jobs do not inflate.
2. restart: for each layout and for a cursor at the start, middle and end of epoch 0,
   a *fresh Python process* (imports done before the clock starts) opens the corpus,
   builds the ``StreamingCorpus`` with the store, loads the state and produces the
   first batch; the median over ``--rounds`` processes. Target: < 50 ms when cached.

    python tools/bench_plan_cache.py                  # 10M documents
    python tools/bench_plan_cache.py --documents 1000000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_stream import generate

from mixle.corpus import open_corpus
from mixle.corpus.storage.plan_cache import PlanFiles
from mixle.data.streaming_corpus import StreamingCorpus

SHAPES = {"per-rank": {"rank": 3, "world_size": 8}, "global": {"rank": 3, "world_size": 8}}
CHILD = """
import json, sys, time
sys.path.insert(0, {root!r})
from mixle.corpus import open_corpus
from mixle.corpus.storage.plan_cache import PlanFiles
from mixle.data.streaming_corpus import StreamingCorpus
options, state = json.loads(sys.argv[1]), json.loads(sys.argv[2])
start, cpu = time.perf_counter(), time.process_time()
corpus = StreamingCorpus(open_corpus({corpus!r}), plan_store=PlanFiles({plans!r}), **options)
corpus.load_state_dict(state)
next(iter(corpus))
print((time.perf_counter() - start) * 1e3, (time.process_time() - cpu) * 1e3)
"""


def _options(layout: str, block: int, batch_size: int) -> dict[str, object]:
    return {"block": block, "batch_size": batch_size, "layout": layout, **SHAPES[layout]}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/plan-bench"))
    parser.add_argument("--documents", type=int, default=10_000_000)
    parser.add_argument("--mean-length", type=float, default=8)
    parser.add_argument("--block", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the generated corpus")
    args = parser.parse_args()
    path, plans = args.workdir / "corpus", args.workdir / "plans"
    try:
        if not (path / "manifest.json").exists():
            generate(path, int(args.documents * args.mean_length), args.mean_length, seed=1)
        shutil.rmtree(plans, ignore_errors=True)
        documents = open_corpus(path)
        count = len(documents)
        print(f"corpus: {count:,} documents, {documents.num_tokens:,} tokens")
        root = str(Path(__file__).resolve().parents[1])
        child = CHILD.format(root=root, corpus=str(path), plans=str(plans))
        for layout in SHAPES:
            options = _options(layout, args.block, args.batch_size)
            plain, plain_cpu, stored = [], [], []
            for _ in range(args.rounds):
                shutil.rmtree(plans, ignore_errors=True)
                start, cpu = time.perf_counter(), time.process_time()
                StreamingCorpus(documents, **options).num_batches(0)  # type: ignore[arg-type]
                plain.append(time.perf_counter() - start)
                plain_cpu.append(time.process_time() - cpu)
                shutil.rmtree(plans, ignore_errors=True)
                start = time.perf_counter()
                StreamingCorpus(
                    documents,
                    plan_store=PlanFiles(plans),
                    **options,  # type: ignore[arg-type]
                ).num_batches(0)
                stored.append(time.perf_counter() - start)
            per_10m = statistics.median(plain_cpu) * 1e7 / count
            print(
                f"{layout}: plan epoch 0 {statistics.median(plain) * 1e3:.0f} ms wall, "
                f"{statistics.median(plain_cpu) * 1e3:.0f} ms CPU "
                f"({per_10m:.2f} CPU s per 10M documents, target <= 1 s: "
                f"{'met' if per_10m <= 1 else 'NOT met'}); with the store (plan + write) "
                f"{statistics.median(stored) * 1e3:.0f} ms; file "
                f"{sum(f.stat().st_size for f in plans.iterdir()) / 2**20:.0f} MiB"
            )
            corpus = StreamingCorpus(documents, plan_store=PlanFiles(plans), **options)  # type: ignore[arg-type]
            unit = "row" if layout == "global" else "batch"
            end = corpus.num_rows(0) if layout == "global" else corpus.num_batches(0)
            template = corpus.state_dict()
            for label, position in (("start", 0), ("middle", end // 2), ("end", end - 1)):
                state = {**template, "epoch": 0, unit: position}
                samples, cpus = [], []
                for _ in range(args.rounds):
                    result = subprocess.run(
                        [sys.executable, "-c", child, json.dumps(options), json.dumps(state)],
                        check=True,
                        capture_output=True,
                        text=True,
                    )
                    wall, cpu_ms = result.stdout.strip().splitlines()[-1].split()
                    samples.append(float(wall))
                    cpus.append(float(cpu_ms))
                median, median_cpu = statistics.median(samples), statistics.median(cpus)
                print(
                    f"  fresh process, cached plan, {label:>6} ({unit} {position}): open + "
                    f"load_state_dict + first batch {median:.1f} ms wall, {median_cpu:.1f} ms "
                    f"CPU (target < 50 ms: {'met' if median < 50 else 'NOT met'} wall, "
                    f"{'met' if median_cpu < 50 else 'NOT met'} CPU; median of {len(samples)})"
                )
    finally:
        if not args.keep:
            shutil.rmtree(args.workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
