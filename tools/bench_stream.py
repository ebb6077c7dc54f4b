"""Benchmark: out-of-core StreamingCorpus throughput, memory and resume latency (issue #5).

Generates a corpus with ``mixle.corpus.CorpusWriter`` under ``--workdir`` (default
/tmp/data-bench, deleted at the end), then measures, interleaved in the same run:

(a) the floor: sequential slices of the raw ``np.memmap`` shard files copied into int64
    rows of ``block + 1`` (no shuffle), into one batch array reused for every batch (a
    fresh array per batch costs page faults, so the floor would measure them);
(a2) the floor made of per-row slices: each row of ``block + 1`` tokens sliced from the
    raw ``np.memmap`` and copied into the int64 batch on its own;
(b) a plain Python loop concatenating the same shuffled documents, read from raw
    ``np.memmap`` token/offset files, and chunking them into rows;
ours: ``StreamingCorpus(open_corpus(...)).epoch_batches(0)``, per-rank and global
    layout, with and without ``document_ids``; with the compiled gather
    (``mixle[fast]``, numba; ``--gather``, default ``auto``) when it is installed, and
    each layout again with the pure-numpy gather (``[numpy]``) for comparison.

Each round times ``--batches`` batches of each, in wall-clock and in CPU time
(``time.process_time``, which other jobs on a shared machine do not inflate); figures
are medians of interleaved rounds; targets are ours >= 0.6x (a) and (a2), >= 2x (b). Then a full epoch of ours for RssAnon growth (target
< 64 MB), and ``load_state_dict`` + first batch at the start, middle and end of an epoch
of a second, ``--resume-documents``-document corpus (target < 50 ms each, flat). With
``--epoch-rounds N``, also whole epochs from a fresh global-layout stream, its plan
included, blocks against permutation order (N interleaved rounds per gather backend).

    python -m tools.bench_stream           # 2 GiB corpus (1.07e9 uint16 tokens), 10M-doc resume corpus
    python -m tools.bench_stream --quick   # 40M tokens, 1M-doc resume corpus
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from mixle._gather import gather_backend, numba_available, set_gather_backend
from mixle.corpus import CorpusWriter, open_corpus
from mixle.data import DocumentSource
from mixle.data.streaming_corpus import StreamingCorpus, global_document_order
from tools._memory import peak_rss_mb, rss_anon_mb

VOCAB = 50257  # < 2**16, so the corpus is uint16 (2 bytes per token)
# Batches per alternating slice of --epoch-rounds (both epochs advance under one load).
_EPOCH_SLICE = 256


def generate(path: Path, tokens: int, mean_length: float, seed: int) -> None:
    """Write ``tokens`` uint16 tokens in documents of geometric length (mean ``mean_length``)."""
    rng = np.random.default_rng(seed)
    chunk = 16_000_000
    with CorpusWriter(path, vocab_size=VOCAB, overwrite=True) as writer:
        written = 0
        while written < tokens:
            size = min(chunk, tokens - written)
            lengths = rng.geometric(1.0 / mean_length, size=int(size / mean_length * 1.2) + 16)
            bounds = np.cumsum(lengths)
            cut = int(np.searchsorted(bounds, size))
            lengths = np.append(lengths[:cut], size - (bounds[cut - 1] if cut else 0))
            lengths = lengths[lengths > 0]
            flat = rng.integers(0, VOCAB, size=size, dtype=np.uint16)
            writer.add_many(np.split(flat, np.cumsum(lengths)[:-1]))
            written += size


class RawShards:
    """The corpus's shard files as plain ``np.memmap``s (what the baselines read)."""

    def __init__(self, path: Path) -> None:
        manifest = json.loads((path / "manifest.json").read_text())
        self.tokens: list[np.memmap] = []
        self.offsets: list[np.memmap] = []
        self.starts = [0]
        for shard in manifest["shards"]:
            count = shard["num_documents"]
            header = shard["offsets_bytes"] - 8 * (count + 1)
            self.tokens.append(np.memmap(path / shard["tokens"], dtype=np.uint16, mode="r"))
            self.offsets.append(
                np.memmap(
                    path / shard["offsets"],
                    dtype=np.int64,
                    mode="r",
                    offset=header,
                    shape=(count + 1,),
                )
            )
            self.starts.append(self.starts[-1] + count)


