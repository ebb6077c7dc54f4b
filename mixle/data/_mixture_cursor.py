"""A mixture's cursor: one endless epoch, counted in global rows or, under a block
schedule, in run tokens.

:class:`MixtureCursor` is the part of :class:`~mixle.data.Mixture` that answers where
the cursor is, where it moves per global batch and which phase and block rule there:
the ``(epoch, index)`` arithmetic the trainer, the loaders and the sightings rely on.
The cursor's only epoch is 0 and its stream never ends (:data:`ENDLESS`); it moves at
most to :data:`MAX_ROW`.
"""

from __future__ import annotations

from mixle._checks import nonnegative_int
from mixle.data._cursor import Cursor
from mixle.data._mixture_phased import MixtureBlocks
from mixle.data._mixture_records import ENDLESS, MAX_ROW
from mixle.data._options import ShardOptions
from mixle.errors import ArgumentError

__all__ = ["MixtureCursor"]


class MixtureCursor:
    """The cursor arithmetic of a mixture (a base of :class:`~mixle.data.Mixture`,
    which sets the attributes below)."""

    block: int
    blocks: MixtureBlocks | None
    shard: ShardOptions
    _cursor: Cursor

    def _new_cursor(self) -> Cursor:
        if self.blocks is None:
            return Cursor("Mixture", index_key="row", version=2)
        return Cursor("Mixture", index_key="token", version=3)

    @property
    def global_batch_size(self) -> int:
        return self.shard.global_batch_size

    # ------------------------------------------------------------------ block schedule
    @property
    def largest_block(self) -> int:
        """The longest row of any phase (``block`` without a block schedule): what a
        model must be built for."""
        return self.block if self.blocks is None else max(self.blocks.blocks)

    @property
    def step_size(self) -> int:
        """How far the cursor moves per global batch: ``global_batch_size`` rows, or
        with a block schedule the tokens per global batch."""
        return self.global_batch_size if self.blocks is None else self.blocks.tokens_per_batch

    def cursor_row(self, index: int) -> int:
        """The global row at cursor index ``index`` (itself without a block schedule;
        with one, the first row at or after run token ``index``)."""
        index = nonnegative_int("index", index)
        return index if self.blocks is None else self.blocks.row_at(index)

    def phase_at(self, epoch: int, index: int) -> tuple[int, int]:
        """``(phase, block)`` of the global batch at cursor ``(epoch, index)``: the
        ``block_schedule`` phase (0 without one) and its rows' block."""
        nonnegative_int("epoch", epoch)
        if self.blocks is None:
            return 0, self.block
        phase = self.blocks.phase_of_token(nonnegative_int("index", index))
        return phase, self.blocks.blocks[phase]

    # ------------------------------------------------------------------ cursor
    @property
    def cursor(self) -> tuple[int, int]:
        """``(0, row)``: the first global row of the next global batch."""
        return self._cursor.position

    def epoch_size(self, epoch: int) -> int:
        """Where the cursor's row ends: never (:data:`ENDLESS`); only epoch 0 exists."""
        nonnegative_int("epoch", epoch)
        return ENDLESS

    def steps_left(self, epoch: int, row: int) -> int:
        """Steps left in the stream from ``(epoch, row)``: :data:`ENDLESS`."""
        return ENDLESS

    def next_cursor(self, epoch: int, row: int, steps: int) -> tuple[int, int] | None:
        """The cursor ``steps`` global batches after ``(0, row)``: ``(0, row + steps * G)``
        (``G`` the :attr:`step_size`)."""
        return 0, nonnegative_int("row", row) + nonnegative_int("steps", steps) * self.step_size

    def seek(self, row: int) -> None:
        """Move the cursor to global row ``row`` (O(1)), at most :data:`MAX_ROW` (with a
        block schedule, to run token ``row``, a multiple of the tokens per batch)."""
        row = nonnegative_int("row", row)
        if row > MAX_ROW:
            raise ArgumentError(f"`row` must be at most {MAX_ROW} (2**62). Got {row} instead.")
        if self.blocks is not None:
            self.blocks.check_token(row)
        self._cursor.move(0, row)
