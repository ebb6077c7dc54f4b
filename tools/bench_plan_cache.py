"""Benchmark: restart in milliseconds with the epoch-plan cache (issue #17, item 2).

Generates a ``--documents``-document corpus (``tools/bench_stream.generate``: uint16
tokens, geometric lengths with mean ``--mean-length``) under ``--workdir``, then:

1. planning: a fresh ``StreamingCorpus`` plans epoch 0 without a store (the
   permutation, the length gather, the layout), per-rank (rank 3 of 8) and global;
   then with a ``PlanFiles`` store, which also writes the plan file (medians of
   ``--rounds``). Target: <= 1 s per 10M documents. CPU time (``time.process_time``)
   is reported beside wall time: on a shared machine it is the figure that other
   jobs do not inflate.
   The per-rank plan is also broken down (CPU, interleaved rounds): the permutation
   ``global_document_order`` alone, the gather of the lengths in that order (the
   int64 fancy index planning used before, against ``take`` on the narrow
   ``length_table`` it uses now) and the layout (cumulative sum).
2. restart: for each layout and for a cursor at the start, middle and end of epoch 0,
   a *fresh Python process* (imports done before the clock starts) opens the corpus,
   builds the ``StreamingCorpus`` with the store, loads the state and produces the
   first batch; the median over ``--rounds`` processes. Target: < 50 ms when cached.
   Then, at the middle cursor, a restart whose plan file has one changed bit in its
   ``counts`` (read at open): the plan is rebuilt from the corpus and the file
   rewritten before the first batch (one process per round, the file damaged again
   before each): what a damaged file costs against a run without a store.
3. mixture restart (issue #14): a 2-source ``Mixture`` (the ``--documents`` corpus,
   weight 0.7, and a ``--small-documents`` corpus, weight 0.3, which runs through
   many epochs), rank 3 of 8; a fresh process opens both corpora, builds the mixture,
   ``load_state_dict`` to a global row and produces the first batch, at row 0, the
   middle of the big source's first epoch and row 10**9 (epoch ~18,000 of the big
   source): with the plans cached by an earlier process (``--rounds`` processes,
   medians) and, once each, without a store (every touched epoch planned).

    python -m tools.bench_plan_cache                  # 10M documents
    python -m tools.bench_plan_cache --documents 1000000 --rounds 3
    python -m tools.bench_plan_cache --only mixture   # just part 3
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
from typing import Any

import numpy as np

from mixle.corpus import open_corpus
from mixle.corpus.storage.plan_cache import PlanFiles
from mixle.data import Mixture, MixtureSource
from mixle.data._order import global_document_order, length_table
from mixle.data._packing import StreamLayout
from mixle.data.streaming_corpus import StreamingCorpus
from tools.bench_stream import generate

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


MIXTURE_CHILD = """
import json, sys, time
sys.path.insert(0, {root!r})
from mixle.corpus import open_corpus
from mixle.corpus.storage.plan_cache import PlanFiles
from mixle.data import Mixture, MixtureSource
spec, state = json.loads(sys.argv[1]), json.loads(sys.argv[2])
start, cpu = time.perf_counter(), time.process_time()
sources = [MixtureSource(open_corpus(path), weight, name) for name, path, weight in spec["sources"]]
store = PlanFiles({plans!r}) if spec["store"] else None
mixture = Mixture(sources, plan_store=store, **spec["options"])
mixture.load_state_dict(state)
next(iter(mixture))
print((time.perf_counter() - start) * 1e3, (time.process_time() - cpu) * 1e3)
"""


def _options(layout: str, block: int, batch_size: int) -> dict[str, object]:
    # The permutation order: the order whose plans a store keeps (not the default blocks).
    return {
        "block": block,
        "batch_size": batch_size,
        "layout": layout,
        "order": "permutation",
        **SHAPES[layout],
    }


def _fresh_process(child: str, *arguments: object) -> tuple[float, float]:
    """``(wall ms, CPU ms)`` that a fresh ``python -c child`` process prints last."""
    result = subprocess.run(
        [sys.executable, "-c", child, *map(json.dumps, arguments)],
        check=True,
        capture_output=True,
        text=True,
    )
    wall, cpu = result.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


def _damage_counts(plans: Path) -> None:
    """Flip the lowest bit of ``counts[0]`` (the row count) of the one plan file."""
    (path,) = plans.iterdir()
    data = bytearray(path.read_bytes())
    length = int.from_bytes(data[8:16], "little")
    header = json.loads(bytes(data[48 : 48 + length]))
    body = -(-(48 + length) // 64) * 64
    data[body + header["arrays"]["counts"]["offset"]] ^= 1
    path.write_bytes(bytes(data))


def _cpu_ms(function: Any) -> float:
    start = time.process_time()
    function()
    return (time.process_time() - start) * 1e3


def plan_breakdown(documents: Any, rounds: int) -> None:
    """CPU medians of the parts of planning epoch 0 (rank 3 of 8), interleaved rounds."""
    lengths = np.asarray(documents.lengths, dtype=np.int64)
    table = length_table(lengths)
    order = global_document_order(len(lengths), seed=0, epoch=0)
    parts: dict[str, list[float]] = {
        "permutation": [],
        "gather, int64 fancy index (before)": [],
        f"gather, {table.dtype} table take (now)": [],
        "layout of the rank (cumsum)": [],
    }
    for _ in range(rounds):
        parts["permutation"].append(
            _cpu_ms(lambda: global_document_order(len(lengths), seed=0, epoch=0))
        )
        parts["gather, int64 fancy index (before)"].append(_cpu_ms(lambda: lengths[order]))
        parts[f"gather, {table.dtype} table take (now)"].append(_cpu_ms(lambda: table.take(order)))
        own = table.take(order)[3::8]
        parts["layout of the rank (cumsum)"].append(
            _cpu_ms(lambda own=own: StreamLayout.build(order[3::8], own, False))
        )
    print(f"  per-rank plan, parts (CPU ms, median of {rounds}):")
    for name, samples in parts.items():
        print(f"    {name:<38} {statistics.median(samples):8.1f}")


def mixture_restart(big: Path, small: Path, plans: Path, root: str, args: Any) -> None:
    """Part 3: a fresh process resumes a 2-source mixture, with and without plans."""
    spec: dict[str, Any] = {
        "sources": [["big", str(big), 0.7], ["small", str(small), 0.3]],
        "options": {"block": args.block, "batch_size": args.batch_size, "rank": 3, "world_size": 8},
    }
    child = MIXTURE_CHILD.format(root=root, plans=str(plans))
    opened = [MixtureSource(open_corpus(p), w, n) for n, p, w in spec["sources"]]
    mixture = Mixture(opened, plan_store=PlanFiles(plans), **spec["options"])
    size = mixture.global_batch_size
    middle = int(mixture.rows[0].rows_per_epoch / 0.7 / 2) // size * size
    template = mixture.state_dict()
    print(
        f"mixture: big {mixture.rows[0].num_documents:,} documents "
        f"({mixture.rows[0].rows_per_epoch:,} rows an epoch), small "
        f"{mixture.rows[1].num_documents:,} ({mixture.rows[1].rows_per_epoch:,} rows an epoch)"
    )
    for label, row in (("start", 0), ("middle", middle), ("row 10**9", 10**9 // size * size)):
        state = {**template, "row": row}
        _fresh_process(child, {**spec, "store": True}, state)  # plans the epochs once
        cached = [_fresh_process(child, {**spec, "store": True}, state) for _ in range(args.rounds)]
        wall = statistics.median(c[0] for c in cached)
        cpu = statistics.median(c[1] for c in cached)
        plain_wall, plain_cpu = _fresh_process(child, {**spec, "store": False}, state)
        print(
            f"  fresh process at {label:>9} (row {row:,}): open + Mixture + load_state_dict + "
            f"first batch, plans cached {wall:.1f} ms wall, {cpu:.1f} ms CPU (target < 50 ms: "
            f"{'met' if cpu < 50 else 'NOT met'} CPU, {'met' if wall < 50 else 'NOT met'} wall; "
            f"median of {len(cached)}); without a store {plain_wall:.0f} ms wall, "
            f"{plain_cpu:.0f} ms CPU"
        )


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
    parser.add_argument("--small-documents", type=int, default=100_000)
    parser.add_argument(
        "--only", choices=["streaming", "mixture"], help="run only part 1-2 or part 3"
    )
    parser.add_argument("--keep", action="store_true", help="keep the generated corpus")
    args = parser.parse_args()
    path, plans = args.workdir / "corpus", args.workdir / "plans"
    small = args.workdir / "small"
    try:
        if not (path / "manifest.json").exists():
            generate(path, int(args.documents * args.mean_length), args.mean_length, seed=1)
        shutil.rmtree(plans, ignore_errors=True)
        documents = open_corpus(path)
        count = len(documents)
        print(f"corpus: {count:,} documents, {documents.num_tokens:,} tokens")
        root = str(Path(__file__).resolve().parents[1])
        if args.only != "streaming":
            if not (small / "manifest.json").exists():
                tokens = int(args.small_documents * args.mean_length)
                generate(small, tokens, args.mean_length, seed=2)
            mixture_restart(path, small, plans, root, args)
            shutil.rmtree(plans, ignore_errors=True)
            if args.only == "mixture":
                return 0
        child = CHILD.format(root=root, corpus=str(path), plans=str(plans))
        plan_breakdown(documents, args.rounds)
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
                runs = [_fresh_process(child, options, state) for _ in range(args.rounds)]
                samples, cpus = [r[0] for r in runs], [r[1] for r in runs]
                median, median_cpu = statistics.median(samples), statistics.median(cpus)
                print(
                    f"  fresh process, cached plan, {label:>6} ({unit} {position}): open + "
                    f"load_state_dict + first batch {median:.1f} ms wall, {median_cpu:.1f} ms "
                    f"CPU (target < 50 ms: {'met' if median < 50 else 'NOT met'} wall, "
                    f"{'met' if median_cpu < 50 else 'NOT met'} CPU; median of {len(samples)})"
                )
            state = {**template, "epoch": 0, unit: end // 2}
            runs = []
            for _ in range(args.rounds):
                _damage_counts(plans)
                runs.append(_fresh_process(child, options, state))
            print(
                f"  fresh process, plan file with a changed bit (rebuilt and rewritten), "
                f"middle: {statistics.median(r[0] for r in runs):.0f} ms wall, "
                f"{statistics.median(r[1] for r in runs):.0f} ms CPU (median of {len(runs)})"
            )
    finally:
        if not args.keep:
            shutil.rmtree(args.workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
