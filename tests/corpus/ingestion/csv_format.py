"""A small extra input format, as a third party would write one: CSV files of token
ids, one document per line (``3,17,5``). It is this one module; registering it
(``register_format(CsvIdsFormat())``, or one entry-point line) is the other change.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import numpy as np

from mixle.corpus.ingestion.formats import (
    Collector,
    FormatDoc,
    InputBatch,
    InputFormat,
    ReadCursor,
    ReadOptions,
    RecordOrigins,
    guard,
    iter_lines,
)
from mixle.corpus.ingestion.work import WorkUnit


class CsvIdsFormat(InputFormat):
    """``.csv``: comma-separated integer ids per line; blank lines are skipped."""

    name = "csv"
    extensions: ClassVar[tuple[str, ...]] = (".csv",)
    record_kind = "line"
    doc = FormatDoc(
        files="`.csv`", document="one line of comma-separated ids", units="one per file"
    )

    def read(self, unit: WorkUnit, options: ReadOptions) -> Iterator[InputBatch]:
        collector = Collector()
        cursor = ReadCursor()
        with guard(cursor, collector.reject):
            for line_number, (_, line) in enumerate(iter_lines(unit.path, cursor)):
                cursor.location = (line_number, 0)
                collector.input_bytes += len(line)
                collector.lines += 1
                if not line.strip():
                    continue
                try:
                    ids = np.array([int(item) for item in line.split(b",")], dtype=np.int64)
                except ValueError:
                    collector.reject(cursor.location, "not comma-separated integers")
                    continue
                collector.docs.append(ids)
                collector.locations.append(cursor.location)
                collector.tokens += ids.shape[0]
                if collector.full():
                    yield collector.take()
        yield collector.take()

    def describe(self, unit: WorkUnit, location: tuple[int, int], line_base: int) -> str:
        return f"{unit.path} line {location[0] + 1}"

    def origins(self, unit: WorkUnit, batch: InputBatch) -> RecordOrigins:
        return RecordOrigins.from_locations(self.record_kind, batch.locations, None, 0)
