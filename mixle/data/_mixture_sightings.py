"""A mixture's plan inverted for one document of one source: its global rows.

Source ``i``'s rows are its own endless packed stream (:class:`~mixle.data._mixture_source.SourceRows`):
source row ``m`` is row ``m % R`` of the source's epoch ``m // R``. The document's rows
in a source epoch come from :mod:`~mixle.data._row_sightings` (closed form with the
``"blocks"`` order). The mixture hands source ``i`` its rows in order, so its ``m``-th
row is the global row ``k`` with ``counts_before(k)[i] == m`` and ``counts_before(k +
1)[i] == m + 1``: the smallest ``k`` with ``counts_before(k + 1)[i] > m``, found by a
doubling then a binary search over the schedule's closed-form counts
(:meth:`~mixle.data._mixing_rule.RowSchedule.counts_before`): O(log k) lookups, no
pass over the run. Global row ``k`` is step ``k // G + 1``, rank ``(k % G) //
batch_size``, row ``k % batch_size`` (the mixture is one endless epoch from row 0).
"""

from __future__ import annotations

from collections.abc import Iterator

from mixle._checks import exact_int
from mixle.data._mixing_rule import RowSchedule
from mixle.data._mixture import MAX_ROW, Mixture
from mixle.data._mixture_phased import MixtureBlocks, PhasedSourceRows
from mixle.data._mixture_source import SourceRows
from mixle.data._row_sightings import document_ranges, layout_spans, stream_spans
from mixle.errors import ArgumentError, ArgumentTypeError

__all__ = ["global_row", "mixture_spans", "source_index"]

Place = tuple[int, int, int]
"""``(step, rank, row)`` of a global row."""


def source_index(mixture: Mixture, source: int | str | None) -> int:
    """The index of ``source`` (a name or an index) among ``mixture``'s sources.

    Raises
    ------
    ArgumentError, ArgumentTypeError
        ``source`` is missing, unknown (the names listed) or out of range.
    """
    names = mixture.names
    if source is None:
        raise ArgumentError(
            f"`source` must name the mixture source of the document: one of {names!r}."
        )
    if isinstance(source, str):
        if source not in names:
            raise ArgumentError(f"`source` must be one of {names!r}. Got {source!r} instead.")
        return names.index(source)
    if isinstance(source, bool):
        raise ArgumentTypeError(f"`source` must be a name or an index. Got {source!r}.")
    index = exact_int("source", source)
    if not 0 <= index < len(names):
        raise ArgumentError(
            f"`source` must be a source index (0 to {len(names) - 1}) or name. Got {index}."
        )
    return index


def global_row(schedule: RowSchedule, source: int, row: int) -> int | None:
    """The global row that is ``source``'s own row ``row``, or ``None`` when the
    schedule never reaches it (the source's weight drops to 0 before it)."""

    def taken(rows: int) -> int:
        """Rows of ``source`` among global rows ``[0, rows)``."""
        return int(schedule.counts_before(rows)[source])

    # A source has at most one row per global row: its row `row` is not before `row`.
    high = row + 1
    while taken(high) <= row:
        if high >= MAX_ROW:
            return None
        high = min(2 * high, MAX_ROW)
    low = row  # taken(low) <= row < taken(high)
    while high - low > 1:
        middle = (low + high) // 2
        if taken(middle) > row:
            high = middle
        else:
            low = middle
    return high - 1


def mixture_spans(
    mixture: Mixture, source: int, document: int, epochs: list[int]
) -> Iterator[tuple[int, Place, int, int]]:
    """``(epoch, (step, rank, row), start, stop)`` of every row of ``mixture`` that trains
    ``document`` of source ``source`` in the source's ``epochs``.

    Raises
    ------
    ArgumentError
        The mixture is of windows (a window is not a packed row of documents).
    """
    if mixture.objective != "packed":
        raise ArgumentError(
            f"a mixture of objective={mixture.objective!r} has no document rows; sightings "
            "need objective='packed'."
        )
    rows = mixture.rows[source]
    if isinstance(rows, PhasedSourceRows):
        yield from _phased_spans(mixture, rows, source, document, epochs)
        return
    assert isinstance(rows, SourceRows)
    per_epoch = rows.rows_per_epoch
    group, size = mixture.global_batch_size, mixture.batch_size
    for epoch in epochs:
        for span in layout_spans(rows.layout(epoch), document, mixture.block, per_epoch):
            found = global_row(mixture.schedule, source, epoch * per_epoch + span.row)
            if found is not None:
                rank, row = divmod(found % group, size)
                yield epoch, (found // group + 1, rank, row), span.start, span.stop


def _phased_spans(
    mixture: Mixture, rows: PhasedSourceRows, source: int, document: int, epochs: list[int]
) -> Iterator[tuple[int, Place, int, int]]:
    """:func:`mixture_spans` under a block schedule: in each phase that cuts rows in a
    source epoch, the rows from its first token at its block (the token it starts on
    is the previous row's last target, so it is not one of these rows' targets, as the
    stream's first token is not), then each global row placed in its phase's batches."""
    blocks = mixture.blocks
    assert isinstance(blocks, MixtureBlocks)
    for epoch in epochs:
        ranges = document_ranges(rows.base.layout(epoch), document)
        for phase, first, token, count in rows.epoch_segments(epoch):
            block = rows.blocks[phase]
            for begin, length in ranges:
                for span in stream_spans(begin - token, length, block, count):
                    found = global_row(mixture.schedule, source, first + span.row)
                    if found is not None:
                        yield epoch, _phased_place(blocks, found, mixture.world_size), *span[1:]


def _phased_place(blocks: MixtureBlocks, row: int, world_size: int) -> Place:
    """``(step, rank, row)`` of global row ``row`` under a block schedule."""
    phase = blocks.phase_of_row(row)
    size = blocks.batch_sizes[phase]
    batch, offset = divmod(row - blocks.row_starts[phase], size * world_size)
    rank, within = divmod(offset, size)
    return blocks.token_starts[phase] // blocks.tokens_per_batch + batch + 1, rank, within
