"""Benchmark: block schedules of the per-rank layout (issue #27, item 1).

Over a :class:`~mixle.testing.VirtualDocuments` corpus (hashed documents: no disk, no
page cache), rank 3 of ``--world-size``, interleaved in the same run (medians of CPU
time, ``time.process_time``; wall beside it):

(1) steady throughput: ``--batches`` batches of the per-rank layout without a schedule
    against the same stream with ``BlockSchedule`` ``block:T,4*block`` (phase 0 for the
    first half of the batches, then rows of 4x the block; the same tokens a step)
    (target: >= 0.9x the unscheduled rate);
(2) resume: ``load_state_dict`` + first batch on a fresh corpus object at epoch
    ``--epoch`` (the first batch there): unscheduled, a schedule whose boundary lies in
    epoch 0 (the epoch's start is capped at it: no earlier epoch is counted), and one
    whose boundary lies beyond ``--epoch`` (every earlier epoch's steps are counted from
    its order). Reported as ratios to the unscheduled resume; the documented cost of
    the last is about one epoch plan per earlier epoch (target: <= epoch + 2 times the
    unscheduled resume, i.e. O(epochs x documents), nothing worse).

    python -m tools.bench_rank_phases              # 2M documents
    python -m tools.bench_rank_phases --quick      # 200k documents
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from mixle.data import BlockSchedule, StreamingCorpus
from mixle.testing import VirtualDocuments
from tools._bench import interleaved, medians


def _corpus(args: argparse.Namespace, schedule: BlockSchedule | None) -> StreamingCorpus:
    documents = VirtualDocuments(args.documents, mean_length=args.mean_length, seed=1)
    return StreamingCorpus(
        documents,
        rank=3,
        world_size=args.world_size,
        block=args.block,
        batch_size=args.batch_size,
        boundary_id=0,
        block_schedule=schedule,
    )


def _schedule(args: argparse.Namespace, steps: int) -> BlockSchedule:
    tokens = args.world_size * args.batch_size * args.block
    return BlockSchedule([(steps * tokens, args.block), (None, 4 * args.block)])


def _timed(run: Any) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - wall, time.process_time() - cpu


def throughput(args: argparse.Namespace) -> dict[str, Any]:
    kinds = ("unscheduled", "scheduled")
    corpora = {
        "unscheduled": _corpus(args, None),
        "scheduled": _corpus(args, _schedule(args, args.batches // 2)),
    }
    for corpus in corpora.values():
        corpus.num_batches(0)  # plan epoch 0 outside the timings
    samples: dict[str, dict[str, list[float]]] = {"wall": {k: [] for k in kinds}, "cpu": {}}
    samples["cpu"] = {k: [] for k in kinds}
    for round_ in range(args.rounds):
        for kind in interleaved(kinds, round_):
            corpus = corpora[kind]

            def run(corpus: StreamingCorpus = corpus) -> None:
                for _, _ in zip(range(args.batches), corpus.iter_epoch(0), strict=False):
                    pass

            wall, cpu = _timed(run)
            samples["wall"][kind].append(args.batches / wall)
            samples["cpu"][kind].append(args.batches / cpu)
    rates = {clock: medians(values) for clock, values in samples.items()}
    return {
        "batches_per_s": rates,
        "ratio_cpu": rates["cpu"]["scheduled"] / rates["cpu"]["unscheduled"],
        "ratio_wall": rates["wall"]["scheduled"] / rates["wall"]["unscheduled"],
    }


def resume(args: argparse.Namespace) -> dict[str, Any]:
    kinds = ("unscheduled", "boundary in epoch 0", f"boundary after epoch {args.epoch}")
    probe = _corpus(args, None)
    steps = [probe.num_batches(e) for e in range(args.epoch + 1)]
    schedules = {
        kinds[0]: None,
        kinds[1]: _schedule(args, max(steps[0] // 2, 1)),
        kinds[2]: _schedule(args, sum(steps) + 1),
    }
    states = {}
    for kind, schedule in schedules.items():
        corpus = _corpus(args, schedule)
        corpus.seek(args.epoch, 0)
        states[kind] = json.loads(json.dumps(corpus.state_dict()))
    samples: dict[str, dict[str, list[float]]] = {
        clock: {k: [] for k in kinds} for clock in ("wall", "cpu")
    }
    for round_ in range(args.rounds):
        for kind in interleaved(kinds, round_):
            corpus = _corpus(args, schedules[kind])

            def run(corpus: StreamingCorpus = corpus, state: Any = states[kind]) -> None:
                corpus.load_state_dict(state)
                next(corpus.batches())

            wall, cpu = _timed(run)
            samples["wall"][kind].append(wall)
            samples["cpu"][kind].append(cpu)
    seconds = {clock: medians(values) for clock, values in samples.items()}
    base = seconds["cpu"][kinds[0]]
    return {
        "seconds": seconds,
        "ratio_cpu": {kind: seconds["cpu"][kind] / base for kind in kinds},
        "spread_cpu": {k: statistics.pstdev(v) for k, v in samples["cpu"].items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--documents", type=int, default=2_000_000)
    parser.add_argument("--quick", action="store_true", help="200k documents")
    parser.add_argument("--mean-length", type=int, default=600)
    parser.add_argument("--world-size", type=int, default=8)
    parser.add_argument("--block", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--epoch", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.quick:
        args.documents = 200_000
    print(
        f"corpus: VirtualDocuments {args.documents:,} x ~{args.mean_length} tokens; rank 3 of "
        f"{args.world_size}, block {args.block}, batch {args.batch_size}; {args.rounds} "
        "interleaved rounds (medians)"
    )
    print(json.dumps({"throughput": throughput(args), "resume": resume(args)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
