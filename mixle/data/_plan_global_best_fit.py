"""The global layout with best-fit packing, as a row plan (``packing="best_fit"``).

Batches, cursor and elastic resume are the global layout's
(:class:`~mixle.data._plan_global.GlobalPlan`): global batch ``k`` is rows ``[k * G, (k +
1) * G)``, the cursor counts global rows (state version 2) and resumes with any world
size and batch size. Only the rows differ: they are the epoch's best-fit rows
(:class:`~mixle.data._plan_best_fit.BestFitRows`), windows of ``window_documents``
consecutive positions of the epoch's order packed one by one, so every window's row
count — and the epoch's — is known from window totals before any window is packed.

The stream identity names the packing (``"packing": {"name": "best_fit", "version": 1,
"window_documents", "truncate"}``); a concatenate-and-chunk state has no such field, so
each packing refuses the other's states by that name.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle.data._batch import Batch
from mixle.data._documents import DocumentSource
from mixle.data._hints import HINT_BATCHES
from mixle.data._options import PackOptions, ShardOptions
from mixle.data._order_windows import OrderWindows
from mixle.data._packing import RowLayout, StreamLayout
from mixle.data._packing_options import PackingOptions
from mixle.data._plan_best_fit import BestFitRows, check_best_fit_block
from mixle.data._plan_global import GlobalPlan
from mixle.data._row_plan import EpochPlan, RowPlan, build_plan, consecutive_batches
from mixle.data._windowed_layout import WindowedLayout
from mixle.errors import ArgumentError

__all__ = ["BestFitEpochPlan", "BestFitGlobalPlan", "LayoutWindows", "packed_row_plan"]


def packed_row_plan(
    shard: ShardOptions, even_batches: bool, packing: PackingOptions, *, block: int, seed: int
) -> RowPlan:
    """The row plan of ``shard.layout`` packed by ``packing``.

    Raises
    ------
    ArgumentError
        Best-fit with a layout other than ``"global"``, or ``block`` too small for it.
    """
    if not packing.is_best_fit:
        return build_plan(shard, even_batches)
    if shard.layout != "global":
        raise ArgumentError(
            "`packing='best_fit'` needs layout='global' (its rows are planned per window of "
            f"the whole epoch's order). Got layout={shard.layout!r} instead."
        )
    return BestFitGlobalPlan(shard, even_batches, packing=packing, block=block, seed=seed)


class LayoutWindows:
    """An order laid out as a :class:`~mixle.data._packing.StreamLayout`, cut into
    windows of ``size`` consecutive positions (the ``"permutation"`` windows of
    :mod:`~mixle.data._order_windows`, read from the layout: repeats allowed)."""

    name = "permutation"
    version = 1

    def __init__(self, layout: StreamLayout, size: int) -> None:
        self.layout = layout
        self.size = size
        self.num_windows = -(-len(layout.indices) // size)

    def window(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        part = self.layout.positions(k * self.size, (k + 1) * self.size)
        return part.indices, part.lengths

    def window_documents(self, k: int) -> np.ndarray:
        return self.layout.positions(k * self.size, (k + 1) * self.size).indices

    def window_totals(self) -> tuple[np.ndarray, np.ndarray]:
        count = len(self.layout.indices)
        if not count:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        firsts = np.arange(0, count, self.size)
        lengths = self.layout.column("lengths", 0, count)
        tokens = np.add.reduceat(lengths, firsts).astype(np.int64)
        return tokens, np.diff(np.append(firsts, count)).astype(np.int64)


@dataclass(frozen=True, slots=True)
class BestFitEpochPlan(EpochPlan):
    """An epoch plan whose rows are best-fit rows (``layout`` is the epoch's order)."""

    best_fit: BestFitRows

    def read_rows(
        self, documents: DocumentSource, first_row: int, count: int, pack: PackOptions
    ) -> tuple[Batch, int]:
        rows = self.best_fit.read(
            documents,
            first_row,
            count,
            pad_id=pack.pad_id,
            boundary_id=pack.boundary_id,
            with_ids=pack.document_ids,
        )
        batch = Batch(
            rows.rows[:, :-1], rows.rows[:, 1:], rows.mask, rows.document_ids, rows.position_ids
        )
        return batch, rows.real

    def read_batches(
        self,
        documents: DocumentSource,
        first_rows: Sequence[int],
        counts: Sequence[int],
        pack: PackOptions,
    ) -> list[tuple[Batch, int]]:
        """:meth:`EpochPlan.read_batches` of best-fit rows: consecutive batches in one
        read, each batch's fields views of the group's arrays (best-fit rows do not
        overlap, so no batch shares a token with another)."""
        if not consecutive_batches(first_rows, counts):
            return [
                self.read_rows(documents, row, count, pack)
                for row, count in zip(first_rows, counts, strict=True)
            ]
        rows = self.best_fit.read(
            documents,
            first_rows[0],
            sum(counts),
            pad_id=pack.pad_id,
            boundary_id=pack.boundary_id,
            with_ids=pack.document_ids,
        )
        ends = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(np.asarray(counts, dtype=np.int64), out=ends[1:])
        trained = rows.trained_before[ends].tolist()
        ids, positions = rows.document_ids, rows.position_ids
        batches: list[tuple[Batch, int]] = []
        at = 0
        for number, count in enumerate(counts):
            part = slice(at, at + count)
            tokens = rows.rows[part]
            batch = Batch(
                tokens[:, :-1],
                tokens[:, 1:],
                rows.mask[part],
                None if ids is None else ids[part],
                None if positions is None else positions[part],
            )
            batches.append((batch, trained[number + 1] - trained[number]))
            at += count
        return batches


class BestFitGlobalPlan(GlobalPlan):
    """Row plan of ``layout="global", packing="best_fit"`` (see the module docstring)."""

    def __init__(
        self,
        shard: ShardOptions,
        even_batches: bool,
        *,
        packing: PackingOptions,
        block: int,
        seed: int,
    ) -> None:
        super().__init__(shard, even_batches)
        self.packing = packing
        self.block = check_best_fit_block(block)
        self.seed = seed

    def build(
        self, order: np.ndarray, lengths: np.ndarray, has_boundary: bool, block: int, *, epoch: int
    ) -> EpochPlan:
        layout = StreamLayout.build(order, lengths.take(order), has_boundary)
        return self.restore(layout, 0, 0, epoch=epoch)

    def build_windows(
        self, windows: OrderWindows, has_boundary: bool, block: int, *, epoch: int
    ) -> EpochPlan:
        """Best-fit rows of the ``"blocks"`` order: its windows are the packing windows
        (``window_documents`` applies to the permutation order only)."""
        return self._plan(WindowedLayout(windows, has_boundary), windows, has_boundary, epoch)

    def restore(self, layout: RowLayout, rows: int, num_batches: int, *, epoch: int) -> EpochPlan:
        # Only permutation plans are built from (or stored as) a whole layout.
        assert isinstance(layout, StreamLayout)
        windows = LayoutWindows(layout, self.packing.window_documents)
        return self._plan(layout, windows, layout.has_boundary, epoch)

    def _plan(
        self, layout: RowLayout, windows: OrderWindows, has_boundary: bool, epoch: int
    ) -> EpochPlan:
        best_fit = BestFitRows(
            windows,
            block=self.block,
            has_boundary=has_boundary,
            seed=self.seed,
            epoch=epoch,
            truncate=self.packing.truncate,
        )
        total = best_fit.rows
        return BestFitEpochPlan(layout, total, -(-total // self.step), best_fit)

    def hint_windows(self, plan: EpochPlan, first_rows: range, block: int) -> Iterator[np.ndarray]:
        # The documents of each window the batches reach, a window once (in window
        # order: its rows' order is known only once it is packed).
        assert isinstance(plan, BestFitEpochPlan)
        first_rows = first_rows[1:]
        span = self.shard.batch_size
        hinted = -1
        windows = plan.best_fit.windows
        for at in range(0, len(first_rows), HINT_BATCHES):
            rows = first_rows[at : at + HINT_BATCHES]
            reached = plan.best_fit.windows_of_rows(rows[0], rows[-1] + span - rows[0])
            fresh = [windows.window_documents(k) for k in reached if k > hinted]
            hinted = max(hinted, reached.stop - 1)
            yield np.concatenate(fresh) if fresh else np.empty(0, dtype=np.int64)

    def identity(self, stream: Mapping[str, Any]) -> dict[str, Any]:
        return {**super().identity(stream), "packing": self.packing.identity()}
