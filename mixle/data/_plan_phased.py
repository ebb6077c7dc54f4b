"""The global layout under a :class:`~mixle.data._block_schedule.BlockSchedule`, as a row plan.

One row stream for all ranks, as in :mod:`~mixle.data._plan_global`, but cut into rows
of each phase's block. The cursor counts *tokens* of the epoch (state version 3,
``{"version": 3, "epoch", "token", "stream"}``): global batch ``k`` of the epoch covers
the stream's tokens ``[k K, (k + 1) K]`` with ``K`` the constant tokens per global batch,
read as the ``K / b`` rows of block ``b`` of the phase that rules token ``k K``; rank
``r`` reads the ``batch_size`` of them that start at token ``k K + r K / world_size``.
Phase boundaries are multiples of ``K`` (:mod:`~mixle.data._block_schedule`), so the
row grid of every phase is aligned with the stream: its rows are the packed rows of
``block = b`` of the same stream, and the last row of one phase ends on the token the
next phase's first row starts with. The cursor resumes with any world size and batch
size that keep ``K``; the stream identity holds the schedule and ``K``
(``"block_schedule"``, ``"tokens_per_batch"``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle.data._batch import Batch
from mixle.data._block_schedule import BlockSchedule, EpochPhases, epoch_tokens
from mixle.data._documents import DocumentSource
from mixle.data._hints import ranged_windows
from mixle.data._options import PackOptions, ShardOptions
from mixle.data._packed_rows import read_packed_rows
from mixle.data._packing import RowLayout, rows_for_stream
from mixle.data._packing_options import PackingOptions
from mixle.data._plan_global import GlobalPlan
from mixle.data._row_plan import EpochPlan
from mixle.errors import ArgumentError

__all__ = ["PhasedEpochPlan", "PhasedGlobalPlan", "phased_row_plan"]


@dataclass(frozen=True, slots=True)
class PhasedEpochPlan(EpochPlan):
    """An epoch of the phased global layout: its phases and ``K`` (tokens per global
    batch). ``rows`` counts the rows of every phase; ``read_rows`` takes the first
    row's stream token (not a row index)."""

    phases: EpochPhases
    tokens_per_batch: int

    def read_rows(
        self, documents: DocumentSource, first_row: int, count: int, pack: PackOptions
    ) -> tuple[Batch, int]:
        """``count`` rows of the phase that rules stream token ``first_row``, from that
        token on, as a batch, and its real target count.

        Raises
        ------
        ArgumentError
            The token is not on the phase's row grid, or the rows run past the phase.
        """
        position = self.phases.at(first_row)
        block = self.phases.blocks[position]
        stop = self.phases.stop(position)
        if first_row % block or first_row + count * block > stop:
            raise ArgumentError(
                f"`token` {first_row} does not start {count} rows of block {block} inside "
                f"block schedule phase {self.phases.phases[position]} (tokens "
                f"{self.phases.starts[position]} to {stop}): resume at a multiple of the "
                f"{self.tokens_per_batch} tokens per global batch."
            )
        rows = read_packed_rows(
            documents,
            self.layout,
            first_row // block,
            count,
            block=block,
            pad_id=pack.pad_id,
            boundary_id=pack.boundary_id,
            document_ids=pack.document_ids,
        )
        batch = Batch(rows.context, rows.targets, rows.mask, rows.document_ids, rows.position_ids)
        return batch, rows.real


