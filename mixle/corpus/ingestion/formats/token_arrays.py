"""What the formats of one token array plus document boundaries share (``npz``,
``megatron``): cutting at document boundaries into units of ``flat_unit_bytes`` of
ids, and reading a unit as slices of the memory map. A location is
``(document in the file, 0)``.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from mixle.corpus.ingestion.flat import FlatSource, document_ranges
from mixle.corpus.ingestion.formats.base import InputFormat, UnitSizes
from mixle.corpus.ingestion.formats.reading import (
    BATCH_TOKENS,
    Collector,
    InputBatch,
    ReadOptions,
    RecordOrigins,
)
from mixle.corpus.ingestion.input_guard import ReadCursor, guard
from mixle.corpus.ingestion.work import InputFile, WorkUnit
from mixle.errors import IngestError

__all__ = ["TokenArrayFormat"]


class _Records(Sequence[tuple[int, int]]):
    """Locations ``(base + i, 0)`` of consecutive records, without a list per batch."""

    def __init__(self, base: int) -> None:
        self.base = base

    def __getitem__(self, index: Any) -> Any:
        return (self.base + int(index), 0)

    def __len__(self) -> int:
        raise TypeError("record locations have no length")


class TokenArrayFormat(InputFormat):
    """A format whose file is a token array plus document offsets (memory-mapped)."""

    record_kind = "document"

    @abstractmethod
    def open(self, item: InputFile | WorkUnit, *, check_crc: bool) -> FlatSource:
        """Open the file (and companion) of ``item`` without reading its tokens.

        Raises
        ------
        IngestError
            The file is not of the format's layout (names the file and the field).
        """

    def cut(self, item: InputFile, sizes: UnitSizes) -> Sequence[tuple[int, int]]:
        """Document ranges of at least ``flat_unit_bytes`` of ids (checksums verified
        once, here); one whole-file unit for a file whose header is unreadable."""
        try:
            source = self.open(item, check_crc=True)
        except IngestError:
            # Unreadable: one unit whose reader reports why, as a failure or,
            # with on_error="skip", a reject (input_guard).
            return [(0, -1)]
        try:
            return document_ranges(source, sizes.flat_unit_bytes)
        finally:
            source.close()

    def read(self, unit: WorkUnit, options: ReadOptions) -> Iterator[InputBatch]:
        """Documents ``start..stop`` as zero-copy slices of the token map."""
        collector = Collector()
        cursor = ReadCursor(location=(unit.start, 0))
        with guard(cursor, collector.reject):
            # A unit planned without a readable header (see cut) covers the whole
            # file, and has its checksums verified here rather than by the planner.
            source = self.open(unit, check_crc=unit.stop < 0)
            stop = source.num_documents if unit.stop < 0 else unit.stop
            offsets = source.offsets(unit.start, stop)
            first = 0
            count = stop - unit.start
            while first < count or (count == 0 and first == 0):
                cursor.location = (unit.start + first, 0)
                target = int(offsets[first]) + BATCH_TOKENS
                last = int(np.searchsorted(offsets, target, side="right")) - 1
                last = min(max(last, first + 1), count)
                tokens = source.tokens[int(offsets[first]) : int(offsets[last])]
                lengths = np.diff(offsets[first : last + 1])
                base = unit.start + first
                yield InputBatch(tokens, lengths, _Records(base), [], int(tokens.nbytes))
                if count == 0:
                    break
                first = last
            source.close()
        yield collector.take()

    def describe(self, unit: WorkUnit, location: tuple[int, int], line_base: int) -> str:
        """``FILE document D``, ``D`` counted in the file from 0."""
        return f"{unit.path} document {location[0]}"

    def origins(self, unit: WorkUnit, batch: InputBatch) -> RecordOrigins:
        """The documents' indices in the file (a range: no location list is built)."""
        count = batch.lengths.shape[0]
        base = batch.locations[0][0] if count else 0
        return RecordOrigins(
            self.record_kind, np.zeros(count, dtype=np.int64), np.arange(base, base + count)
        )
