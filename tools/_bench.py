"""The skeleton the streaming benchmarks share: options, a generated corpus, rounds.

A benchmark built on it (``tools/bench_elastic.py``, ``tools/bench_hf.py``) reads::

    def measure(path: Path, args: argparse.Namespace) -> dict[str, float]:
        samples = {"baseline": [], "candidate": []}
        for round_ in range(args.rounds):
            for kind in interleaved(("baseline", "candidate"), round_):
                samples[kind].append(...)
        return medians(samples)

    def main() -> int:
        args, rates = run_corpus_bench(__doc__, measure, workdir="/tmp/x-bench", ...)
        print(corpus_bench_header(args, "rank 1"))

Interleaving the candidates round by round, in alternating order, spreads drift (page
cache, frequency scaling) over both sides of a ratio; the reported figures are medians.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from mixle._gather import set_gather_backend
from mixle.corpus import open_corpus
from mixle.data import StreamingCorpus
from tools.bench_stream import generate

__all__ = [
    "QUICK_TOKENS",
    "corpus_bench_header",
    "corpus_bench_parser",
    "generated_corpus",
    "interleaved",
    "medians",
    "run_corpus_bench",
    "streaming_corpus",
]

_K = TypeVar("_K")
_R = TypeVar("_R")

#: Corpus size under ``--quick`` (a tenth of the 400M-token default).
QUICK_TOKENS = 40_000_000


def corpus_bench_parser(
    doc: str | None, *, workdir: str, world_size: int, batches: int, rounds: int
) -> argparse.ArgumentParser:
    """Options of a benchmark over one generated corpus read by ``--world-size`` ranks.

    ``--workdir`` (deleted at the end), ``--tokens`` (400M) or ``--quick``
    (:data:`QUICK_TOKENS`), ``--mean-length`` (600), ``--world-size``, ``--block`` (1024),
    ``--batch-size`` (8), ``--batches`` per round and ``--rounds``; the keyword arguments
    are the per-benchmark defaults. ``doc`` (the module docstring) is the help text.
    """
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", default=workdir)
    parser.add_argument("--tokens", type=int, default=400_000_000)
    parser.add_argument("--quick", action="store_true", help="40M tokens")
    parser.add_argument("--mean-length", type=float, default=600.0)
    parser.add_argument("--world-size", type=int, default=world_size)
    parser.add_argument("--block", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--batches", type=int, default=batches)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument(
        "--gather",
        choices=["auto", "numpy", "numba"],
        default="auto",
        help="packed-row gather: auto = the compiled one when mixle[fast] (numba) is installed",
    )
    return parser


def run_corpus_bench(
    doc: str | None,
    measure: Callable[[Path, argparse.Namespace], _R],
    *,
    workdir: str,
    world_size: int,
    batches: int,
    rounds: int,
) -> tuple[argparse.Namespace, _R]:
    """Parse the command line (:func:`corpus_bench_parser` with these defaults; ``--quick``
    sets ``tokens`` to :data:`QUICK_TOKENS`; ``--gather`` selects the packed-row gather), run ``measure(path, args)`` on a
    :func:`generated_corpus` and return ``(args, what it measured)``."""
    parser = corpus_bench_parser(
        doc, workdir=workdir, world_size=world_size, batches=batches, rounds=rounds
    )
    args = parser.parse_args()
    if args.quick:
        args.tokens = QUICK_TOKENS
    set_gather_backend(args.gather)
    with generated_corpus(args) as path:
        return args, measure(path, args)


@contextmanager
def generated_corpus(args: argparse.Namespace) -> Iterator[Path]:
    """Generate ``args.tokens`` tokens (seed 0) under ``args.workdir``; yield the corpus
    path; delete the whole work directory afterwards, also on error."""
    workdir = Path(args.workdir)
    path = workdir / "corpus"
    try:
        generate(path, args.tokens, args.mean_length, seed=0)
        yield path
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def streaming_corpus(
    path: Path, args: argparse.Namespace, *, rank: int, layout: str
) -> StreamingCorpus:
    """``StreamingCorpus`` of the corpus at ``path`` as rank ``rank`` of ``args.world_size``,
    with the benchmark's block and batch size (boundary token 0)."""
    return StreamingCorpus(
        open_corpus(path),
        rank=rank,
        world_size=args.world_size,
        block=args.block,
        batch_size=args.batch_size,
        boundary_id=0,
        layout=layout,
    )


def interleaved(kinds: Sequence[_K], round_: int) -> Sequence[_K]:
    """``kinds`` in round ``round_``'s order: as given in even rounds, reversed in odd ones."""
    return kinds if round_ % 2 == 0 else kinds[::-1]


def medians(samples: Mapping[_K, Sequence[float]]) -> dict[_K, float]:
    """The median of each kind's samples."""
    return {kind: statistics.median(values) for kind, values in samples.items()}


def corpus_bench_header(args: argparse.Namespace, reader: str) -> str:
    """The first report line: corpus size, who reads (e.g. ``"rank 1"``), shape, rounds."""
    return (
        f"corpus: {args.tokens:,} tokens; {reader} of {args.world_size}, block {args.block}, "
        f"batch {args.batch_size}; {args.rounds} interleaved rounds (medians)"
    )
