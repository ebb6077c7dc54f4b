"""The global layout as a row plan: one row stream for all ranks, global batches of it.

The epoch's whole order is packed into one row stream (a whole
:class:`~mixle.data._packing.StreamLayout` of the seed's permutation, or a
:class:`~mixle.data._windowed_layout.WindowedLayout` of the ``"blocks"`` order, built a
window at a time); global batch ``k`` is rows
``[k * G, (k + 1) * G)`` with ``G = world_size * batch_size``, and rank ``r`` reads rows
``[k * G + r * batch_size, k * G + (r + 1) * batch_size)``. The last global batch is
completed with fully masked rows, so every batch has ``batch_size`` rows and every rank
takes ``ceil(rows / G)`` steps. The cursor counts global rows (state version 2), is the
same on every rank and resumes with any world size and batch size: the stream identity
holds none of them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from mixle.data._hints import ranged_windows
from mixle.data._options import ShardOptions
from mixle.data._order_windows import OrderWindows
from mixle.data._packing import RowLayout, StreamLayout, rows_for_stream
from mixle.data._row_plan import EpochPlan, register_layout
from mixle.data._windowed_layout import WindowedLayout

__all__ = ["GlobalPlan"]


class GlobalPlan:
    """Row plan of ``layout="global"`` (see the module docstring)."""

    name = "global"
    cursor_version = 2
    index_key = "row"
    unit = "rows"
    index_name = "row"
    size_name = "num_rows"

    def __init__(self, shard: ShardOptions, even_batches: bool) -> None:
        # `even_batches` does not apply: every rank takes the same steps by construction.
        self.shard = shard
        self.step = self.row_stride = shard.global_batch_size

    def ordered(self, order: np.ndarray) -> np.ndarray:
        """The documents of the row stream, in stream order (the epoch's order)."""
        return order

    def build(
        self, order: np.ndarray, lengths: np.ndarray, has_boundary: bool, block: int, *, epoch: int
    ) -> EpochPlan:
        order = self.ordered(order)
        layout = StreamLayout.build(order, lengths.take(order), has_boundary)
        return self.restore(layout, rows_for_stream(layout.stream_tokens, block), 0, epoch=epoch)

    def build_windows(
        self, windows: OrderWindows, has_boundary: bool, block: int, *, epoch: int
    ) -> EpochPlan:
        layout = WindowedLayout(windows, has_boundary)
        return self.restore(layout, rows_for_stream(layout.stream_tokens, block), 0, epoch=epoch)

    def restore(self, layout: RowLayout, rows: int, num_batches: int, *, epoch: int) -> EpochPlan:
        # The plan is shared by every batch shape: the batch count is this shape's.
        return EpochPlan(layout, rows, -(-rows // self.step))

    def epoch_size(self, plan: EpochPlan) -> int:
        return plan.rows

    def first_row(self, index: int) -> int:
        return index + self.shard.rank * self.shard.batch_size

    def batch_rows(self, plan: EpochPlan, first_row: int) -> int:
        return self.shard.batch_size

    def hint_windows(self, plan: EpochPlan, first_rows: range, block: int) -> Iterator[np.ndarray]:
        return ranged_windows(plan.layout, first_rows, block, self.shard.batch_size * block)

    def identity(self, stream: Mapping[str, Any]) -> dict[str, Any]:
        # Rank, world size and batch size are not part of it: any shape resumes it. The
        # permutation order's identity has no "order" field (states from before there
        # was a choice of order have none).
        identity = {
            "fingerprint": stream["fingerprint"],
            "num_documents": stream["num_documents"],
            "seed": stream["seed"],
            "block": stream["block"],
            "pad_id": stream["pad_id"],
            "boundary_id": stream["boundary_id"],
            "sequence_selector": stream["sequence_selector"],
            "layout": self.name,
        }
        if stream.get("order") is not None:
            identity["order"] = stream["order"]
        return identity


register_layout(GlobalPlan.name, GlobalPlan)