def baseline_sequential(raw: RawShards, block: int, batch: int) -> Iterator[np.ndarray]:
    """(a) Consecutive windows of the raw token files, copied into int64 rows."""
    step = block * batch
    rows = np.empty((batch, block + 1), dtype=np.int64)  # reused: a floor pays no page faults
    for tokens in raw.tokens:
        for begin in range(0, tokens.shape[0] - step - 1, step):
            window = tokens[begin : begin + step + 1]
            view = np.lib.stride_tricks.as_strided(
                window, shape=(batch, block + 1), strides=(2 * block, 2)
            )
            rows[...] = view
            yield rows


def baseline_row_slices(raw: RawShards, block: int, batch: int) -> Iterator[np.ndarray]:
    """(a2) The floor as per-row slices: each row of ``block + 1`` tokens copied on its own
    (one slice per row, as a reader of rows does), into one int64 batch buffer."""
    step = block * batch
    rows = np.empty((batch, block + 1), dtype=np.int64)  # reused, as (a)
    for tokens in raw.tokens:
        for begin in range(0, tokens.shape[0] - step - 1, step):
            for row in range(batch):
                start = begin + row * block
                rows[row] = tokens[start : start + block + 1]
            yield rows


def baseline_python_loop(
    raw: RawShards, order: np.ndarray, block: int, batch: int
) -> Iterator[np.ndarray]:
    """(b) Per-document Python loop: read each shuffled document, concatenate, chunk."""
    need = block * batch + 1
    pending: list[np.ndarray] = []
    have = 0
    for index in order.tolist():
        shard = bisect.bisect_right(raw.starts, index) - 1
        local = index - raw.starts[shard]
        offsets = raw.offsets[shard]
        document = raw.tokens[shard][offsets[local] : offsets[local + 1]]
        pending.append(document)
        have += document.shape[0]
        while have >= need:
            stream = np.concatenate(pending).astype(np.int64)
            rows = np.lib.stride_tricks.as_strided(
                stream, shape=(batch, block + 1), strides=(8 * block, 8)
            ).copy()
            rest = stream[need - 1 :]
            pending, have = [rest], rest.shape[0]
            yield rows


def timed(
    batches: Iterator[np.ndarray] | Iterator[tuple[np.ndarray, ...]], count: int
) -> tuple[float, float, int]:
    """Consume ``count`` batches; return (wall seconds, CPU seconds, input tokens)."""
    start, cpu = time.perf_counter(), time.process_time()
    tokens = 0
    for item in itertools.islice(batches, count):
        tokens += (item[0] if isinstance(item, tuple) else item[:, :-1]).size
    return time.perf_counter() - start, time.process_time() - cpu, tokens


def with_backend(
    name: str, make: Callable[[], Iterator[tuple[np.ndarray, ...]]]
) -> Callable[[], Iterator[tuple[np.ndarray, ...]]]:
    """``make``'s batches produced with gather backend ``name`` (restored afterwards)."""

    def batches() -> Iterator[tuple[np.ndarray, ...]]:
        previous = set_gather_backend(name)
        try:
            yield from make()
        finally:
            set_gather_backend(previous)

    return batches


