"""Benchmark: best-fit packing against concatenate-and-chunk, TRL's bfd and Grain's best-fit.

On a log-normal length mix (median 500, mean 917, p99 ~6.5k) and on a corpus given by
path (the sample: ``mixle ingest shards/sample-src ...``, see README), reports

- documents cut and padding at blocks 2048 and 8192, both packings
  (:func:`mixle.data.compare_packings`: the streams' own figures), beside the padding
  floor (the fewest rows of ``block + 1`` slots that hold the epoch's slots);
- the planning time of one window of 64K documents (compiled and pure-Python kernel),
  and of the first window of the default ``"blocks"`` order (what the first batch waits
  for) at 16 and 64 blocks of 4096 documents;
- packed-row throughput of ``StreamingCorpus(layout="global")`` and of a two-source
  ``Mixture`` with each packing, in the same run, interleaved rounds, CPU and wall time
  (the CPU-time ratio is the figure on a loaded machine);
- the same cut/padding/time figures for TRL's ``_pack_bfd`` and Grain's
  ``BestFitPackIterDataset`` when they are installed (the pip line otherwise).

    python -m tools.bench_best_fit --corpus /tmp/mixle-demo/corpus
    python -m tools.bench_best_fit --quick
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from mixle.data import (
    Mixture,
    MixtureSource,
    PackingOptions,
    StreamingCorpus,
    compare_packings,
    set_gather_backend,
)
from mixle.data._best_fit import best_fit_rows, row_budget
from mixle.data._order_windows import BlockOrder
from mixle.data._plan_best_fit import BestFitRows
from tools._bench import interleaved
from tools._memory import rss_anon_mb

BLOCKS = (2048, 8192)
WINDOW = 65536


def log_normal_lengths(count: int, seed: int = 0) -> np.ndarray:
    """Median 500, mean 917 (sigma = sqrt(2 ln(917 / 500))), at least one token."""
    sigma = float(np.sqrt(2 * np.log(917 / 500)))
    rng = np.random.default_rng(seed)
    return np.maximum(rng.lognormal(np.log(500), sigma, count).astype(np.int64), 1)


def _median_time(function: Callable[[], object], rounds: int) -> tuple[float, float]:
    """Median wall and CPU seconds of ``rounds`` calls."""
    walls, cpus = [], []
    for _ in range(rounds):
        wall, cpu = time.perf_counter(), time.process_time()
        function()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def packing_table(name: str, lengths: np.ndarray) -> None:
    print(
        f"\n{name}: {len(lengths):,} documents, p50 {np.median(lengths):.0f}, mean "
        f"{lengths.mean():.0f}, p99 {np.percentile(lengths, 99):.0f}"
    )
    print("| block | packing | rows | docs cut | docs > row | padding | padding floor |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for block in BLOCKS:
        floor = padding_floor(lengths, block)
        for summary in compare_packings(lengths, block=block):
            print(
                f"| {block} | {summary.packing} | {summary.rows:,} | {summary.cut_fraction:.2%} "
                f"| {summary.longer_than_row / max(summary.documents, 1):.2%} "
                f"| {summary.padding_fraction:.3%} | {floor:.3%} |"
            )


def padding_floor(lengths: np.ndarray, block: int) -> float:
    """The padding of the fewest rows of ``block + 1`` slots holding every document
    (no boundary), each row training one target fewer than its slots: no packing of
    whole rows pads less (a small corpus's last row sets it)."""
    slots = int(lengths.sum())
    rows = -(-slots // (block + 1))
    return 1 - (slots - rows) / (rows * block) if rows else 0.0


def planning_times(rounds: int) -> None:
    lengths = log_normal_lengths(WINDOW, seed=1)
    print(f"\nplanning one window of {WINDOW:,} documents (median of {rounds})")
    for backend in ("numba", "numpy"):
        set_gather_backend(backend)
        for block in BLOCKS:
            rows = row_budget(int(lengths.sum()), block)
            best_fit_rows(lengths, block, rows)  # load the kernel
            wall, cpu = _median_time(lambda b=block, r=rows: best_fit_rows(lengths, b, r), rounds)
            print(f"  {backend:<6} block {block}: {wall * 1e3:.1f} ms (cpu {cpu * 1e3:.1f} ms)")
    set_gather_backend("auto")


def first_window_times(rounds: int) -> None:
    """What the first best-fit batch waits for: window 0 of the default blocks order
    read, packed and shuffled (compiled kernel), a fresh epoch each round."""
    table = log_normal_lengths(2 * 64 * 4096, seed=4)
    offsets = np.zeros(len(table) + 1, dtype=np.int64)
    np.cumsum(table, out=offsets[1:])
    print(f"\nfirst window of the blocks order (4096 documents a block; median of {rounds})")
    epochs = itertools.count()  # a fresh epoch (order) each call
    for window_blocks in (16, 64):
        for block in BLOCKS:

            def first(b: int = block, w: int = window_blocks) -> None:
                epoch = next(epochs)
                order = BlockOrder(
                    len(table),
                    offsets.take,
                    seed=0,
                    epoch=epoch,
                    block_documents=4096,
                    window_blocks=w,
                )
                BestFitRows(order, block=b, has_boundary=False, seed=0, epoch=epoch).window(0)

            first()  # load the kernel
            wall, cpu = _median_time(first, rounds)
            print(
                f"  {window_blocks} blocks ({window_blocks * 4096:,} documents), block {block}: "
                f"{wall * 1e3:.1f} ms (cpu {cpu * 1e3:.1f} ms)"
            )


def throughput(documents: Any, name: str, block: int, rounds: int) -> None:
    """Rows per second of one epoch of ``StreamingCorpus(layout="global")``, each packing
    (the epoch's planning included)."""
    print(f"\nthroughput: {name}, {len(documents):,} documents, block {block}, batch 8")

    def epoch(packing: str) -> int:
        corpus = StreamingCorpus(
            documents,
            rank=0,
            world_size=1,
            block=block,
            batch_size=8,
            layout="global",
            packing=PackingOptions(packing),
        )
        return sum(batch.num_rows for batch in corpus.iter_epoch(0))

    _compare_rates(epoch, rounds)


def mixture_throughput(documents: list[np.ndarray], block: int, rows: int, rounds: int) -> None:
    """Rows per second of a two-source ``Mixture`` (0.7 / 0.3 of ``documents`` split in
    two), each packing: ``rows`` global rows from row 0, read as iteration reads them."""
    half = len(documents) // 2
    print(f"\nmixture throughput: two sources of {half:,} documents, block {block}, batch 8")

    def run(packing: str) -> int:
        mixture = Mixture(
            [
                MixtureSource(documents[:half], 0.7, "a"),
                MixtureSource(documents[half:], 0.3, "b"),
            ],
            block=block,
            batch_size=8,
            packing=packing,
        )
        read = 0
        for batch in mixture.batches():
            read += batch.num_rows
            if read >= rows:
                return read
        return read

    _compare_rates(run, rounds)


def _compare_rates(run: Callable[[str], int], rounds: int) -> None:
    """Interleaved rounds of ``run(packing)`` (it returns the rows it read); medians and
    the best-fit / concatenate ratio by CPU time and by wall time."""
    results: dict[str, list[tuple[float, float, int]]] = {"concatenate": [], "best_fit": []}
    for round_ in range(rounds):
        for packing in interleaved(tuple(results), round_):
            wall, cpu = time.perf_counter(), time.process_time()
            rows = run(packing)
            results[packing].append((time.perf_counter() - wall, time.process_time() - cpu, rows))
    cpu_rates, wall_rates = {}, {}
    for packing, runs in results.items():
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        cpu_rates[packing], wall_rates[packing] = runs[0][2] / cpu, runs[0][2] / wall
        print(
            f"  {packing:<12} {cpu_rates[packing]:,.0f} rows per CPU s "
            f"({wall_rates[packing]:,.0f} per wall s; cpu {cpu:.2f} s, wall {wall:.2f} s)"
        )
    print(
        f"  best_fit / concatenate: {cpu_rates['best_fit'] / cpu_rates['concatenate']:.2f}x "
        f"by CPU time, {wall_rates['best_fit'] / wall_rates['concatenate']:.2f}x by wall "
        f"(RssAnon {rss_anon_mb():.0f} MB)"
    )


def window_figures(lengths: np.ndarray, rounds: int) -> None:
    """mixle's best-fit on one window (compiled kernel), the figures TRL's and Grain's
    packers report below: rows, documents cut, padding (slots), planning time."""
    print(f"\nmixle best_fit, one window of {len(lengths):,} documents")
    for block in BLOCKS:
        rows = row_budget(int(lengths.sum()), block)
        pieces = best_fit_rows(lengths, block, rows)
        wall, cpu = _median_time(lambda b=block, r=rows: best_fit_rows(lengths, b, r), rounds)
        print(
            f"  block {block}: {rows:,} rows, docs cut {pieces.cut_documents / len(lengths):.2%}, "
            f"padding {1 - pieces.used_slots / (rows * (block + 1)):.3%}, cpu "
            f"{cpu * 1e3:.0f} ms (wall {wall * 1e3:.0f} ms)"
        )


def trl_figures(lengths: np.ndarray, rounds: int) -> None:
    try:
        import pyarrow as pa
        from trl.data_utils import _pack_bfd
    except ImportError:
        print("\nTRL: skipped (pip install --no-deps trl)")
        return
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    values = pa.array(np.ones(int(offsets[-1]), dtype=np.int32))
    table = pa.table({"input_ids": pa.LargeListArray.from_arrays(pa.array(offsets), values)})
    print(f"\nTRL _pack_bfd (split), one window of {len(lengths):,} documents")
    for block in BLOCKS:
        packed: Any = None

        def run(block: int = block) -> None:
            nonlocal packed
            packed = _pack_bfd(table, block, "split")

        wall, cpu = _median_time(run, rounds)
        rows = packed.num_rows
        padding = 1 - int(lengths.sum()) / (rows * block)
        cut = int((lengths > block).sum())
        print(
            f"  block {block}: {rows:,} rows, docs cut {cut / len(lengths):.2%}, padding "
            f"{padding:.3%}, cpu {cpu * 1e3:.0f} ms (wall {wall * 1e3:.0f} ms)"
        )


def grain_figures(lengths: np.ndarray) -> None:
    try:
        import grain.python as grain
    except ImportError:
        print(
            "\nGrain: skipped (pip install --no-deps grain etils absl-py portpicker array_record)"
        )
        return
    print(f"\nGrain BestFitPackIterDataset (1024 bins), {len(lengths):,} documents")
    for block in BLOCKS:
        # Grain refuses elements longer than a row: they are truncated first.
        source = grain.MapDataset.source(
            [{"tokens": np.ones(min(int(n), block), dtype=np.int32)} for n in lengths]
        ).to_iter_dataset()
        packed = grain.experimental.BestFitPackIterDataset(
            source, length_struct={"tokens": block}, num_packing_bins=1024, shuffle_bins=False
        )
        wall, cpu = time.perf_counter(), time.process_time()
        rows = real = 0
        for row in packed:
            rows += 1
            real += int(np.count_nonzero(row["tokens_segment_ids"]))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        cut = int((lengths > block).sum())
        print(
            f"  block {block}: {rows:,} rows, docs longer than a row {cut / len(lengths):.2%} "
            f"(truncated), padding {1 - real / (rows * block):.3%}, cpu {cpu:.1f} s "
            f"(wall {wall:.1f} s)"
        )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--documents", type=int, default=200_000, help="log-normal mix size")
    parser.add_argument("--corpus", help="a corpus directory (e.g. the ingested sample)")
    parser.add_argument("--throughput-documents", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="small sizes, 2 rounds")
    args = parser.parse_args()
    if args.quick:
        args.documents, args.throughput_documents, args.rounds = 20_000, 3_000, 2
    set_gather_backend("auto")
    print("machine shared with other engineers: compare ratios within this run")
    packing_table("log-normal mix", log_normal_lengths(args.documents))
    if args.corpus:
        from mixle.corpus import open_corpus

        lengths = np.asarray(open_corpus(args.corpus).lengths, dtype=np.int64)
        packing_table(args.corpus, lengths)
    planning_times(args.rounds)
    first_window_times(args.rounds)
    if args.corpus:
        from mixle.corpus import open_corpus

        throughput(open_corpus(args.corpus), args.corpus, 2048, args.rounds)
    lengths = log_normal_lengths(args.throughput_documents, seed=2)
    flat = np.random.default_rng(3).integers(0, 50_000, int(lengths.sum())).astype(np.uint16)
    bounds = np.concatenate(([0], np.cumsum(lengths)))
    in_memory = [flat[bounds[i] : bounds[i + 1]] for i in range(len(lengths))]
    throughput(in_memory, "in-memory log-normal mix", 2048, args.rounds)
    mixture_throughput(in_memory, 2048, len(in_memory) // 3, args.rounds)
    window = log_normal_lengths(WINDOW, seed=1)
    window_figures(window, args.rounds)
    trl_figures(window, max(args.rounds // 2, 1))
    grain_figures(window if not args.quick else window[:8192])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
