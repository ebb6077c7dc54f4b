"""The seed's per-rank layout as a row plan: rank ``r`` of ``W`` packs ``order[r::W]``.

Each rank packs its own round-robin share of the epoch's order into its own row stream
and cuts it into batches of ``batch_size`` rows (the last may be smaller); the cursor
is ``(epoch, batch)`` (state version 1), tied to the rank, the world size and the batch
size. With ``even_batches`` every rank takes the smallest per-rank batch count,
computed locally from every rank's lengths (no communication).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from mixle.data._hints import contiguous_windows
from mixle.data._options import ShardOptions
from mixle.data._packing import StreamLayout, rows_for_stream
from mixle.data._row_plan import EpochPlan, register_layout

__all__ = ["PerRankPlan"]


def _ceil_div(a: np.ndarray | int, b: int) -> Any:
    return -(-a // b)


def _even_batch_count(
    ordered_lengths: np.ndarray, world_size: int, has_boundary: bool, block: int, batch_size: int
) -> int:
    """Smallest per-rank batch count of the epoch, from every rank's document lengths.

    ``ordered_lengths[i]`` is the length of the ``i``-th document of the epoch's order;
    rank ``r`` holds positions ``r, r + W, ...``, i.e. column ``r`` of a ``(-1, W)`` view.
    """
    count = len(ordered_lengths)
    full = count - count % world_size
    tokens = ordered_lengths[:full].reshape(-1, world_size).sum(axis=0, dtype=np.int64)
    tokens[: count - full] += ordered_lengths[full:]
    documents = np.maximum(count - np.arange(world_size) + world_size - 1, 0) // world_size
    if has_boundary:
        tokens = tokens + np.maximum(documents - 1, 0)
    rows = np.where(tokens >= 2, _ceil_div(tokens - 1, block), 0)
    return int(_ceil_div(rows, batch_size).min())


class PerRankPlan:
    """Row plan of ``layout="per-rank"`` (see the module docstring)."""

    name = "per-rank"
    cursor_version = 1
    index_key = "batch"
    unit = "batches"
    index_name = "index"
    size_name = "num_batches"
    step = 1

    def __init__(self, shard: ShardOptions, even_batches: bool) -> None:
        self.shard = shard
        self.even_batches = even_batches
        self.row_stride = shard.batch_size

    def build(
        self, order: np.ndarray, lengths: np.ndarray, has_boundary: bool, block: int, *, epoch: int
    ) -> EpochPlan:
        rank, world_size, batch_size = self.shard.rank, self.shard.world_size, self.shard.batch_size
        # One random gather of the lengths serves this rank's layout and every rank's
        # total (`take` of the narrow table: about 30% cheaper than int64 fancy indexing).
        ordered_lengths = lengths.take(order)
        # A copy: a strided view would keep every rank's order (world_size times the
        # rank's share) alive in the plan for the whole epoch.
        own = order[rank::world_size].copy()
        layout = StreamLayout.build(own, ordered_lengths[rank::world_size], has_boundary)
        rows = rows_for_stream(layout.stream_tokens, block)
        batches = int(_ceil_div(rows, batch_size))
        if self.even_batches and world_size > 1:
            batches = _even_batch_count(
                ordered_lengths, world_size, has_boundary, block, batch_size
            )
        return EpochPlan(layout, rows, batches)

    def restore(
        self, layout: StreamLayout, rows: int, num_batches: int, *, epoch: int
    ) -> EpochPlan:
        return EpochPlan(layout, rows, num_batches)

    def epoch_size(self, plan: EpochPlan) -> int:
        return plan.num_batches

    def first_row(self, index: int) -> int:
        return index * self.shard.batch_size

    def batch_rows(self, plan: EpochPlan, first_row: int) -> int:
        return min(first_row + self.shard.batch_size, plan.rows) - first_row

    def hint_windows(self, plan: EpochPlan, first_rows: range, block: int) -> Iterator[np.ndarray]:
        return contiguous_windows(plan.layout, first_rows, block, self.shard.batch_size * block)

    def identity(self, stream: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "fingerprint": stream["fingerprint"],
            "num_documents": stream["num_documents"],
            "seed": stream["seed"],
            "block": stream["block"],
            "batch_size": self.shard.batch_size,
            "rank": self.shard.rank,
            "world_size": self.shard.world_size,
            "pad_id": stream["pad_id"],
            "boundary_id": stream["boundary_id"],
            "even_batches": self.even_batches,
            "sequence_selector": stream["sequence_selector"],
        }


register_layout(PerRankPlan.name, PerRankPlan)