def throughput(path: Path, args: argparse.Namespace) -> dict[str, float]:
    documents = open_corpus(path)
    raw = RawShards(path)
    order = global_document_order(len(documents), seed=0, epoch=0)
    corpus = StreamingCorpus(
        documents, rank=0, world_size=1, block=args.block, batch_size=args.batch_size
    )
    no_hints = StreamingCorpus(
        documents,
        rank=0,
        world_size=1,
        block=args.block,
        batch_size=args.batch_size,
        prefetch=False,
    )
    variants = {
        "ours global": {"layout": "global"},
        "ours global, permutation": {"layout": "global", "order": "permutation"},
        "ours document_ids": {"document_ids": True},
        "ours global, ids": {"layout": "global", "document_ids": True},
    }
    streams = {
        name: StreamingCorpus(
            documents, rank=0, world_size=1, block=args.block, batch_size=args.batch_size, **options
        )
        for name, options in variants.items()
    }
    set_gather_backend(args.gather)
    compiled = gather_backend() == "numba"
    print(
        f"corpus: {len(documents):,} documents, {documents.num_tokens:,} tokens, "
        f"{documents.num_shards} shards; gather backend: {gather_backend()} "
        f"(numba {'installed' if numba_available() else 'not installed'})"
    )
    candidates: dict[str, Callable[[], Iterator[np.ndarray] | Iterator[tuple[np.ndarray, ...]]]] = {
        "(a) sequential memmap": lambda: baseline_sequential(raw, args.block, args.batch_size),
        "ours epoch_batches": lambda: corpus.epoch_batches(0),
        "ours, prefetch=False": lambda: no_hints.epoch_batches(0),
        "(b) python loop": lambda: baseline_python_loop(raw, order, args.block, args.batch_size),
        "(a2) per-row slices": lambda: baseline_row_slices(raw, args.block, args.batch_size),
        **{name: (lambda s=stream: s.epoch_batches(0)) for name, stream in streams.items()},
    }
    ours = ["ours epoch_batches", "ours, prefetch=False", *streams]
    if compiled:
        for name, stream in (
            ("ours epoch_batches", corpus),
            ("ours global", streams["ours global"]),
            ("ours global, permutation", streams["ours global, permutation"]),
        ):
            candidates[f"{name} [numpy]"] = with_backend(
                "numpy", lambda s=stream: s.epoch_batches(0)
            )
            ours.append(f"{name} [numpy]")
    timed(candidates["(a) sequential memmap"](), 10**9)  # warm the page cache once
    for name in candidates:  # each reads the same batches every round: map them once
        timed(candidates[name](), args.batches)
    rates: dict[str, list[float]] = {name: [] for name in candidates}
    cpu_rates: dict[str, list[float]] = {name: [] for name in candidates}
    sequence = list(candidates)
    for round_number in range(args.rounds):
        # Rotate the order every round: whatever runs first after another method pays for
        # its cache and allocator state, so no method should always follow the same one.
        shift = round_number % len(sequence)
        for name in sequence[shift:] + sequence[:shift]:
            seconds, cpu, tokens = timed(candidates[name](), args.batches)
            rates[name].append(tokens / seconds)
            cpu_rates[name].append(tokens / cpu)
    median = {name: statistics.median(values) for name, values in rates.items()}
    cpu_median = {name: statistics.median(values) for name, values in cpu_rates.items()}
    for name, rate in median.items():
        print(
            f"{name:>30}: {rate / 1e6:8.1f} M tokens/s wall, {cpu_median[name] / 1e6:8.1f} "
            f"CPU, {args.batch_size * args.block / cpu_median[name] * 1e6:7.1f} us CPU/batch "
            f"(medians of {len(rates[name])})"
        )
    for label in ours:
        line = [f"{label}:"]
        for clock, table in (("CPU", cpu_median), ("wall", median)):
            mine = table[label]
            ratio_a = mine / table["(a) sequential memmap"]
            ratio_a2 = mine / table["(a2) per-row slices"]
            ratio_b = mine / table["(b) python loop"]
            line.append(
                f"{clock} / (a) = {ratio_a:.2f}x, / (a2) = {ratio_a2:.2f}x, / (b) = {ratio_b:.2f}x;"
            )
        print(" ".join(line))
    for suffix in ("", " [numpy]") if compiled else ("",):
        blocks, permutation = f"ours global{suffix}", f"ours global, permutation{suffix}"
        # Each round's own ratio too (both ran in it): a load spike moves one round.
        paired = sorted(
            b / p for b, p in zip(cpu_rates[blocks], cpu_rates[permutation], strict=True)
        )
        print(
            f"order{suffix or f' [{gather_backend()}]'}: blocks / permutation = "
            f"{cpu_median[blocks] / cpu_median[permutation]:.3f}x CPU, "
            f"{median[blocks] / median[permutation]:.3f}x wall; per round (CPU) median "
            f"{statistics.median(paired):.3f}, {paired[0]:.3f}-{paired[-1]:.3f} (target >= 1)"
        )
    if args.epoch_rounds:
        epoch_orders(documents, args, compiled)

    before = rss_anon_mb()
    start = time.perf_counter()
    tokens = 0
    highest = before
    for count, (context, _, _) in enumerate(corpus.epoch_batches(0)):
        tokens += context.size
        if count % 1000 == 0:
            highest = max(highest, rss_anon_mb())
    seconds = time.perf_counter() - start
    after = rss_anon_mb()
    highest = max(highest, after)
    print(
        f"full epoch: {tokens:,} tokens in {seconds:.1f} s ({tokens / seconds / 1e6:.1f} M tokens/s); "
        f"RssAnon {before:.0f} -> {after:.0f} MB (max sampled {highest:.0f} MB, growth "
        f"{highest - before:.1f} MB, target < 64 MB); peak RSS {peak_rss_mb():.0f} MB"
    )
    return {"growth_mb": highest - before}


