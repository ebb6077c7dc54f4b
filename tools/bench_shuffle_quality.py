"""Shuffle quality of epoch orders on a corpus sorted by source (issue #25 item 5).

The corpus holds ``--documents`` documents from ``--sources`` sources, each source one
contiguous run (the worst case for any order that keeps locality: a corpus ingested
source by source). Every order below is cut into global batches of ``--global-batch``
documents, in the order a data-parallel job consumes them, and for each batch we
measure:

- **source share**: each source's share of the batch. ``dispersion`` is the standard
  deviation of that share across batches, averaged over sources, divided by the
  binomial figure ``sqrt(p (1 - p) / G)`` of documents drawn independently (1.0 is as
  good as it gets; a full permutation is ~1.0); ``sources/batch`` is the mean number of
  distinct sources in a batch, ``max share p99`` the 99th percentile over batches of the
  largest source share.
- **corpus spread**: the mean distance ``|i - j| / N`` between two documents of a batch
  (1/3 for independent uniform draws), reported as a ratio to 1/3, and the median over
  batches of the span ``(max - min) / N``.

Orders:

- ``permutation``: mixle's full ``RandomState`` permutation (``global_document_order``).
- ``blocks B=.. W=..``: the hierarchical order of #25 (blocks of ``B`` documents
  permuted by a keyed Feistel bijection, windows of ``W`` consecutive blocks of that
  order, a keyed Feistel bijection inside each window). It uses
  ``mixle.data._order_windows.BlockOrder`` itself.
- ``litdata``: LitData's ``FullShuffle`` (litdata 0.2.x, read from its
  ``streaming/shuffle.py`` and ``utilities/shuffle.py``): chunks of ``--chunk``
  documents permuted globally (``RandomState([seed, epoch]).permutation``), assigned to
  the ``ranks x workers`` workers in contiguous runs of the permuted chunk list, each
  chunk's items shuffled locally (``_block_shuffle``: aligned blocks of 256 items
  shuffled, then the items inside each), each worker reading its chunks in order; the
  DataLoader takes a rank's batch ``s`` from worker ``s mod workers``, so global batch
  ``s`` is the ``s // workers``-th per-rank batch of worker ``s mod workers`` of every
  rank.
- ``mosaic py1e``: Mosaic Streaming's ``py1e`` (its documented algorithm, simulated):
  shards of ``--chunk`` documents shuffled once per run, split into
  ``--canonical-nodes`` canonical nodes, the shards of each node shuffled per epoch, and
  each shard's samples spread uniformly over a window of ``shuffle_block_size``
  (``max(4_000_000 // nodes, 2**18)``) positions centred on the shard's place in its
  node, the node's samples sorted by those positions; a global batch takes
  ``G / nodes`` consecutive samples of every canonical node.

Usage::

    python -m tools.bench_shuffle_quality                     # 2^24 documents, ~1 min
    python -m tools.bench_shuffle_quality --documents 1048576 --global-batch 256  # short
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from mixle.data import global_document_order
from mixle.data._order_windows import BlockOrder

Order = Callable[[], np.ndarray]


@dataclass(frozen=True, slots=True)
class Quality:
    """The per-batch statistics of one order (see the module docstring)."""

    dispersion: float
    sources_per_batch: float
    max_share_p99: float
    distance_ratio: float
    median_span: float


def measure(order: np.ndarray, count: int, num_sources: int, global_batch: int) -> Quality:
    """The statistics of ``order`` (indices into ``count`` documents) cut into batches of
    ``global_batch`` documents."""
    batches = len(order) // global_batch
    used = order[: batches * global_batch].reshape(batches, global_batch)
    per_source = -(-count // num_sources)
    sources = used // per_source
    counts = np.bincount(
        (np.arange(batches)[:, None] * num_sources + sources).ravel(),
        minlength=batches * num_sources,
    ).reshape(batches, num_sources)
    shares = counts / global_batch
    p = 1 / num_sources
    dispersion = float(shares.std(axis=0).mean() / math.sqrt(p * (1 - p) / global_batch))
    ordered = np.sort(used, axis=1).astype(np.float64) / count
    weights = 2 * np.arange(global_batch) - global_batch + 1
    pairs = global_batch * (global_batch - 1) / 2
    distance = (ordered @ weights) / pairs
    return Quality(
        dispersion=dispersion,
        sources_per_batch=float((counts > 0).sum(axis=1).mean()),
        max_share_p99=float(np.percentile(shares.max(axis=1), 99)),
        distance_ratio=float(distance.mean() * 3),
        median_span=float(np.median(ordered[:, -1] - ordered[:, 0])),
    )


def blocks_order(count: int, block: int, window: int, seed: int, epoch: int) -> np.ndarray:
    """The whole epoch of mixle's ``BlockOrder`` (its windows, concatenated)."""
    order = BlockOrder(
        count,
        _unit_offsets,  # window_documents reads no offsets
        seed=seed,
        epoch=epoch,
        block_documents=block,
        window_blocks=window,
    )
    return np.concatenate([order.window_documents(k) for k in range(order.num_windows)])


def _unit_offsets(indices: np.ndarray) -> np.ndarray:
    return indices


def _litdata_block_shuffle(
    items: np.ndarray, window: int, rng: np.random.RandomState
) -> np.ndarray:
    """litdata ``_block_shuffle``: aligned blocks of ``window`` shuffled inside, then
    the blocks shuffled (same RandomState calls, on arrays)."""
    blocks = [items[start : start + window].copy() for start in range(0, len(items), window)]
    for part in blocks:
        rng.shuffle(part)
    if len(blocks) > 1:
        rng.shuffle(blocks)
    return np.concatenate(blocks)


