"""One mixture source packed best-fit: epochs of one fixed row count, windows packed alone.

A source's epoch ``e`` is its epoch order (:class:`~mixle.data._options.OrderOptions`,
keyed by the source seed and ``e``) cut into windows — the ``"blocks"`` order's own
windows, or ``window_documents`` consecutive positions of the ``"permutation"`` order —
each packed by best-fit decreasing into rows shuffled inside the window
(:class:`~mixle.data._plan_best_fit.BestFitRows`). A mixture finds a source's row ``m``
as row ``m % R`` of epoch ``m // R``, so every epoch must have the same row count ``R``
whatever its order: ``R`` is :func:`~mixle.data._plan_best_fit.epoch_row_bound` of the
source's token slots and window count (both order-independent), the most rows the
windows' budgets can sum to; an epoch whose budgets sum to less gives the difference
to its last window, whose spare rows are padding (masked). So ``R`` is known before any
window is packed, the source's rows are found in O(1) epochs, and every document pair
is trained exactly once per epoch of the source.

Real (trained) targets: a document of ``s`` slots (its tokens and boundary) trains
``s - 1`` targets however it is cut (``min(s, block + 1) - 1`` truncated), so an
epoch's count is order-independent; a partial epoch adds its whole windows' counts and
the trained targets of its current window's first rows (that window packed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mixle.data._mixture_source import MixtureSource, SourceRows
from mixle.data._options import OrderOptions
from mixle.data._order_windows import OrderWindows
from mixle.data._packing import StreamLayout
from mixle.data._packing_options import PackingOptions
from mixle.data._plan_best_fit import BestFitRows, check_best_fit_block, epoch_row_bound
from mixle.data._plan_global_best_fit import LayoutWindows
from mixle.data._plan_store import PlanStore

__all__ = ["BestFitSourceRows", "build_best_fit_rows"]

# Epoch plans kept per source: a read spans at most two epochs.
_CACHED_EPOCHS = 2


def trained_targets(slots: np.ndarray, capacity: int, truncate: bool) -> int:
    """Targets that documents of ``slots`` token slots train once packed (see the
    module notes): ``s - 1`` each, ``min(s, capacity) - 1`` truncated, 0 when empty."""
    slots = np.asarray(slots, dtype=np.int64)
    if truncate:
        slots = np.minimum(slots, capacity)
    return int(np.maximum(slots - 1, 0).sum())


class BestFitSourceRows(SourceRows):
    """The endless best-fit row stream of one source (see the module docstring).

    Parameters are :class:`~mixle.data._mixture_source.SourceRows`'s and ``packing``
    (best-fit options: ``window_documents`` sizes the permutation order's windows,
    ``truncate`` cuts documents longer than a row).

    Raises
    ------
    ArgumentError
        ``block`` is too small for best-fit, the source trains no target, or the
        order's sizes do not fit the source.
    """

    def __init__(
        self,
        source: MixtureSource,
        *,
        packing: PackingOptions,
        block: int,
        seed: int,
        boundary_id: int | None,
        pad_id: int,
        order: OrderOptions,
        plan_store: PlanStore | None = None,
    ) -> None:
        self.packing = packing
        self._plans: dict[int, BestFitRows] = {}
        self._epoch_real: int | None = None
        # Window k's trained targets, cumulated: per epoch, computed when first asked.
        self._window_reals: dict[int, np.ndarray] = {}
        super().__init__(
            source,
            block=check_best_fit_block(block),
            seed=seed,
            boundary_id=boundary_id,
            pad_id=pad_id,
            order=order,
            plan_store=plan_store,
        )

    def __getstate__(self) -> dict[str, Any]:
        # Packed windows are rebuilt on demand: never ship them.
        return {**super().__getstate__(), "_plans": {}, "_window_reals": {}}

    @property
    def has_boundary(self) -> bool:
        return self.boundary_id is not None

    @property
    def slots(self) -> int:
        """Token slots of an epoch: every document's tokens, and one boundary each."""
        # The stream has a boundary between documents; the slots one after each.
        return self.stream_tokens + (1 if self.has_boundary and self.num_documents else 0)

    def num_windows(self) -> int:
        """Windows of every epoch (the same for all: it depends on the count only)."""
        count = self.num_documents
        if self.order.name == "blocks":
            block_documents, window_blocks = self.order.sizes(count)
            blocks = -(-count // block_documents)
            return -(-blocks // window_blocks)
        return -(-count // self.packing.window_documents)

    def _epoch_rows(self) -> int:
        if self.epoch_real() == 0:
            return 0
        return epoch_row_bound(self.slots, self.num_windows(), self.block)

    def epoch_real(self) -> int:
        """Trained targets of one epoch (the same every epoch). With a boundary and no
        truncation, the document tokens (no length is read); else from the lengths."""
        if self._epoch_real is None:
            if self.has_boundary and not self.packing.truncate:
                self._epoch_real = self.slots - self.num_documents
            else:
                slots = self._lengths() + (1 if self.has_boundary else 0)
                self._epoch_real = trained_targets(slots, self.block + 1, self.packing.truncate)
        return self._epoch_real

    def plan(self, epoch: int) -> BestFitRows:
        """Epoch ``epoch``'s best-fit rows (the last two epochs are kept)."""
        plan = self._plans.get(epoch)
        if plan is None:
            plan = BestFitRows(
                self._windows(epoch),
                block=self.block,
                has_boundary=self.has_boundary,
                seed=self.seed,
                epoch=epoch,
                truncate=self.packing.truncate,
                epoch_rows=self.rows_per_epoch,
            )
            if len(self._plans) >= _CACHED_EPOCHS:
                dropped = next(iter(self._plans))
                self._plans.pop(dropped)
                self._window_reals.pop(dropped, None)
            self._plans[epoch] = plan
        return plan

    def _windows(self, epoch: int) -> OrderWindows:
        if self.order.name == "blocks":
            return self.order.block_order(
                self.num_documents, self.offsets, seed=self.seed, epoch=epoch
            )
        layout = self.layout(epoch)  # the permutation's layout (kept in the plan store)
        assert isinstance(layout, StreamLayout)
        return LayoutWindows(layout, self.packing.window_documents)

    def _cumulative_window_reals(self, epoch: int) -> np.ndarray:
        """``[0, real_0, real_0 + real_1, ...]``: trained targets before each window."""
        reals = self._window_reals.get(epoch)
        if reals is None:
            windows = self.plan(epoch).windows
            tokens, _ = windows.window_totals()
            if self.has_boundary and not self.packing.truncate:
                per_window = tokens
            else:
                extra = 1 if self.has_boundary else 0
                per_window = np.array(
                    [
                        trained_targets(
                            windows.window(k)[1] + extra, self.block + 1, self.packing.truncate
                        )
                        for k in range(len(tokens))
                    ],
                    dtype=np.int64,
                )
            reals = np.zeros(len(per_window) + 1, dtype=np.int64)
            np.cumsum(per_window, out=reals[1:])
            self._window_reals[epoch] = reals
        return reals

    def real_tokens(self, rows: int) -> int:
        """Real (trained) targets in the source's first ``rows`` rows: whole epochs in
        closed form, a partial epoch by its whole windows and its current window's
        first rows (that window packed)."""
        epochs, part = divmod(rows, self.rows_per_epoch)
        total = epochs * self.epoch_real()
        if not part:
            return total
        plan = self.plan(epochs)
        k = int(plan.row_starts.searchsorted(part, side="right")) - 1
        window = plan.window(k)
        pieces = int(window.row_starts[part - int(plan.row_starts[k])])
        inside = int(window.length[:pieces].sum()) - pieces
        return total + int(self._cumulative_window_reals(epochs)[k]) + inside

    def _read_epoch(
        self, epoch: int, start: int, count: int, document_ids: bool
    ) -> list[np.ndarray]:
        rows = self.plan(epoch).read(
            self.documents,
            start,
            count,
            pad_id=self.pad_id,
            boundary_id=self.boundary_id,
            with_ids=document_ids,
        )
        part = [rows.rows, rows.mask]
        if rows.document_ids is not None and rows.position_ids is not None:
            part += [rows.document_ids, rows.position_ids]
        return part


def build_best_fit_rows(
    sources: Sequence[MixtureSource],
    *,
    packing: PackingOptions,
    block: int,
    seed: int,
    boundary_id: int | None,
    pad_id: int,
    order: OrderOptions,
    plan_store: PlanStore | None = None,
) -> list[BestFitSourceRows]:
    """One :class:`BestFitSourceRows` per source (raises on the first that cannot be
    packed, as :func:`~mixle.data._mixture_source.build_rows`)."""
    return [
        BestFitSourceRows(
            s,
            packing=packing,
            block=block,
            seed=seed,
            boundary_id=boundary_id,
            pad_id=pad_id,
            order=order,
            plan_store=plan_store,
        )
        for s in sources
    ]
