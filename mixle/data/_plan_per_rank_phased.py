"""The per-rank layout under a :class:`~mixle.data._block_schedule.BlockSchedule`.

Each rank packs its own round-robin share of the epoch's order into its own token
stream, as in :mod:`~mixle.data._plan_per_rank`, and cuts it into rows of each phase's
block. Every step takes ``R = batch_size x block`` tokens of each rank's stream (``K =
world_size x R`` per global batch, constant across phases: a phase of block ``b`` takes
``R / b`` rows per rank), so the cursor counts *tokens of the rank's stream* (state
version 4, ``{"version": 4, "epoch", "token", "stream"}``): the batch at cursor token
``t`` is the rows of the phase that rules ``t`` that start at ``t``, the rows of block
``b`` starting at the stream's tokens ``t, t + b, ...`` (row ``t / b`` of the stream
packed at ``block = b``).

All ranks switch at the same step. Phase boundaries are run tokens (``K`` per step,
from the start of epoch 0), rounded to whole global batches
(:meth:`~mixle.data.BlockSchedule.boundaries`); a run token ``T`` of epoch ``e`` is
step ``(T - T_e) / K`` of that epoch, the same step on every rank, and token ``(T -
T_e) / W`` of each rank's stream. ``T_e`` (where epoch ``e`` starts in the run) is the
sum of ``N_e' x K`` over the epochs before, ``N_e'`` the steps of epoch ``e'``: with
``even_batches`` (required on more than one rank) the smallest per-rank batch count,
which every rank computes identically from every rank's lengths
(:func:`~mixle.data._plan_per_rank._even_batch_count`). A fraction ``until`` without
``total_tokens`` is of epoch 0's run tokens ``N_0 x K``. Computing ``T_e`` orders the
epochs before ``e``, O(documents) each, but only up to the epoch in which the last
phase begins: every later epoch lies in the last phase whatever its start.

Every boundary is a multiple of ``K``, so a phase starts on a rank token that is a
multiple of ``R``, itself a multiple of every phase's block: the rows of each phase lie
on its block's grid of the rank's stream, the last row of a phase ends on the token the
next phase's first row starts with, and every adjacent pair of the rank's epoch (its
first ``N_e x R + 1`` tokens) is a target exactly once. The last batch of an epoch is
completed with fully masked rows (every batch of a phase has its rows). Like the
unscheduled per-rank layout the cursor resumes only on the same rank, world size and
batch size (the state's identity holds them and the schedule); elastic resume needs
``layout="global"``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from mixle.data._batch import Batch
from mixle.data._block_schedule import BlockSchedule, EpochPhases
from mixle.data._documents import DocumentSource
from mixle.data._hints import contiguous_windows
from mixle.data._options import PackOptions, ShardOptions
from mixle.data._packing import rows_for_stream
from mixle.data._packing_options import PackingOptions
from mixle.data._plan_per_rank import PerRankPlan, _even_batch_count
from mixle.data._plan_phased import PhasedEpochPlan, PhaseLookup
from mixle.data._row_plan import EpochPlan
from mixle.errors import ArgumentError

__all__ = ["PhasedPerRankPlan", "PhasedRankEpochPlan", "RunPlacedRowPlan", "per_rank_phased_plan"]

#: Cursor version of the per-rank layout in phases (1: per-rank, 2: global, 3: global
#: in phases).
PER_RANK_PHASED_VERSION = 4


@runtime_checkable
class RunPlacedRowPlan(Protocol):
    """A row plan whose epoch depends on where the epoch starts in the run (the steps
    of the epochs before it), which :class:`~mixle.data._epoch_plans.EpochPlans`
    supplies: it counts any epoch's batches from its order without building it."""

    def count_batches(
        self, order: np.ndarray, lengths: np.ndarray, has_boundary: bool, block: int
    ) -> int:
        """The batches every rank takes in the epoch of ``order``."""
        ...

    def place(self, plan: EpochPlan, epoch: int, batches_of: Callable[[int], int]) -> EpochPlan:
        """Epoch ``epoch``'s built (or stored) ``plan``, placed in the run:
        ``batches_of(e)`` is epoch ``e``'s batch count."""
        ...


@dataclass(frozen=True, slots=True)
class PhasedRankEpochPlan(PhasedEpochPlan):
    """An epoch of one rank's stream in phases: ``tokens_per_batch`` is the rank's
    tokens per step ``R``; ``read_rows`` takes a token of the rank's stream."""

    def read_rows(
        self, documents: DocumentSource, first_row: int, count: int, pack: PackOptions
    ) -> tuple[Batch, int]:
        if first_row % self.tokens_per_batch:
            raise ArgumentError(
                f"`token` {first_row} is not the first token of a step of this rank's "
                f"stream: resume at a multiple of the {self.tokens_per_batch} tokens per "
                "rank per step (batch_size x block)."
            )
        return PhasedEpochPlan.read_rows(self, documents, first_row, count, pack)


