"""The seed API's views of a ``StreamingCorpus``, and its options as attributes.

:class:`SeedViews` keeps the names and the positional tuples the seed API and the docs
promise — ``epoch_batches``, iterating the corpus, ``batch_at``, ``batch_at_row``,
``advance`` — as thin views of the one contract (:mod:`~mixle.data._resumable`:
``iter_epoch``, ``batches``, ``read``, ``next_cursor``), so the tuples stay exactly the
seed's. :class:`StreamOptionFields` reads ``rank``, ``block``... from the stream's
:class:`~mixle.data._options.ShardOptions` and :class:`~mixle.data._options.PackOptions`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from mixle._checks import nonnegative_int
from mixle.data._batch import Batch
from mixle.data._cursor import Cursor
from mixle.data._options import PackOptions, ShardOptions
from mixle.errors import ArgumentError

__all__ = ["SeedBatch", "SeedViews", "StreamOptionFields", "TokenStreamSeedViews", "WindowTuple"]

SeedBatch = tuple[np.ndarray, ...]
"""A batch as the seed API hands it out: :meth:`Batch.as_tuple`."""
WindowTuple = tuple[np.ndarray, np.ndarray]
"""A window batch as the seed API hands it out: ``(context, next_tokens)``."""


def window_tuples(batches: Iterator[Batch]) -> Iterator[WindowTuple]:
    """The seed's ``(context, next_tokens)`` tuples of window batches."""
    return ((batch.context, batch.targets) for batch in batches)


class StreamOptionFields:
    """The options of a stream as read-only attributes (from ``shard`` and ``pack``)."""

    shard: ShardOptions
    pack: PackOptions

    @property
    def layout(self) -> str:
        """The row layout's name (``"per-rank"``, ``"global"`` or a registered one)."""
        return self.shard.layout

    @property
    def rank(self) -> int:
        return self.shard.rank

    @property
    def world_size(self) -> int:
        return self.shard.world_size

    @property
    def batch_size(self) -> int:
        return self.shard.batch_size

    @property
    def global_batch_size(self) -> int:
        """Rows of one step over all ranks: ``world_size * batch_size``."""
        return self.shard.global_batch_size

    @property
    def block(self) -> int:
        return self.pack.block

    @property
    def pad_id(self) -> int:
        return self.pack.pad_id

    @property
    def boundary_id(self) -> int | None:
        return self.pack.boundary_id

    @property
    def document_ids(self) -> bool:
        return self.pack.document_ids


class SeedViews:
    """The seed's tuple views and older names over the corpus's contract verbs."""

    if TYPE_CHECKING:  # provided by the class this is mixed into (StreamingCorpus)

        @property
        def cursor_key(self) -> str: ...
        @property
        def cursor_step(self) -> int: ...

        def iter_epoch(self, epoch: int, *, start_batch: int = 0) -> Iterator[Batch]: ...
        def batches(self) -> Iterator[Batch]: ...
        def read(self, epoch: int, index: int) -> Batch: ...
        def num_batches(self, epoch: int) -> int: ...
        def next_cursor(self, epoch: int, index: int, steps: int) -> tuple[int, int] | None: ...

    def batch_at(self, epoch: int, index: int) -> SeedBatch:
        """The tuple ``epoch_batches(epoch)`` yields at position ``index``, by seeking.

        Raises
        ------
        ArgumentError
            ``index >= num_batches(epoch)`` (or either argument is negative).
        """
        epoch = nonnegative_int("epoch", epoch)
        index = nonnegative_int("index", index)
        total = self.num_batches(epoch)
        if index >= total:
            raise ArgumentError(
                f"`index` must be smaller than num_batches({epoch}) = {total}. Got {index} instead."
            )
        return self.read(epoch, index * self.cursor_step).as_tuple()

    def batch_at_row(self, epoch: int, row: int) -> SeedBatch:
        """Global layout: the tuple of :meth:`read` at cursor ``(epoch, row)``.

        Raises
        ------
        ArgumentError
            The cursor does not count rows (the per-rank layout), or ``row`` is outside
            the epoch.
        """
        if self.cursor_key != "row":
            raise ArgumentError("`batch_at_row` needs layout='global'; use batch_at.")
        return self.read(epoch, row).as_tuple()

    def advance(self, epoch: int, batch: int, steps: int) -> tuple[int, int] | None:
        """Alias of :meth:`next_cursor` (the name docs and the seed era use)."""
        return self.next_cursor(epoch, batch, steps)

    def epoch_batches(self, epoch: int, *, start_batch: int = 0) -> Iterator[SeedBatch]:
        """Yield this rank's batches of ``epoch`` from batch ``start_batch`` on.

        Each batch is ``(context, targets, loss_mask)`` — ``(b, block)`` int64, int64 and
        bool, ``b <= batch_size`` (only the last batch may be smaller) — plus
        ``(document_ids, position_ids)`` when ``document_ids=True``. ``context`` and
        ``targets`` are views of one buffer of ``b * block + 1`` tokens (``targets`` is
        ``context`` shifted by one), int64, never downcast. ``loss_mask`` is False only on
        padding targets of the final row of the stream: callers must apply it before
        averaging the loss. With ``even_batches=False`` the batches are exactly
        ``pack_documents(documents, rank_document_indices(epoch), block, ...)`` cut into
        groups of ``batch_size`` rows, bitwise; with True they are a prefix of those.

        Seeking to ``start_batch`` is a binary search (O(log documents)); each batch reads
        only the documents it overlaps. Sets ``last_packing_efficiency`` (the real
        fraction of the target positions yielded by this call) as batches are produced.

        Raises
        ------
        ArgumentTypeError, ArgumentError
            ``epoch``/``start_batch`` invalid, or ``start_batch > num_batches(epoch)``
            (raised here, before the first batch is requested).
        TokenIdError
            A document read for a batch holds an invalid token id.
        """
        return map(Batch.as_tuple, self.iter_epoch(epoch, start_batch=start_batch))

    def __iter__(self) -> Iterator[SeedBatch]:
        """The seed's tuples of :meth:`batches` (``Batch.as_tuple()`` of each)."""
        return map(Batch.as_tuple, self.batches())