def epoch_orders(documents: DocumentSource, args: argparse.Namespace, compiled: bool) -> None:
    """Whole epochs of the global layout from fresh streams, their plans included, blocks
    against permutation order, in the same run: CPU time per order and per round.

    The steady-state rows above read batches of a planned epoch; here the permutation
    pays its O(documents) plan (permutation, lengths gathered, prefix sum) and the
    blocks order its totals and each window as the stream reaches it. The two epochs
    advance in alternating slices of :data:`_EPOCH_SLICE` batches (which goes first
    alternates too), so a change of machine load falls on both.
    """
    backends = ["numpy", "numba"] if compiled else [gather_backend()]
    orders = ["blocks", "permutation"]
    for backend in backends:
        totals: dict[str, list[float]] = {order: [] for order in orders}
        plans: dict[str, list[float]] = {order: [] for order in orders}
        previous = set_gather_backend(backend)
        try:
            for round_number in range(args.epoch_rounds):
                spent = dict.fromkeys(orders, 0.0)
                planned = dict.fromkeys(orders, 0.0)
                iterators: dict[str, Iterator[tuple[np.ndarray, ...]]] = {}
                done: set[str] = set()
                turn = 0
                while len(done) < len(orders):
                    # The leader alternates by round too: a round's first slice costs
                    # its leader more (see bench_mixture_stream's order runs).
                    for order in orders if (turn + round_number) % 2 == 0 else orders[::-1]:
                        if order in done:
                            continue
                        began = time.process_time()
                        if order not in iterators:
                            stream = StreamingCorpus(
                                documents,
                                rank=0,
                                world_size=1,
                                block=args.block,
                                batch_size=args.batch_size,
                                layout="global",
                                order=order,
                            )
                            stream.epoch_plan(0)  # the permutation's whole plan
                            planned[order] = time.process_time() - began
                            iterators[order] = stream.epoch_batches(0)
                        read = sum(1 for _ in itertools.islice(iterators[order], _EPOCH_SLICE))
                        spent[order] += time.process_time() - began
                        if read < _EPOCH_SLICE:
                            done.add(order)
                    turn += 1
                for order in orders:
                    totals[order].append(spent[order])
                    plans[order].append(planned[order])
        finally:
            set_gather_backend(previous)
        for label, costs in (
            ("with its plan", totals),
            (
                "after epoch_plan (blocks windows still built as reached)",
                {o: [t - p for t, p in zip(totals[o], plans[o], strict=True)] for o in orders},
            ),
        ):
            ratios = [p / b for b, p in zip(costs["blocks"], costs["permutation"], strict=True)]
            print(
                f"epoch {label} [{backend}]: CPU s blocks "
                f"{', '.join(f'{t:.3f}' for t in costs['blocks'])}, permutation "
                f"{', '.join(f'{t:.3f}' for t in costs['permutation'])}; throughput blocks / "
                f"permutation per round {', '.join(f'{r:.3f}' for r in ratios)} "
                f"(median {statistics.median(ratios):.3f})"
            )
        print(
            f"  epoch_plan CPU ms [{backend}]: blocks "
            f"{statistics.median(plans['blocks']) * 1e3:.1f}, permutation "
            f"{statistics.median(plans['permutation']) * 1e3:.1f} (medians)"
        )