class PhasedPerRankPlan(PhaseLookup, PerRankPlan):
    """Row plan of ``layout="per-rank"`` with a ``block_schedule`` (see the module
    docstring).

    Raises
    ------
    ArgumentError
        The schedule does not fit the shard: its first block is not ``block``, or a
        phase's rows do not keep the tokens per global batch (see
        :meth:`~mixle.data.BlockSchedule.batch_sizes`).
    """

    cursor_version = PER_RANK_PHASED_VERSION
    index_key = "token"
    unit = "tokens"
    index_name = "token"
    size_name = "epoch_size"

    def __init__(self, shard: ShardOptions, schedule: BlockSchedule, block: int) -> None:
        super().__init__(shard, even_batches=True)
        schedule.check_block(block)
        self.schedule = schedule
        self.batch_sizes = schedule.batch_sizes(shard.world_size, shard.batch_size)
        self.blocks = tuple(p.block for p in schedule.phases)
        self.rank_tokens = shard.batch_size * block
        self.tokens_per_batch = shard.world_size * self.rank_tokens
        self.step = self.row_stride = self.rank_tokens
        self._ends: tuple[int, ...] | None = None
        # Where each epoch starts in the run, in run tokens, capped at the last
        # boundary (every epoch from there on is in the last phase).
        self._starts: dict[int, int] = {0: 0}

    def count_batches(
        self, order: np.ndarray, lengths: np.ndarray, has_boundary: bool, block: int
    ) -> int:
        return _even_batch_count(
            lengths.take(order), self.shard.world_size, has_boundary, block, self.shard.batch_size
        )

    def _boundaries(self, batches_of: Callable[[int], int]) -> tuple[int, ...]:
        if self._ends is None:
            # A fraction without total_tokens is of epoch 0's run tokens (only then
            # is epoch 0 counted for it).
            fractions = any(isinstance(p.until, float) for p in self.schedule.phases)
            basis = 0
            if fractions and self.schedule.total_tokens is None:
                basis = batches_of(0) * self.tokens_per_batch
            self._ends = self.schedule.boundaries(self.tokens_per_batch, basis)
        return self._ends

    def _start(self, epoch: int, ends: tuple[int, ...], batches_of: Callable[[int], int]) -> int:
        last = ends[-1] if ends else 0
        known = max(e for e in self._starts if e <= epoch)
        start = self._starts[known]
        for e in range(known, epoch):
            if start >= last:
                break
            start = min(start + batches_of(e) * self.tokens_per_batch, last)
            self._starts[e + 1] = start
        return min(start, last)

    def place(self, plan: EpochPlan, epoch: int, batches_of: Callable[[int], int]) -> EpochPlan:
        ends = self._boundaries(batches_of)
        start = self._start(epoch, ends, batches_of)
        world_size, size = self.shard.world_size, plan.num_batches * self.rank_tokens
        # Run tokens past the epoch's start, as tokens of each rank's stream: both are
        # multiples of K = world_size x R, so the division is exact.
        local = [(end - start) // world_size for end in ends]
        phases = EpochPhases.of_epoch(0, size, local, self.blocks, self.batch_sizes)
        targets = max(plan.layout.stream_tokens - 1, 0)
        rows = 0
        for i, begin in enumerate(phases.starts):
            stop = min(phases.stop(i), targets)
            rows += rows_for_stream(max(stop - begin, 0) + 1, phases.blocks[i])
        return PhasedRankEpochPlan(plan.layout, rows, plan.num_batches, phases, self.rank_tokens)

    def epoch_size(self, plan: EpochPlan) -> int:
        return plan.num_batches * self.rank_tokens

    def first_row(self, index: int) -> int:
        return index

    def hint_windows(self, plan: EpochPlan, first_rows: range, block: int) -> Iterator[np.ndarray]:
        # first_rows are tokens of the rank's stream, R of them a step.
        return contiguous_windows(plan.layout, first_rows, 1, self.rank_tokens)

    def identity(self, stream: Mapping[str, Any]) -> dict[str, Any]:
        # The tokens per global batch follow from block, batch_size and world_size,
        # which the identity holds: a shape change is refused as one (elastic resume
        # needs the global layout).
        identity = super().identity(stream)
        identity["block_schedule"] = self.schedule.identity()
        return identity


def per_rank_phased_plan(
    shard: ShardOptions,
    schedule: BlockSchedule,
    packing: PackingOptions,
    block: int,
    *,
    even_batches: bool,
    stateful_selector: bool,
) -> PhasedPerRankPlan:
    """The per-rank row plan of a ``block_schedule``.

    Raises
    ------
    ArgumentError
        Best-fit packing, ``even_batches=False`` on more than one rank (the ranks
        would take different steps in an epoch, so they would switch phases at
        different steps after it), a stateful ``sequence_selector`` (an epoch's start
        in the run counts the steps of the epochs before it, whose orders such a
        selector does not reproduce), or a schedule that does not fit the shard.
    """
    if packing.is_best_fit:
        raise ArgumentError(
            "`block_schedule` does not support packing='best_fit': a phase switch cuts the "
            "concatenated token stream at a token, which best-fit rows do not have. Use "
            "packing='concatenate'."
        )
    if not even_batches and shard.world_size > 1:
        raise ArgumentError(
            "`block_schedule` with layout='per-rank' needs even_batches=True on more than "
            "one rank: every rank must take the same steps per epoch to switch phases at "
            f"the same step. Got even_batches=False, world_size={shard.world_size}."
        )
    if stateful_selector:
        raise ArgumentError(
            "`block_schedule` with layout='per-rank' does not take a stateful "
            "`sequence_selector` (e.g. a LengthBandit): an epoch's place in the run counts "
            "the steps of the epochs before it, whose orders such a selector does not "
            "rebuild."
        )
    return PhasedPerRankPlan(shard, schedule, block)
