"""DataLoader scaling of ``StreamingDataset``: 2 workers against 1 (issues #17 and #31,
item 5).

Writes a corpus with ``CorpusWriter`` under ``--workdir`` and measures, in interleaved
rounds (order rotated every round, medians), batches per second of
``StreamLoader(StreamingDataset(StreamingCorpus(...)), num_workers=n)`` (workers hand
over groups of batches, the default ``batches_per_item``) and of the plain
``DataLoader(StreamingDataset(...), batch_size=None, num_workers=n)`` (one batch per
item) for n = 1 and 2, and n = 0 (in-process reference), timed after the first batch
and ``--warmup`` more (worker start-up and the groups made before the first batch
arrived excluded). Target: ``StreamLoader`` with 2 workers >= 1.6x 1 worker on 2 cores.

Three same-run references say what stands between the figure and the target:

* the machine's ceiling: a pure-Python CPU burn in 1 vs 2 processes (other jobs share
  the cores, so no program can scale past it);
* the previous worker path: ``StreamLoader copying`` (``StreamDataset._direct_groups =
  False``), whose workers read each batch alone and copy it into the slot, where the
  default reads each group with one gather straight into the slot;
* the previous transport: ``StreamingDataset(shared_memory=False)``, whose workers send
  each batch's bytes through the result pipe (the default hands them over through a
  ring of shared-memory slots and sends only their place);
* transport alone: the same DataLoader over a dataset that yields ready-made tensors of
  the same shapes (no corpus work), 1 vs 2 workers, as torch moves them (each through
  shared memory and a file descriptor);
* the DataLoader's own floor: a dataset that yields ``0`` (no data moves);
* a CPU-time profile per batch: ``corpus.batch_at`` in-process (the work a worker
  does), and for each worker count the main process's CPU seconds (receiving,
  unpickling and mapping the shared-memory tensors) and the workers' (from
  ``RUSAGE_CHILDREN`` once they exit).

With per-batch worker CPU ``W`` and main-process CPU ``M`` on 2 cores, 2 workers can be
at most ``min(2 / (W + M), 1 / M)`` batches/s against ``1 / max(W, M)`` for one, so
1.6x needs ``M <= W / 4``.

    python -m tools.bench_workers            # 64M tokens, block 2048, batch 8
    python -m tools.bench_workers --quick    # a smoke run (under a minute)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from mixle.corpus import open_corpus
from mixle.data import StreamingCorpus
from mixle.data.torch import StreamingDataset, StreamLoader
from tools.bench_ingest import cpu_ceiling
from tools.bench_stream import generate


class Nothing(IterableDataset[int]):
    """The DataLoader's own floor: yields ``0`` forever (no data moves)."""

    def __iter__(self) -> Iterator[int]:
        while True:
            yield 0


class ReadyBatches(IterableDataset[tuple[torch.Tensor, ...]]):
    """Transport only: yields fresh copies of one ready-made batch (no corpus work).

    Copies, because a tensor already in shared memory is not moved again: re-sending
    the same tensors would leave out the per-batch shared-memory allocation that every
    new batch pays.
    """

    def __init__(self, batch: tuple[torch.Tensor, ...]) -> None:
        super().__init__()
        self.batch = batch

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        while True:
            yield tuple(part.clone() for part in self.batch)


DEFAULT_STRATEGY = torch.multiprocessing.get_sharing_strategy()