def resume_latency(path: Path, args: argparse.Namespace) -> None:
    start = time.perf_counter()
    documents = open_corpus(path)
    opened = time.perf_counter() - start

    def make() -> StreamingCorpus:
        return StreamingCorpus(
            documents, rank=3, world_size=8, block=args.block, batch_size=args.batch_size
        )

    start = time.perf_counter()
    warm = make()
    total = warm.num_batches(0)
    built = time.perf_counter() - start
    print(
        f"resume corpus: {len(documents):,} documents, {documents.num_tokens:,} tokens; open {opened * 1e3:.0f} ms, "
        f"construct + plan epoch 0 {built * 1e3:.0f} ms; rank 3 of 8 has {total} batches"
    )
    # Where a fresh process's planning time goes (each step as _plan does it).
    lengths = documents.lengths
    t0 = time.perf_counter()
    order = global_document_order(len(documents), seed=0, epoch=0)
    t1 = time.perf_counter()
    ordered = lengths[order]
    t2 = time.perf_counter()
    np.cumsum(ordered[3::8])
    t3 = time.perf_counter()
    ordered[: len(ordered) - len(ordered) % 8].reshape(-1, 8).sum(axis=0)
    t4 = time.perf_counter()
    print(
        f"  planning breakdown: permutation {(t1 - t0) * 1e3:.0f} ms, gather lengths "
        f"{(t2 - t1) * 1e3:.0f} ms, rank cumsum {(t3 - t2) * 1e3:.0f} ms, all-rank totals "
        f"{(t4 - t3) * 1e3:.0f} ms"
    )
    template = warm.state_dict()
    for label, batch in (("start", 0), ("middle", total // 2), ("end", total - 1)):
        state = {**template, "epoch": 0, "batch": batch}
        cold = make()
        t0 = time.perf_counter()
        cold.load_state_dict(state)
        next(iter(cold))
        cold_ms = (time.perf_counter() - t0) * 1e3
        samples = []
        for _ in range(5):
            t0 = time.perf_counter()
            warm.load_state_dict(state)
            next(iter(warm))
            samples.append((time.perf_counter() - t0) * 1e3)
        print(
            f"  {label:>6} (batch {batch:>6}): load_state_dict + first batch {statistics.median(samples):6.2f} ms "
            f"with the epoch planned, {cold_ms:7.1f} ms in a fresh StreamingCorpus (plans the epoch)"
        )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/data-bench"))
    parser.add_argument(
        "--tokens", type=int, default=2**30, help="tokens of the throughput corpus (uint16)"
    )
    parser.add_argument("--mean-length", type=float, default=512)
    parser.add_argument("--resume-documents", type=int, default=10_000_000)
    parser.add_argument("--resume-mean-length", type=float, default=8)
    parser.add_argument("--block", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--batches", type=int, default=1500, help="batches per timed measurement")
    parser.add_argument("--rounds", type=int, default=None, help="default 3 (2 with --quick)")
    parser.add_argument("--keep", action="store_true", help="keep the generated corpora")
    parser.add_argument(
        "--epoch-rounds",
        type=int,
        default=0,
        help="also time whole epochs from a fresh stream (plan included), blocks vs "
        "permutation order, this many interleaved rounds per gather backend",
    )
    parser.add_argument(
        "--gather",
        choices=["auto", "numpy", "numba"],
        default="auto",
        help="gather backend of 'ours' (auto: numba when installed); the [numpy] rows "
        "always use numpy",
    )
    parser.add_argument(
        "--quick", action="store_true", help="40M tokens, 1M-document resume corpus"
    )
    args = parser.parse_args()
    if args.quick:
        args.tokens, args.resume_documents, args.batches = 40_000_000, 1_000_000, 200
    if args.rounds is None:
        args.rounds = 2 if args.quick else 3
    args.workdir.mkdir(parents=True, exist_ok=True)
    try:
        big = args.workdir / "throughput"
        start = time.perf_counter()
        generate(big, args.tokens, args.mean_length, seed=0)
        print(f"generated {args.tokens * 2 / 2**30:.2f} GiB in {time.perf_counter() - start:.0f} s")
        throughput(big, args)
        if not args.keep:
            shutil.rmtree(big)
        small = args.workdir / "resume"
        start = time.perf_counter()
        generate(
            small,
            int(args.resume_documents * args.resume_mean_length),
            args.resume_mean_length,
            seed=1,
        )
        print(f"generated the resume corpus in {time.perf_counter() - start:.0f} s")
        resume_latency(small, args)
    finally:
        if not args.keep:
            shutil.rmtree(args.workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
