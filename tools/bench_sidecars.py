"""Benchmark writing the scale sidecars (``mixle sidecars``, every writer's commit step).

Two corpora on tmpfs, written once without sidecars, each the shape that calls for one:

* ``large``: ``--documents`` (2^24) documents of 4 uint16 tokens in 32 MiB shards: the
  block-offsets sidecar (one value per 4096 documents);
* ``many``: ``--shards`` (4096) shards of 256 documents of 8 tokens: the
  document-offsets sidecar (every offset, one pass over the small offsets files).

Each round (interleaved, order alternating) times :func:`mixle.corpus.add_sidecars`
forcing that corpus's sidecar (so every round rewrites it: the work a commit adds),
and the floor a full pass costs: every offsets file read whole (``np.fromfile``).
CPU (``time.process_time``) and wall medians; ratios are to the floor of the same
corpus in the same run. The corpora are deleted at the end.

Usage::

    python -m tools.bench_sidecars --rounds 5
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np


def _build(path: Path, documents: int, tokens: int, shard_max_bytes: int) -> None:
    from mixle.corpus import CorpusWriter

    lengths = np.full(documents, tokens, dtype=np.int64)
    ids = (np.arange(documents * tokens, dtype=np.int64) % 50_000).astype(np.uint16)
    with CorpusWriter(
        path,
        vocab_size=50_257,
        shard_max_bytes=shard_max_bytes,
        durable=False,
        block_offsets=False,
        document_offsets=False,
    ) as writer:
        writer.add_flat(ids, lengths)


def _floor(path: Path) -> None:
    """Every offsets file of the corpus read whole: the least a full pass costs."""
    from mixle.corpus import open_corpus

    for entry in open_corpus(path).parsed_manifest.shards:
        np.fromfile(path / entry.offsets, dtype="<i8", offset=32)


def _timed(call: Any) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=1 << 24)
    parser.add_argument("--shards", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--work", default="/dev/shm/mixle-bench-sidecars")
    args = parser.parse_args()
    from mixle.corpus import add_sidecars

    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cases = {
        "large": (work / "large", {"block_offsets": True}),
        "many": (work / "many", {"document_offsets": True}),
    }
    samples: dict[str, list[tuple[float, float]]] = {
        f"{name}/{kind}": [] for name in cases for kind in ("sidecars", "floor")
    }
    try:
        _build(work / "large", args.documents, 4, 32 << 20)
        _build(work / "many", args.shards * 256, 8, 256 * 8 * 2)
        for round_ in range(args.rounds):
            order = list(cases) if round_ % 2 == 0 else list(reversed(cases))
            for name in order:
                path, flags = cases[name]
                kinds = ("sidecars", "floor") if round_ % 2 == 0 else ("floor", "sidecars")
                for kind in kinds:
                    if kind == "floor":
                        samples[f"{name}/floor"].append(_timed(lambda p=path: _floor(p)))
                    else:
                        samples[f"{name}/sidecars"].append(
                            _timed(lambda p=path, f=flags: add_sidecars(p, **f))
                        )
        sizes = {
            name: sum(f.stat().st_size for f in path.glob("*_offsets.bin"))
            for name, (path, _) in cases.items()
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"median of {args.rounds} rounds (wall s / CPU s)")
    for name in cases:
        side, floor = samples[f"{name}/sidecars"], samples[f"{name}/floor"]
        wall, cpu = (statistics.median(s[i] for s in side) for i in (0, 1))
        floor_wall, floor_cpu = (statistics.median(s[i] for s in floor) for i in (0, 1))
        print(
            f"{name:<6} add_sidecars {wall:.3f} / {cpu:.3f}   floor {floor_wall:.3f} / "
            f"{floor_cpu:.3f}   ratio {wall / floor_wall:.2f}x wall, {cpu / floor_cpu:.2f}x CPU   "
            f"sidecar {sizes[name]:,} bytes"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