def children_cpu() -> float:
    """User + system CPU seconds of this process's exited (joined) children."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return children.ru_utime + children.ru_stime


def run_loader(
    dataset: Any, workers: int, batches: int, strategy: str, grouped: bool = False, warmup: int = 0
) -> dict[str, float]:
    """Batches/s from the first batch on, and main/worker CPU seconds per batch.

    ``grouped``: through ``StreamLoader`` (several batches per worker item) instead of a
    plain ``DataLoader``. ``warmup`` batches after the first are taken before the clock
    starts: the batches the workers made before the first one arrived (up to
    ``prefetch_factor`` groups each) would otherwise count as made in the timed window. Worker CPU includes the workers' start-up (fork, first item);
    the ``startup`` runs (0 batches) measure that part so the report can take it out.
    """
    torch.multiprocessing.set_sharing_strategy(strategy)  # inherited by forked workers
    try:
        if grouped:
            loader: Any = StreamLoader(dataset, num_workers=workers)
        else:
            loader = DataLoader(dataset, batch_size=None, num_workers=workers)
        children_before = children_cpu()
        iterator = iter(loader)
        next(iterator)  # workers started and producing
        for _ in range(warmup if batches else 0):  # past the groups made before the first
            next(iterator)
        started = time.perf_counter()
        main_started = time.process_time()
        for _ in range(batches):
            next(iterator)
        seconds = time.perf_counter() - started
        main_cpu = time.process_time() - main_started
        del iterator  # shuts the workers down (joined), so RUSAGE_CHILDREN counts them
    finally:
        torch.multiprocessing.set_sharing_strategy(DEFAULT_STRATEGY)
    return {
        "rate": batches / seconds if batches else float("nan"),
        "main_cpu_us": main_cpu / batches * 1e6 if batches else float("nan"),
        "worker_cpu_s": children_cpu() - children_before,
    }


def batch_cost_us(corpus: StreamingCorpus, batches: int) -> float:
    """CPU microseconds of ``corpus.batch_at`` per batch, in this process."""
    total = corpus.num_batches(0)
    start = time.process_time()
    for index in range(batches):
        corpus.batch_at(0, index % total)
    return (time.process_time() - start) / batches * 1e6


def measure(path: Path, args: argparse.Namespace) -> dict[str, Any]:
    corpus = StreamingCorpus(
        open_corpus(path),
        rank=0,
        world_size=1,
        block=args.block,
        batch_size=args.batch_size,
        document_ids=args.document_ids,
    )
    parts = tuple(torch.from_numpy(part) for part in corpus.batch_at(0, 0))
    rows = torch.cat([parts[0], parts[1][:, -1:]], dim=1)  # the (b, block + 1) token rows
    three, one = ReadyBatches(parts), ReadyBatches((rows,))
    fd = DEFAULT_STRATEGY
    # The previous worker path: each batch read alone, then copied into the slot.
    copying = StreamingDataset(corpus)
    copying._direct_groups = False
    # name: (dataset, workers, sharing strategy, through StreamLoader)
    configs: dict[str, tuple[Any, int, str, bool]] = {
        "corpus, 0 workers": (StreamingDataset(corpus), 0, fd, False),
        "StreamLoader, 1 worker": (StreamingDataset(corpus), 1, fd, True),
        "StreamLoader, 2 workers": (StreamingDataset(corpus), 2, fd, True),
        "StreamLoader copying, 1 worker": (copying, 1, fd, True),
        "StreamLoader copying, 2 workers": (copying, 2, fd, True),
        "corpus, 1 worker": (StreamingDataset(corpus), 1, fd, False),
        "corpus, 2 workers": (StreamingDataset(corpus), 2, fd, False),
        "corpus through the pipe, 1 worker": (
            StreamingDataset(corpus, shared_memory=False),
            1,
            fd,
            False,
        ),
        "corpus through the pipe, 2 workers": (
            StreamingDataset(corpus, shared_memory=False),
            2,
            fd,
            False,
        ),
        "nothing (DataLoader floor), 1 worker": (Nothing(), 1, fd, False),
        "nothing (DataLoader floor), 2 workers": (Nothing(), 2, fd, False),
        "transport of 3 tensors, 1 worker": (three, 1, fd, False),
        "transport of 3 tensors, 2 workers": (three, 2, fd, False),
        "transport of 1 tensor, 1 worker": (one, 1, fd, False),
        "transport of 1 tensor, 2 workers": (one, 2, fd, False),
    }
    if args.only_loader:
        configs = {
            name: value
            for name, value in configs.items()
            if "corpus, " in name or "StreamLoader" in name
        }
    startup = {
        (n, grouped): statistics.median(
            run_loader(StreamingDataset(corpus), n, 0, fd, grouped)["worker_cpu_s"]
            for _ in range(3)
        )
        for n in (1, 2)
        for grouped in (False, True)
    }
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in configs}
    ceilings, costs = [], []
    names = list(configs)
    for round_number in range(args.rounds):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            dataset, workers, strategy, grouped = configs[name]
            figures = run_loader(dataset, workers, args.batches, strategy, grouped, args.warmup)
            if workers:
                spent = figures["worker_cpu_s"] - startup[workers, grouped]
                made = args.batches + args.warmup  # after the first batch
                figures["worker_cpu_us"] = max(spent, 0.0) / made * 1e6
            samples[name].append(figures)
        ceilings.append(cpu_ceiling())
        costs.append(batch_cost_us(corpus, args.batches))
    medians = {
        name: {key: statistics.median(s[key] for s in runs) for key in runs[0]}
        for name, runs in samples.items()
    }

    def speedup(prefix: str) -> float:
        if f"{prefix}, 2 workers" not in medians:
            return float("nan")
        return medians[f"{prefix}, 2 workers"]["rate"] / medians[f"{prefix}, 1 worker"]["rate"]

    return {
        "configs": medians,
        "speedup": speedup("StreamLoader"),
        "copying_speedup": speedup("StreamLoader copying"),
        "dataloader_speedup": speedup("corpus"),
        "pipe_speedup": speedup("corpus through the pipe"),
        "transport_speedup": speedup("transport of 3 tensors"),
        "startup_cpu_s": {
            f"{n} workers{', grouped' if g else ''}": v for (n, g), v in startup.items()
        },
        "cpu_ceiling": statistics.median(ceilings),
        "batch_at_us": statistics.median(costs),
    }


def report(result: dict[str, Any], args: argparse.Namespace, load: str) -> str:
    lines = [
        f"block {args.block}, batch {args.batch_size}"
        f"{', document ids' if args.document_ids else ''}, {args.batches} batches per run, "
        f"{args.rounds} rounds, medians; load average {load} on {os.cpu_count()} cores; "
        f"torch {torch.__version__}, default sharing strategy {DEFAULT_STRATEGY}",
        "",
        "| DataLoader over | batches/s | main CPU µs/batch | worker CPU µs/batch |",
        "|---|---:|---:|---:|",
    ]
    for name, figures in result["configs"].items():
        workers = "—" if name.endswith("0 workers") else f"{figures['worker_cpu_us']:.0f}"
        lines.append(
            f"| {name} | {figures['rate']:,.0f} | {figures['main_cpu_us']:.0f} | {workers} |"
        )
    met = "met" if result["speedup"] >= 1.6 else "NOT met"
    bounds = []
    for prefix in ("StreamLoader", "StreamLoader copying", "corpus"):
        figures = result["configs"].get(f"{prefix}, 1 worker")
        if figures is not None:
            w, m = figures["worker_cpu_us"], figures["main_cpu_us"]
            bound = min(2 / (w + m), 1 / m) * max(w, m)  # 2-worker rate / 1-worker rate
            bounds.append(f"{prefix} {bound:.2f}x (W {w:.0f} µs, M {m:.0f} µs)")
    startup = ", ".join(f"{key} {value:.2f} s" for key, value in result["startup_cpu_s"].items())
    lines += [
        "",
        f"`StreamLoader` 2 workers / 1 worker: **{result['speedup']:.2f}x** (target >= 1.6x: "
        f"{met}); the copying worker path (each batch read alone, then copied into the "
        f"slot) {result['copying_speedup']:.2f}x; "
        f"plain DataLoader (one batch per item) {result['dataloader_speedup']:.2f}x; "
        f"through the pipe (`shared_memory=False`) {result['pipe_speedup']:.2f}x; "
        f"transport alone {result['transport_speedup']:.2f}x; same-run CPU-burn ceiling "
        f"{result['cpu_ceiling']:.2f}x; `corpus.batch_at` in-process "
        f"{result['batch_at_us']:.0f} µs CPU per batch. Worker CPU excludes start-up "
        f"({startup}; measured alone). Bound on 2 free cores from the 1-worker CPU per "
        f"batch, min(2 / (W + M), 1 / M) · max(W, M): {'; '.join(bounds)}.",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path("/dev/shm/workers-bench"),
        help="where the corpus is written (tmpfs by default: no page-out)",
    )
    parser.add_argument("--tokens", type=int, default=64_000_000, help="uint16 tokens")
    parser.add_argument("--mean-length", type=float, default=512)
    parser.add_argument("--block", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--document-ids", action="store_true", help="rows with document ids")
    parser.add_argument(
        "--batches",
        type=int,
        default=6000,
        help="batches per timed run: long enough that each forked worker's copy-on-write "
        "faults of the parent's pages (a start-up cost spread over its first batches) "
        "do not dominate its CPU per batch",
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--warmup",
        type=int,
        default=512,
        help="batches taken after the first, before timing: at least what the workers made "
        "before the first arrived (prefetch_factor 2 groups of 113 batches each per worker "
        "at 8 x 2048)",
    )
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--only-loader",
        action="store_true",
        help="only the corpus rows (StreamLoader and plain DataLoader), no references",
    )
    parser.add_argument("--quick", action="store_true", help="2M tokens, 40 batches, 1 round")
    args = parser.parse_args()
    if args.quick:
        args.tokens, args.batches, args.rounds, args.warmup = 2_000_000, 40, 1, 16
    load_before = os.getloadavg()[0]
    shutil.rmtree(args.workdir, ignore_errors=True)
    try:
        generate(args.workdir / "corpus", args.tokens, args.mean_length, seed=0)
        result = measure(args.workdir / "corpus", args)
    finally:
        shutil.rmtree(args.workdir, ignore_errors=True)
    text = report(result, args, f"{load_before:.1f} -> {os.getloadavg()[0]:.1f}")
    print(text)
    if args.json is not None:
        args.json.write_text(json.dumps({"text": text, **result}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
