"""The epoch plans of one corpus view: built by its row plan, cached, kept in a store.

With the seed's permutation order, planning an epoch orders every document
(:func:`global_document_order`) and hands the order and the length table to the view's
:class:`~mixle.data._row_plan.RowPlan`; with the ``"blocks"`` order it hands the
epoch's :class:`~mixle.data._order_windows.BlockOrder` to the plan's
``build_windows`` (O(documents / block): the block totals, read from the cumulative
token offsets; no length table). The two most recent epochs are kept in memory (the
current one and the next); with a :class:`~mixle.data._plan_store.PlanStore` a
permutation plan is loaded by its identity (the stream identity, the epoch and the plan
format) and built and saved only when missing or inconsistent, so a restarted process
skips the O(documents) planning. A blocks plan is never stored: building it costs less
than loading it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, cast

import numpy as np

from mixle.data._documents import DocumentSource
from mixle.data._options import OrderOptions
from mixle.data._order import SequenceSelector, global_document_order, length_table
from mixle.data._order_windows import CumulativeOffsets
from mixle.data._packing import StreamLayout, rows_for_stream
from mixle.data._plan_global_best_fit import BestFitEpochPlan
from mixle.data._plan_per_rank_phased import RunPlacedRowPlan
from mixle.data._plan_store import (
    PLAN_FORMAT,
    PlanStore,
    plan_arrays,
    plan_from_arrays,
    sampled_lengths,
    stored_or_built,
)
from mixle.data._row_plan import EpochPlan, RowPlan, WindowedRowPlan

__all__ = ["EpochPlans"]


class EpochPlans:
    """Epoch plans of ``documents`` cut by ``row_plan`` (see the module docstring).

    Parameters
    ----------
    documents
        The corpus (its ``lengths`` are read on first use).
    row_plan
        The layout that turns an epoch's order into this view's plan.
    seed, sequence_selector
        The order's key and curriculum hook (:func:`global_document_order`).
    block, has_boundary
        How the documents are packed.
    order
        The epoch order (its sizes valid for ``documents``; ``"blocks"`` needs a
        :class:`~mixle.data._row_plan.WindowedRowPlan`).
    plan_store
        Where permutation plans are kept (``None``: nowhere); :meth:`get` is told the stream
        identity they are kept under (a callable, so that this object holds no
        reference back to its corpus: a cycle would keep every discarded corpus's
        plans alive until the cyclic collector runs).
    """

    def __init__(
        self,
        documents: DocumentSource,
        row_plan: RowPlan,
        *,
        seed: int,
        sequence_selector: SequenceSelector | None,
        block: int,
        has_boundary: bool,
        order: OrderOptions,
        plan_store: PlanStore | None,
    ) -> None:
        self.documents = documents
        self.row_plan = row_plan
        self.order = order
        self.offsets = CumulativeOffsets(documents)
        self.seed, self.sequence_selector = seed, sequence_selector
        self.block, self.has_boundary = block, has_boundary
        self.plan_store = plan_store
        self.num_documents = len(documents)
        self._lengths_array: np.ndarray | None = None
        self._plans: dict[int, EpochPlan] = {}
        self._batch_counts: dict[int, int] = {}  # of epochs a RunPlacedRowPlan counted

    def __getstate__(self) -> dict[str, Any]:
        # Epoch plans are O(documents) and cheap to rebuild: never ship them to workers.
        return {**self.__dict__, "_plans": {}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def recut(self, row_plan: RowPlan) -> EpochPlans:
        """The same documents, order and store cut by another row plan (lengths shared)."""
        plans = EpochPlans.__new__(EpochPlans)
        plans.__setstate__(self.__getstate__())
        plans.row_plan = row_plan
        plans._batch_counts = {}  # another shape (or selector state) counts otherwise
        return plans

    def get(self, epoch: int, identity: Callable[[], dict[str, Any]]) -> EpochPlan:
        """The plan of ``epoch`` (cached, loaded or built); ``identity()`` is the stream
        identity it is stored under (called only with a plan store)."""
        plan = self._plans.get(epoch)
        if plan is not None:
            return plan
        store = self.plan_store
        if store is None or self.order.name == "blocks":
            return self._keep(epoch, self._placed(epoch, self._build(epoch)))
        key = {**identity(), "epoch": epoch, "plan_format": PLAN_FORMAT}

        def build() -> tuple[EpochPlan, dict[str, np.ndarray]]:
            built = self._build(epoch)
            # A permutation plan's layout is whole (a StreamLayout).
            layout = cast(StreamLayout, built.layout)
            return built, plan_arrays(layout, built.rows, built.num_batches)

        built = stored_or_built(store, key, partial(self._stored, epoch), build)
        return self._keep(epoch, self._placed(epoch, built))

    def _placed(self, epoch: int, plan: EpochPlan) -> EpochPlan:
        """``plan`` placed in the run by a :class:`RunPlacedRowPlan` (the stored and
        built plan is the unplaced one), else ``plan``."""
        row_plan = self.row_plan
        if not isinstance(row_plan, RunPlacedRowPlan):
            return plan
        self._batch_counts[epoch] = plan.num_batches
        return row_plan.place(plan, epoch, self.batches_of)

    def batches_of(self, epoch: int) -> int:
        """The batches every rank takes in ``epoch`` (a :class:`RunPlacedRowPlan`'s
        count from the epoch's order, without building this rank's plan; kept)."""
        count = self._batch_counts.get(epoch)
        if count is None:
            row_plan = cast(RunPlacedRowPlan, self.row_plan)
            order = global_document_order(
                self.num_documents,
                seed=self.seed,
                epoch=epoch,
                sequence_selector=self.sequence_selector,
            )
            count = row_plan.count_batches(order, self.lengths(), self.has_boundary, self.block)
            self._batch_counts[epoch] = count
        return count

    def lengths(self) -> np.ndarray:
        """Every document's length (a :func:`length_table`), read on first use."""
        if self._lengths_array is None:
            self._lengths_array = length_table(self.documents.lengths)
        return self._lengths_array

    def _stored(self, epoch: int, arrays: Mapping[str, np.ndarray]) -> EpochPlan | None:
        """Epoch ``epoch``'s loaded plan, or ``None`` when it fails the checks."""
        loaded = plan_from_arrays(
            arrays,
            self.num_documents,
            lambda indices: sampled_lengths(self.documents, self._lengths_array, indices),
            self.has_boundary,
        )
        if loaded is None:
            return None
        layout, rows, num_batches = loaded
        plan = self.row_plan.restore(layout, rows, num_batches, epoch=epoch)
        # Concatenated rows follow from the stream's length; best-fit rows from the
        # packing of the restored windows (never rows_for_stream: such a plan was
        # always rejected, so rebuilt on every restart).
        if isinstance(plan, BestFitEpochPlan):
            expected = plan.rows
        else:
            expected = rows_for_stream(layout.stream_tokens, self.block)
        return plan if rows == expected else None

    def _build(self, epoch: int) -> EpochPlan:
        if self.order.name == "blocks":
            windows = self.order.block_order(
                self.num_documents, self.offsets, seed=self.seed, epoch=epoch
            )
            row_plan = cast(WindowedRowPlan, self.row_plan)
            return row_plan.build_windows(windows, self.has_boundary, self.block, epoch=epoch)
        order = global_document_order(
            self.num_documents,
            seed=self.seed,
            epoch=epoch,
            sequence_selector=self.sequence_selector,
        )
        return self.row_plan.build(
            order, self.lengths(), self.has_boundary, self.block, epoch=epoch
        )

    def _keep(self, epoch: int, plan: EpochPlan) -> EpochPlan:
        if len(self._plans) >= 2:  # keep the current and the next epoch
            self._plans.pop(next(iter(self._plans)))
        self._plans[epoch] = plan
        return plan