class PhaseLookup:
    """The phase lookups a row plan with a ``block_schedule`` shares, whatever its
    layout: the rows and the ``(phase, block)`` at a cursor token of a
    :class:`PhasedEpochPlan`."""

    def batch_rows(self, plan: EpochPlan, first_row: int) -> int:
        phases = self.phases_of(plan)
        return phases.batch_sizes[phases.at(first_row)]

    def phase_at(self, plan: EpochPlan, index: int) -> tuple[int, int]:
        """``(phase, block)`` of the batch at cursor token ``index``."""
        phases = self.phases_of(plan)
        position = phases.at(index)
        return phases.phases[position], phases.blocks[position]

    @staticmethod
    def phases_of(plan: EpochPlan) -> EpochPhases:
        if not isinstance(plan, PhasedEpochPlan):  # pragma: no cover - built by the plan
            raise TypeError(f"a phased plan reads PhasedEpochPlan, not {type(plan).__name__}")
        return plan.phases


class PhasedGlobalPlan(PhaseLookup, GlobalPlan):
    """Row plan of ``layout="global"`` with a ``block_schedule`` (see the module docstring).

    Raises
    ------
    ArgumentError
        The schedule does not fit the shard: its first block is not ``block``, or a
        phase's rows do not keep the tokens per global batch (see
        :meth:`~mixle.data._block_schedule.BlockSchedule.batch_sizes`).
    """

    cursor_version = 3
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
        self.tokens_per_batch = shard.world_size * shard.batch_size * block
        self.rank_tokens = self.tokens_per_batch // shard.world_size
        self.step = self.row_stride = self.tokens_per_batch

    def restore(self, layout: RowLayout, rows: int, num_batches: int, *, epoch: int) -> EpochPlan:
        tokens = layout.stream_tokens
        size = epoch_tokens(tokens, self.tokens_per_batch)
        ends = self.schedule.boundaries(self.tokens_per_batch, max(tokens - 1, 0))
        phases = EpochPhases.of_epoch(epoch, size, ends, self.blocks, self.batch_sizes)
        total_rows = 0
        for i, start in enumerate(phases.starts):
            # The rows of the phase's tokens that the stream reaches (the last phase of
            # the epoch may end in padding).
            stop = min(phases.stop(i), max(tokens - 1, 0))
            total_rows += rows_for_stream(max(stop - start, 0) + 1, phases.blocks[i])
        return PhasedEpochPlan(
            layout, total_rows, size // self.tokens_per_batch, phases, self.tokens_per_batch
        )

    def epoch_size(self, plan: EpochPlan) -> int:
        return plan.num_batches * self.tokens_per_batch

    def first_row(self, index: int) -> int:
        # Every phase's rank share is the same number of tokens: K / world_size.
        return index + self.shard.rank * self.rank_tokens

    def hint_windows(self, plan: EpochPlan, first_rows: range, block: int) -> Iterator[np.ndarray]:
        # first_rows are stream tokens here: ranges of one rank share of tokens each.
        return ranged_windows(plan.layout, first_rows, 1, self.rank_tokens)

    def identity(self, stream: Mapping[str, Any]) -> dict[str, Any]:
        identity = super().identity(stream)
        identity["block_schedule"] = self.schedule.identity()
        identity["tokens_per_batch"] = self.tokens_per_batch
        return identity


def phased_row_plan(
    shard: ShardOptions, schedule: BlockSchedule, packing: PackingOptions, block: int
) -> PhasedGlobalPlan:
    """The row plan of a ``block_schedule``.

    Raises
    ------
    ArgumentError
        Another layout than ``"global"``, best-fit packing, or a schedule that does not
        fit the shard (see :class:`~mixle.data._plan_phased.PhasedGlobalPlan`).
    """
    if shard.layout != "global":
        raise ArgumentError(
            "`block_schedule` needs layout='global' (its phases cut the one row stream of "
            "all ranks) or 'per-rank' (each rank's own stream, mixle.data."
            f"_plan_per_rank_phased). Got layout={shard.layout!r} instead."
        )
    if packing.is_best_fit:
        raise ArgumentError(
            "`block_schedule` does not support packing='best_fit': a phase switch cuts the "
            "concatenated token stream at a token, which best-fit rows do not have. Use "
            "packing='concatenate'."
        )
    return PhasedGlobalPlan(shard, schedule, block)