def litdata_order(
    count: int, chunk: int, ranks: int, workers: int, global_batch: int, seed: int, epoch: int
) -> np.ndarray:
    """LitData ``FullShuffle`` on one node, laid out as global batches (see the docstring)."""
    num_chunks = -(-count // chunk)
    shuffled = np.random.RandomState([seed, epoch]).permutation(num_chunks)
    streams: list[list[np.ndarray]] = [[] for _ in range(ranks * workers)]
    per_worker = count // (ranks * workers)
    worker, filled = 0, 0
    for chunk_index in shuffled.tolist():
        first = chunk_index * chunk
        items = np.arange(first, min(first + chunk, count), dtype=np.int64)
        rng = np.random.RandomState([seed, num_chunks, epoch, chunk_index])
        items = _litdata_block_shuffle(items, 256, rng)
        while len(items):  # a chunk may straddle two workers, as litdata's intervals do
            take = min(len(items), per_worker - filled) if worker < len(streams) - 1 else len(items)
            streams[worker].append(items[:take])
            items, filled = items[take:], filled + take
            if filled == per_worker and worker < len(streams) - 1:
                worker, filled = worker + 1, 0
    per_rank = global_batch // ranks
    flat = [np.concatenate(stream) for stream in streams]
    steps = per_worker // per_rank
    out = []
    for step in range(steps * workers):
        w, k = step % workers, step // workers
        for rank in range(ranks):
            out.append(flat[rank * workers + w][k * per_rank : (k + 1) * per_rank])
    return np.concatenate(out)


def mosaic_py1e_order(
    count: int, shard: int, nodes: int, global_batch: int, seed: int, epoch: int
) -> np.ndarray:
    """Mosaic ``py1e`` over shards of ``shard`` samples, laid out as global batches."""
    starts = np.arange(0, count, shard, dtype=np.int64)
    spans = np.stack([starts, np.minimum(starts + shard, count)], axis=1)
    run_rng = np.random.default_rng(seed)
    run_rng.shuffle(spans)
    epoch_rng = np.random.default_rng(seed + epoch)
    block_size = max(4_000_000 // nodes, 1 << 18)
    per_node = -(-len(spans) // nodes)
    node_orders = []
    for node in range(nodes):
        node_spans = spans[node * per_node : (node + 1) * per_node].copy()
        epoch_rng.shuffle(node_spans)
        sizes = node_spans[:, 1] - node_spans[:, 0]
        places = np.cumsum(sizes) - sizes
        total = int(sizes.sum())
        ids = np.repeat(node_spans[:, 0] - places, sizes) + np.arange(total)
        centre = np.repeat(places + sizes / 2, sizes)
        half = np.repeat(np.maximum(block_size, sizes) / 2, sizes)
        low = np.maximum(centre - half, 0)
        high = np.minimum(centre + half, total)
        positions = epoch_rng.uniform(low, high)
        node_orders.append(ids[np.argsort(positions, kind="stable")])
    take = global_batch // nodes
    steps = min(len(o) for o in node_orders) // take
    stacked = np.stack([o[: steps * take].reshape(steps, take) for o in node_orders], axis=1)
    return stacked.reshape(-1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=1 << 24)
    parser.add_argument("--sources", type=int, default=64)
    parser.add_argument("--global-batch", type=int, default=1024, help="documents per batch")
    parser.add_argument("--ranks", type=int, default=8, help="litdata: data-parallel ranks")
    parser.add_argument("--workers", type=int, default=4, help="litdata: workers per rank")
    parser.add_argument("--chunk", type=int, default=16384, help="litdata chunk / mosaic shard")
    parser.add_argument("--canonical-nodes", type=int, default=64, help="mosaic py1e")
    parser.add_argument(
        "--blocks",
        default="4096x16,4096x64,4096x256,1024x1024,256x4096,65536x4",
        help="comma-separated BxW settings of the blocks order",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    count, seed = args.documents, args.seed
    orders: dict[str, Order] = {
        "permutation": lambda: global_document_order(count, seed=seed, epoch=0),
    }
    for setting in args.blocks.split(","):
        block, window = (int(part) for part in setting.split("x"))
        orders[f"blocks B={block} W={window} ({block * window:,} docs/window)"] = (
            lambda b=block, w=window: blocks_order(count, b, w, seed, 0)
        )
    orders[f"litdata chunk={args.chunk} ({args.ranks}x{args.workers} workers)"] = lambda: (
        litdata_order(count, args.chunk, args.ranks, args.workers, args.global_batch, seed, 0)
    )
    orders[f"mosaic py1e shard={args.chunk} nodes={args.canonical_nodes}"] = lambda: (
        mosaic_py1e_order(count, args.chunk, args.canonical_nodes, args.global_batch, seed, 0)
    )
    print(
        f"{count:,} documents sorted by source ({args.sources} contiguous sources of "
        f"{count // args.sources:,}), global batch {args.global_batch} documents"
    )
    print(
        "| order | dispersion (iid = 1) | sources/batch | max share p99 | "
        "distance / iid | median span | seconds |"
    )
    print("|---|---|---|---|---|---|---|")
    report = {}
    for name, build in orders.items():
        start = time.perf_counter()
        order = build()
        seconds = time.perf_counter() - start
        assert len(order) >= count - args.global_batch * args.workers, name
        quality = measure(order, count, args.sources, args.global_batch)
        report[name] = {**asdict(quality), "seconds": seconds}
        print(
            f"| {name} | {quality.dispersion:.2f} | {quality.sources_per_batch:.1f} | "
            f"{quality.max_share_p99:.3f} | {quality.distance_ratio:.2f} | "
            f"{quality.median_span:.3f} | {seconds:.1f} |"
        )
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