class TokenStreamSeedViews:
    """The seed's tuple views and older names of ``TokenStream`` over its contract verbs."""

    if TYPE_CHECKING:  # provided by TokenStream
        _cursor: Cursor
        epochs: int

        @property
        def global_batch_size(self) -> int: ...

        def num_batches(self) -> int: ...
        def read(self, epoch: int, position: int) -> Batch: ...
        def batches(self) -> Iterator[Batch]: ...
        def next_cursor(self, epoch: int, index: int, steps: int) -> tuple[int, int] | None: ...
        def iter_epoch(
            self, epoch: int, *, start_batch: int = 0, step: int = 1
        ) -> Iterator[Batch]: ...

    def batch_at_position(self, epoch: int, position: int) -> WindowTuple:
        """This rank's part of the global batch that starts at window ``position``.

        Positions ``[position + rank * batch_size, position + (rank + 1) * batch_size)``
        of epoch ``epoch``, clipped to the epoch (at its end a rank's part may be
        smaller, or empty: ``(0, block)``), so every rank takes the same steps.
        """
        return self.read(epoch, position).as_tuple()

    def advance_position(self, epoch: int, position: int, steps: int) -> tuple[int, int] | None:
        """Alias of :meth:`next_cursor`."""
        return self.next_cursor(epoch, position, steps)

    def batch(self, epoch: int, index: int) -> WindowTuple:
        """Return batch ``index`` of epoch ``epoch`` (no state is read or changed).

        Raises
        ------
        IndexError
            ``index`` is not in ``[0, num_batches())``.
        """
        epoch = nonnegative_int("epoch", epoch)
        index = nonnegative_int("index", index)
        if index >= self.num_batches():
            raise IndexError(f"batch {index} is out of range: an epoch has {self.num_batches()}.")
        return self.read(epoch, index * self.global_batch_size).as_tuple()

    def epoch_batches(
        self, epoch: int, *, start_batch: int = 0, step: int = 1
    ) -> Iterator[WindowTuple]:
        """Yield batches ``start_batch, start_batch + step, ...`` of epoch ``epoch``.

        A pure function of the arguments and the stream's definition: resuming at
        ``start_batch`` is a seek, not a replay. ``step`` > 1 lets ``step`` consumers
        (DataLoader workers) each take every ``step``-th batch.
        """
        return window_tuples(self.iter_epoch(epoch, start_batch=start_batch, step=step))

    def __iter__(self) -> Iterator[WindowTuple]:
        """The seed's ``(context, next_tokens)`` tuples of :meth:`batches`."""
        return window_tuples(self.batches())

    def advance(self, num_batches: int) -> None:
        """Move the cursor forward by ``num_batches`` batches without reading them (O(1)).

        Equivalent to ``seek(*next_cursor(*cursor, num_batches))``, stopping at the end
        of the last epoch.

        For consumers that took batches elsewhere, e.g. through a DataLoader whose
        workers iterate copies of this stream. Stops at the end of the last epoch.
        """
        num_batches = nonnegative_int("num_batches", num_batches)
        cursor = self._cursor
        cursor.move(*(self.next_cursor(*cursor.position, num_batches) or (self.epochs, 0)))
