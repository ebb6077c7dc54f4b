"""A mixture under a :class:`~mixle.data.BlockSchedule`: context length per phase.

The mixture's cursor counts *tokens* of the run (state version 3, ``{"version": 3,
"epoch": 0, "token", "stream"}``), as the phased global layout does
(:mod:`~mixle.data._plan_phased`): global batch ``k`` covers the run tokens ``[k K, (k
+ 1) K)`` with ``K = world_size x batch_size x block`` of the first phase, read as the
``K / b`` global rows of block ``b`` of the phase that rules token ``k K``. Phase
boundaries are multiples of ``K`` (:meth:`~mixle.data.BlockSchedule.boundaries`; a
mixture's stream is endless, so a fraction ``until`` is of ``total_tokens``, which must
be given). :class:`MixtureBlocks` is the table of the phases: phase ``p`` starts at run
token ``T_p`` and at global row ``R_p`` (``R_{p+1} = R_p + (T_{p+1} - T_p) / b_p``);
the mixing schedule (:mod:`~mixle.data._mixing_rule`) assigns global rows to sources
exactly as without a block schedule, across the phases (a :class:`MixturePhase`'s
``start_row`` is such a global row).

Each source counts its own *tokens* (:class:`PhasedSourceRows`): its position is
``(epoch, token)`` in its endless stream of reshuffled epochs. In phase ``p`` the
source's rows are ``b_p + 1`` tokens at stride ``b_p`` from where the previous phase
left it: first the rest of that epoch (the last row padded), then whole epochs of
``ceil((S - 1) / b_p)`` rows. So every adjacent token pair of every source epoch is a
target exactly once across the switch, as without a schedule, and the source's real
targets after ``n`` rows are ``epoch x (S - 1) + token`` of its position: closed form.
The source's position at each phase start comes from the schedule's closed-form
counts at ``R_p``: O(phases), no replay.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from mixle.data._batch import Batch
from mixle.data._block_schedule import BlockSchedule
from mixle.data._cursor import Cursor
from mixle.data._mixture_source import SourceRows
from mixle.data._packed_rows import read_packed_tokens
from mixle.data._packing_options import PackingOptions
from mixle.errors import ArgumentError, StateMismatchError

__all__ = [
    "MixtureBlocks",
    "PhasedSourceRows",
    "check_saved_schedule",
    "check_schedulable",
    "phased_batches",
    "phased_sources",
    "source_epochs",
    "source_epochs_started",
]

# A scheduled mixture reads this many global batches' rows of the rank at once (at
# most: never across a phase switch).
_READ_AHEAD = 64


@dataclass(frozen=True, slots=True)
class MixtureBlocks:
    """Where the phases of a mixture's block schedule fall (see the module docstring):
    phase ``p`` rules run tokens from ``token_starts[p]`` and global rows from
    ``row_starts[p]``, with ``blocks[p]``-token rows, ``batch_sizes[p]`` per rank."""

    token_starts: tuple[int, ...]
    row_starts: tuple[int, ...]
    blocks: tuple[int, ...]
    batch_sizes: tuple[int, ...]
    tokens_per_batch: int

    @classmethod
    def build(
        cls, schedule: BlockSchedule, *, world_size: int, batch_size: int, block: int
    ) -> MixtureBlocks:
        """The table of ``schedule`` for a mixture of ``world_size`` ranks of
        ``batch_size`` rows of ``block`` tokens in phase 0.

        Raises
        ------
        ArgumentError
            ``block`` is not the schedule's first block, a phase does not keep the
            tokens per global batch, a phase holds no whole global batch, or an
            ``until`` is a fraction and the schedule has no ``total_tokens`` (the
            mixture is endless: a fraction of nothing).
        """
        if not isinstance(schedule, BlockSchedule):
            raise ArgumentError(
                "`block_schedule` must be a BlockSchedule (e.g. BlockSchedule.parse("
                f"'2048:0.9,8192')) or None. Got {type(schedule).__name__} instead."
            )
        schedule.check_block(block)
        if schedule.total_tokens is None:
            for index, phase in enumerate(schedule.phases):
                if isinstance(phase.until, float):
                    raise ArgumentError(
                        f"block schedule phase {index} `until` is a fraction ({phase.until!r}) "
                        "but the schedule has no `total_tokens`: a mixture's stream is "
                        "endless, so give total_tokens (mixle train: --steps) or end the "
                        "phases at token counts."
                    )
        sizes = schedule.batch_sizes(world_size, batch_size)
        tokens = world_size * batch_size * block
        ends = schedule.boundaries(tokens, schedule.total_tokens or 0)
        blocks = tuple(p.block for p in schedule.phases)
        token_starts = (0, *ends)
        rows = [0]
        for p, end in enumerate(ends):
            rows.append(rows[-1] + (end - token_starts[p]) // blocks[p])
        return cls(token_starts, tuple(rows), blocks, sizes, tokens)

    def phase_of_token(self, token: int) -> int:
        """The phase that rules run token ``token``."""
        return bisect_right(self.token_starts, token) - 1

    def phase_of_row(self, row: int) -> int:
        """The phase of global row ``row``."""
        return bisect_right(self.row_starts, row) - 1

    def row_at(self, token: int) -> int:
        """The first global row at or after run token ``token`` (the row a global batch
        at cursor ``token`` starts with)."""
        p = self.phase_of_token(token)
        return self.row_starts[p] + -(-(token - self.token_starts[p]) // self.blocks[p])

    def token_at(self, row: int) -> int:
        """The run token global row ``row`` starts at."""
        p = self.phase_of_row(row)
        return self.token_starts[p] + (row - self.row_starts[p]) * self.blocks[p]

    def rank_rows(self, token: int, rank: int) -> tuple[int, int]:
        """``(first global row, rows)`` of ``rank``'s part of the global batch at run
        token ``token`` (see :meth:`check_token`)."""
        self.check_token(token)
        rows = self.batch_sizes[self.phase_of_token(token)]
        return self.row_at(token) + rank * rows, rows

    def check_rows(self, begin: int, end: int) -> None:
        """Raise unless global rows ``[begin, end)`` lie in one phase.

        Raises
        ------
        ArgumentError
            They span two phases (their rows differ in length), both named.
        """
        if end <= begin:
            return
        first, last = self.phase_of_row(begin), self.phase_of_row(end - 1)
        if first != last:
            raise ArgumentError(
                f"global rows {begin} to {end} span block schedule phases {first} and "
                f"{last} (rows of {self.blocks[first]} and {self.blocks[last]} tokens): "
                f"read them apart (phase {last} starts at row {self.row_starts[last]})."
            )

    def check_saved_token(self, token: int) -> None:
        """Raise unless a saved cursor ``token`` starts a global batch.

        Raises
        ------
        StateMismatchError
            Not a multiple of the tokens per global batch.
        """
        if token % self.tokens_per_batch:
            raise StateMismatchError(
                f"Mixture state field `token` {token} is not a multiple of the "
                f"{self.tokens_per_batch} tokens per global batch."
            )

    def check_token(self, token: int) -> None:
        """Raise unless ``token`` starts a global batch.

        Raises
        ------
        ArgumentError
            Not a multiple of the tokens per global batch.
        """
        if token % self.tokens_per_batch:
            raise ArgumentError(
                f"`token` {token} does not start a global batch: resume at a multiple of "
                f"the {self.tokens_per_batch} tokens per global batch."
            )


class PhasedSourceRows:
    """One source's endless token stream cut into rows of each phase's block (see the
    module docstring): the :class:`~mixle.data._mixture.SourceStream` a phased mixture
    reads. ``starts[p]`` is the source's own row count at phase ``p``'s first global
    row; its rows from there are of ``blocks[p]`` tokens.
    """

    def __init__(self, base: SourceRows, starts: Sequence[int], blocks: Sequence[int]) -> None:
        self.base = base
        self.name, self.fingerprint = base.name, base.fingerprint
        self.num_documents = base.num_documents
        self.rows_per_epoch = base.rows_per_epoch
        self.targets = base.stream_tokens - 1  # targets of one epoch, >= 1 (checked)
        self.starts = tuple(int(s) for s in starts)
        self.blocks = tuple(blocks)
        positions = [(0, 0)]
        for p in range(len(self.blocks) - 1):
            positions.append(self._locate(p, positions[p], self.starts[p + 1] - self.starts[p]))
        self.positions = tuple(positions)

    def _locate(self, phase: int, start: tuple[int, int], rows: int) -> tuple[int, int]:
        """The position ``(epoch, token)`` ``rows`` rows of phase ``phase`` after
        ``start`` (a row that would start on an epoch's last target starts the next
        epoch instead: the last row of an epoch is the padded one)."""
        epoch, token = start
        block = self.blocks[phase]
        rest = -(-(self.targets - token) // block)  # rows left in the epoch
        if rows < rest:
            return epoch, token + rows * block
        per_epoch = -(-self.targets // block)
        full, part = divmod(rows - rest, per_epoch)
        return epoch + 1 + full, part * block

    def position(self, rows: int) -> tuple[int, int]:
        """``(epoch, token)`` after the source's first ``rows`` rows."""
        phase = bisect_right(self.starts, rows) - 1
        return self._locate(phase, self.positions[phase], rows - self.starts[phase])

    def epoch_segments(self, epoch: int) -> list[tuple[int, int, int, int]]:
        """``(phase, first row, first token, rows)`` of every phase that cuts rows in
        source epoch ``epoch``: its rows there are the source's rows from ``first row``
        on, at stride ``blocks[phase]`` from the epoch's token ``first token``."""
        segments = []
        last = len(self.blocks) - 1
        for phase, (begin_epoch, begin_token) in enumerate(self.positions):
            end = self.positions[phase + 1] if phase < last else None
            if epoch < begin_epoch or (end is not None and (epoch, 0) >= end):
                continue
            block = self.blocks[phase]
            token = begin_token if epoch == begin_epoch else 0
            first = self.starts[phase]
            if epoch > begin_epoch:
                rest = -(-(self.targets - begin_token) // block)
                first += rest + (epoch - begin_epoch - 1) * -(-self.targets // block)
            if end is not None and end[0] == epoch:
                rows = (end[1] - token) // block
            else:
                rows = -(-(self.targets - token) // block)
            if rows > 0:
                segments.append((phase, first, token, rows))
        return segments

    def real_tokens(self, rows: int) -> int:
        """Real targets in the source's first ``rows`` rows: every target of each epoch
        passed once, then the tokens of the current one (closed form)."""
        epoch, token = self.position(rows)
        return epoch * self.targets + token

    def epochs(self, rows: int) -> float:
        """Passes over the source its first ``rows`` rows make (by targets)."""
        return self.real_tokens(rows) / self.targets

    def epochs_started(self, rows: int) -> int:
        """Epochs of the source its first ``rows`` rows touch."""
        epoch, token = self.position(rows)
        return epoch + (token > 0)

    def read(self, first: int, count: int, document_ids: bool) -> list[np.ndarray]:
        """The source's rows ``[first, first + count)``, all of one phase, as
        :meth:`SourceRows.read` returns them (rows may span epochs).

        Raises
        ------
        ArgumentError
            The rows span two phases (their blocks differ).
        """
        phase = bisect_right(self.starts, first) - 1
        if count and phase + 1 < len(self.starts) and first + count > self.starts[phase + 1]:
            raise ArgumentError(
                f"source {self.name!r} rows {first} to {first + count} span block schedule "
                f"phases {phase} and {phase + 1}: read them apart."
            )
        block = self.blocks[phase]
        epoch, token = self._locate(phase, self.positions[phase], first - self.starts[phase])
        parts: list[list[np.ndarray]] = []
        left = count
        while left > 0 or not parts:
            rest = -(-(self.targets - token) // block)
            take = min(left, rest)
            parts.append(self._read_epoch(epoch, token, take, block, document_ids))
            left -= take
            epoch, token = epoch + 1, 0
        if len(parts) == 1:
            return parts[0]
        return [np.concatenate(pieces) for pieces in zip(*parts, strict=True)]

    def _read_epoch(
        self, epoch: int, token: int, count: int, block: int, document_ids: bool
    ) -> list[np.ndarray]:
        base = self.base
        rows = read_packed_tokens(
            base.documents,
            base.layout(epoch),
            token,
            count,
            block=block,
            pad_id=base.pad_id,
            boundary_id=base.boundary_id,
            document_ids=document_ids,
        )
        part = [rows.rows, rows.mask]
        if rows.document_ids is not None and rows.position_ids is not None:
            part += [rows.document_ids, rows.position_ids]
        return part


def phased_sources(
    rows: Sequence[SourceRows], counts_at: Sequence[np.ndarray], blocks: Sequence[int]
) -> list[PhasedSourceRows]:
    """One :class:`PhasedSourceRows` per source; ``counts_at[p]`` are the sources' row
    counts at phase ``p``'s first global row (the schedule's ``counts_before``)."""
    return [
        PhasedSourceRows(source, [int(c[i]) for c in counts_at], blocks)
        for i, source in enumerate(rows)
    ]


def check_schedulable(objective: str, packing: PackingOptions) -> None:
    """Refuse a mixture whose rows cannot change block at a token.

    Raises
    ------
    ArgumentError
        ``objective="windows"`` or best-fit packing, named.
    """
    if objective == "windows" or packing.is_best_fit:
        asked = "objective='windows'" if objective == "windows" else f"packing={packing.name!r}"
        raise ArgumentError(
            f"`block_schedule` does not support {asked}: a phase switch continues each "
            "source's concatenated token stream at a token, which windows and best-fit "
            "rows do not have. Use objective='packed' and packing='concatenate'."
        )


def check_saved_schedule(schedule: BlockSchedule | None, saved: Mapping[str, Any]) -> None:
    """Name ``block_schedule`` when a saved identity's schedule (or its absence) is not
    ``schedule`` (the cursor versions differ too, which says less).

    Raises
    ------
    StateMismatchError
        Both schedules shown.
    """
    own = None if schedule is None else schedule.identity()
    kept = saved.get("block_schedule")
    if kept != own:
        raise StateMismatchError(
            f"Mixture state does not match this mixture: block_schedule in checkpoint: "
            f"{kept!r} / block_schedule in stream: {own!r}."
        )


def phased_batches(
    gather: Callable[[np.ndarray], Batch],
    cursor: Cursor,
    blocks: MixtureBlocks,
    rank: int,
    world_size: int,
) -> Iterator[Batch]:
    """A scheduled mixture's batches of ``rank`` from ``cursor`` on (moved before each
    batch is handed out): ``gather`` reads ascending global rows; the read-ahead
    (doubling up to 64 global batches) stays inside one phase."""
    step, ahead = blocks.tokens_per_batch, 1
    while True:
        token = cursor.index
        phase = blocks.phase_of_token(token)
        rows = blocks.batch_sizes[phase]
        size = rows * world_size  # global rows of the phase's batch
        count = ahead
        if phase + 1 < len(blocks.token_starts):
            count = min(count, (blocks.token_starts[phase + 1] - token) // step)
        mine = np.arange(rows, dtype=np.int64) + rank * rows
        starts = blocks.row_at(token) + size * np.arange(count, dtype=np.int64)
        batches = gather((starts[:, None] + mine).ravel())
        for k in range(count):
            cursor.move(0, token + (k + 1) * step)
            yield batches.rows(slice(k * rows, (k + 1) * rows))
        ahead = min(2 * ahead, _READ_AHEAD)


class _EpochRows(Protocol):
    rows_per_epoch: int


def source_epochs(rows: _EpochRows, count: int) -> float:
    """Passes over a source its first ``count`` rows make."""
    if isinstance(rows, PhasedSourceRows):
        return rows.epochs(count)
    return count / rows.rows_per_epoch


def source_epochs_started(rows: _EpochRows, count: int) -> int:
    """Epochs of a source its first ``count`` rows touch."""
    if isinstance(rows, PhasedSourceRows):
        return rows.epochs_started(count)
    return -(-count // rows.rows_per_epoch)
