"""Benchmark: data mixtures (issue #14). Not ``bench_mixture.py`` (mixture of LM experts).

Generates corpora with ``tools/bench_stream.generate`` under ``--workdir`` (deleted at
the end) and measures, in the same run:

(1) throughput: iterating a 3-source :class:`mixle.data.Mixture` (weights
    0.5/0.3/0.2, the sources' token shares) against iterating one global-layout
    ``StreamingCorpus`` over the same documents written as one corpus, ``--batches``
    batches per round, interleaved rounds, medians of wall and of CPU time (target:
    mixture >= 0.9x); likewise a windows mixture (``objective="windows"``) against one
    global ``TokenStream`` over the union, and the mixture under a ``block_schedule``
    whose second phase (4 x the block, a quarter of the rows, from the second global
    batch on: the path of a source continued at a token) is what is measured, against
    the plain mixture (target: >= 0.9x);
(1b) with ``--order-rounds N``: ``--order-batches`` batches of a fresh mixture (plans
    included), blocks against permutation order in alternating slices, N rounds, for
    two shapes of source: the throughput sources (``--tokens``; at the default sizes
    each source is smaller than one ``"blocks"`` window, so it is re-planned every
    epoch of it) and, with ``--multi-window``, three sources of ``--multi-tokens`` in
    documents of mean ``--multi-mean`` tokens that span several windows each (the
    realistic case: a window planned every ``window_blocks * block_documents``
    documents); ``--order-only`` runs only this;
(2) resume: on a 3-source mixture of ``--resume-documents`` documents (opened once),
    ``load_state_dict`` to random rows up to 10**12, alone and with the first batch
    on a fresh ``Mixture`` object (that batch builds each touched source's epoch
    layout, O(documents of the source)); medians (target: < 50 ms);
(3) private memory (``RssAnon``) after streaming from row 0, and after streaming the
    same number of batches from row 10**9 (target: independent of the row).

    python -m tools.bench_mixture_stream            # 300M tokens, 10M-document resume
    python -m tools.bench_mixture_stream --quick    # 30M tokens, 1M-document resume
    python -m tools.bench_mixture_stream --quick --throughput-only
    python -m tools.bench_mixture_stream --tokens 100000000 --order-only --multi-window \
        --order-rounds 9 --order-batches 20000 --workdir /dev/shm/mixle-bench-mixture
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from mixle._gather import gather_backend
from mixle.corpus import CorpusWriter, open_corpus
from mixle.data import BlockSchedule, Mixture, MixtureSource, StreamingCorpus, TokenStream
from mixle.data._options import OrderOptions
from tools._memory import peak_rss_mb, rss_anon_mb
from tools.bench_stream import VOCAB, generate

SHARES = (0.5, 0.3, 0.2)
# Batches per alternating slice of --order-rounds (both mixtures advance under one load).
_ORDER_SLICE = 256


def sources(paths: list[Path]) -> list[MixtureSource]:
    return [
        MixtureSource(open_corpus(path), share, f"s{index}")
        for index, (path, share) in enumerate(zip(paths, SHARES, strict=True))
    ]


def write_union(paths: list[Path], target: Path) -> None:
    with CorpusWriter(target, vocab_size=VOCAB, overwrite=True) as writer:
        for path in paths:
            documents = open_corpus(path)
            for start in range(0, len(documents), 100_000):
                writer.add_many(documents.take(range(start, min(start + 100_000, len(documents)))))


def throughput(paths: list[Path], union: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Tokens per second of each stream, wall and CPU time, medians of interleaved rounds."""
    block, batch_size = args.block, args.batch_size
    streams: dict[str, Any] = {
        "single": StreamingCorpus(
            open_corpus(union),
            rank=0,
            world_size=1,
            block=block,
            batch_size=batch_size,
            boundary_id=0,
            layout="global",
        ),
        "mixture": Mixture(sources(paths), block=block, batch_size=batch_size, boundary_id=0),
        "mixture, permutation": Mixture(
            sources(paths), block=block, batch_size=batch_size, boundary_id=0, order="permutation"
        ),
        # The windows objective: one TokenStream over the union against a windows mixture.
        "windows_single": TokenStream(
            open_corpus(union), block, batch_size, epochs=1, boundary_id=0, world_size=1
        ),
        "windows_mixture": Mixture(
            sources(paths), block=block, batch_size=batch_size, boundary_id=0, objective="windows"
        ),
        # Phase 1 from the second batch on: rows of 4 x block, batch_size / 4 of them.
        "mixture, block_schedule": Mixture(
            sources(paths),
            block=block,
            batch_size=batch_size,
            boundary_id=0,
            block_schedule=BlockSchedule([(block * batch_size, block), (None, 4 * block)]),
        ),
    }
    wall: dict[str, list[float]] = {name: [] for name in streams}
    cpu: dict[str, list[float]] = {name: [] for name in streams}
    iterators = {name: iter(stream) for name, stream in streams.items()}
    names = list(streams)
    for round_ in range(args.rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            batches = iterators[name]  # each round continues on fresh pages
            began, began_cpu = time.perf_counter(), time.process_time()
            tokens = 0
            for _ in range(args.batches):
                tokens += next(batches)[0].size
            wall[name].append(tokens / (time.perf_counter() - began))
            cpu[name].append(tokens / max(time.process_time() - began_cpu, 1e-9))
    out: dict[str, Any] = {}
    for clock, rates in (("wall", wall), ("cpu", cpu)):
        medians = {name: statistics.median(values) for name, values in rates.items()}
        out[clock] = {name: f"{value / 1e6:.2f}M tok/s" for name, value in medians.items()}
        out[clock]["ratio packed"] = round(medians["mixture"] / medians["single"], 3)
        out[clock]["ratio order (blocks / permutation)"] = round(
            medians["mixture"] / medians["mixture, permutation"], 3
        )
        # Each round's own order ratio (both ran in it): its median and range.
        paired = sorted(
            b / p for b, p in zip(rates["mixture"], rates["mixture, permutation"], strict=True)
        )
        out[clock]["ratio order per round (median, min, max)"] = [
            round(statistics.median(paired), 3),
            round(paired[0], 3),
            round(paired[-1], 3),
        ]
        out[clock]["ratio windows"] = round(
            medians["windows_mixture"] / medians["windows_single"], 3
        )
        out[clock]["ratio block_schedule (4 x block phase / mixture)"] = round(
            medians["mixture, block_schedule"] / medians["mixture"], 3
        )
    return out


def resume(paths: list[Path], args: argparse.Namespace) -> dict[str, float]:
    opened = sources(paths)
    out: dict[str, float] = {"documents": sum(len(s.documents) for s in opened)}
    rng = random.Random(0)
    rows = [rng.randrange(10**12) for _ in range(args.resume_rounds)]
    for objective in ("packed", "windows"):
        options: dict[str, Any] = {
            "block": args.block,
            "batch_size": args.batch_size,
            "boundary_id": 0,
            "objective": objective,
        }
        mixture = Mixture(opened, **options)
        state = mixture.state_dict()
        load, first = [], []
        for row in rows:
            began = time.perf_counter()
            mixture.load_state_dict({**state, "row": row})
            load.append(time.perf_counter() - began)
            fresh = Mixture(opened, **options)
            began = time.perf_counter()
            fresh.load_state_dict({**state, "row": row})
            next(iter(fresh))
            first.append(time.perf_counter() - began)
        out[f"{objective} load_ms"] = round(statistics.median(load) * 1e3, 3)
        out[f"{objective} load_and_first_batch_ms"] = round(statistics.median(first) * 1e3, 3)
    return out


def memory(paths: list[Path], args: argparse.Namespace) -> dict[str, float]:
    mixture = Mixture(sources(paths), block=args.block, batch_size=args.batch_size, boundary_id=0)
    out = {}
    for label, row in (("row_0", 0), ("row_1e9", 10**9)):
        mixture.seek(row)
        stream = iter(mixture)
        for _ in range(args.batches):
            next(stream)
        out[f"rss_anon_mb_{label}"] = rss_anon_mb()
    return out


def source_shapes(paths: list[Path]) -> str:
    """Each source's documents and its ``"blocks"`` windows at the default sizes."""
    shapes = []
    for path in paths:
        documents = len(open_corpus(path))
        block, window = OrderOptions().sizes(documents)
        blocks = -(-documents // block)
        windows = -(-blocks // window)
        shapes.append(f"{documents:,} documents ({windows} window{'s' * (windows > 1)})")
    return ", ".join(shapes)


def order_runs(paths: list[Path], args: argparse.Namespace) -> str:
    """``--order-batches`` batches of a fresh 3-source ``Mixture`` (plans included: the
    sources' windows or permutations, and those of their later epochs), blocks against
    permutation order, ``--order-rounds`` times: both advance in alternating slices of
    :data:`_ORDER_SLICE` batches (which goes first alternates by slice and by round), so a change of
    machine load falls on both. CPU seconds per round and the per-round ratio."""
    orders = ["blocks", "permutation"]
    spent: dict[str, list[float]] = {order: [] for order in orders}
    for round_number in range(args.order_rounds):
        iterators: dict[str, Any] = {}
        used = dict.fromkeys(orders, 0.0)
        for turn in range(-(-args.order_batches // _ORDER_SLICE)):
            size = min(_ORDER_SLICE, args.order_batches - turn * _ORDER_SLICE)
            # Who leads alternates by slice and by round: the first slice of a round
            # (both fresh mixtures built) costs its leader ~10 ms more whichever order
            # it is, so a fixed leader loses ~2% of a round.
            for order in orders if (turn + round_number) % 2 == 0 else orders[::-1]:
                began = time.process_time()
                if order not in iterators:
                    mixture = Mixture(
                        sources(paths),
                        block=args.block,
                        batch_size=args.batch_size,
                        boundary_id=0,
                        order=order,
                    )
                    iterators[order] = iter(mixture)
                batches = iterators[order]
                for _ in range(size):
                    next(batches)
                used[order] += time.process_time() - began
        for order in orders:
            spent[order].append(used[order])
    ratios = [p / b for b, p in zip(spent["blocks"], spent["permutation"], strict=True)]
    return (
        f"{args.order_batches} batches from a fresh Mixture, CPU s: blocks "
        f"{', '.join(f'{t:.3f}' for t in spent['blocks'])}, permutation "
        f"{', '.join(f'{t:.3f}' for t in spent['permutation'])}; throughput blocks / "
        f"permutation per round {', '.join(f'{r:.3f}' for r in ratios)} (median "
        f"{statistics.median(ratios):.3f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="30M tokens, 1M-document resume")
    parser.add_argument("--tokens", type=int, default=300_000_000)
    parser.add_argument("--resume-documents", type=int, default=10_000_000)
    parser.add_argument("--block", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--resume-rounds", type=int, default=9)
    parser.add_argument("--throughput-only", action="store_true", help="skip resume and memory")
    parser.add_argument(
        "--order-rounds",
        type=int,
        default=0,
        help="also time --order-batches batches of a fresh Mixture, blocks vs permutation "
        "order in alternating slices, this many rounds",
    )
    parser.add_argument("--order-batches", type=int, default=20_000)
    parser.add_argument(
        "--order-only",
        action="store_true",
        help="only the --order-rounds runs (no union corpus, throughput, resume or memory)",
    )
    parser.add_argument(
        "--multi-window",
        action="store_true",
        help="also run --order-rounds on sources that span several blocks windows each",
    )
    parser.add_argument(
        "--multi-tokens",
        type=int,
        default=240_000_000,
        help="tokens of the --multi-window sources, all three (split 0.5/0.3/0.2)",
    )
    parser.add_argument(
        "--multi-mean",
        type=float,
        default=150.0,
        help="mean document length of the --multi-window sources (150: 800k, 480k and "
        "320k documents: 4, 2 and 2 windows of 262,144 documents)",
    )
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/mixle-bench-mixture"))
    args = parser.parse_args()
    if args.quick:
        args.tokens, args.resume_documents = args.tokens // 10, args.resume_documents // 10
    shutil.rmtree(args.workdir, ignore_errors=True)
    try:
        paths = [args.workdir / f"source-{i}" for i in range(3)]
        for index, (path, share) in enumerate(zip(paths, SHARES, strict=True)):
            generate(path, int(args.tokens * share), 600.0, seed=index)
        if args.order_only:
            args.order_rounds = args.order_rounds or 5
        else:
            union = args.workdir / "union"
            write_union(paths, union)
            print(
                f"throughput ({args.tokens:,} tokens, block {args.block}, batch "
                f"{args.batch_size}, gather {gather_backend()}; MIXLE_GATHER selects it):"
            )
            print(f"  {throughput(paths, union, args)}")
        if args.order_rounds:
            print(f"order, gather {gather_backend()}, sources {source_shapes(paths)}:")
            print(f"  {order_runs(paths, args)}")
            if args.multi_window:
                multi = [args.workdir / f"multi-{i}" for i in range(3)]
                for index, (path, share) in enumerate(zip(multi, SHARES, strict=True)):
                    generate(path, int(args.multi_tokens * share), args.multi_mean, seed=20 + index)
                print(f"order, gather {gather_backend()}, sources {source_shapes(multi)}:")
                print(f"  {order_runs(multi, args)}")
                for path in multi:
                    shutil.rmtree(path, ignore_errors=True)
        if args.throughput_only or args.order_only:
            return
        small = [args.workdir / f"small-{i}" for i in range(3)]
        for index, (path, share) in enumerate(zip(small, SHARES, strict=True)):
            documents = int(args.resume_documents * share)
            generate(path, documents * 4, 4.0, seed=10 + index)
        print(f"resume: {resume(small, args)}")
        print(f"memory: {memory(paths, args)}")
        print(f"peak RSS {peak_rss_mb():.0f} MiB")
    finally:
        shutil.rmtree(args.workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
