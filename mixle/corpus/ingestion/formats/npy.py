"""``npy``: ``.npy`` files holding one 1-D integer document each. Consecutive files
share units; a location is ``(file in the unit, 0)``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

from mixle._file_checks import open_regular
from mixle.corpus.ingestion.flat import npy_header
from mixle.corpus.ingestion.formats.base import FormatDoc, InputFormat
from mixle.corpus.ingestion.formats.reading import (
    BadRecord,
    Collector,
    InputBatch,
    ReadOptions,
    RecordOrigins,
)
from mixle.corpus.ingestion.input_guard import ReadCursor, guard
from mixle.corpus.ingestion.work import WorkUnit
from mixle.errors import IngestError

__all__ = ["NpyFormat"]


def _load_npy(path: str) -> np.ndarray:
    """Read a 1-D integer ``.npy`` whose header is checked against the file size first
    (a header claiming 2**40 ids is an error, not an 8 TiB allocation)."""
    with open_regular(path, IngestError) as handle:
        size = os.fstat(handle.fileno()).st_size
        shape, _, dtype = npy_header(handle, path)
        if len(shape) != 1 or dtype.kind not in "iu" or dtype == np.uint64 or dtype.hasobject:
            raise BadRecord(f"must be a 1-D integer array, got {dtype} {shape}")
        held = size - handle.tell()
        if shape[0] * dtype.itemsize != held:
            raise BadRecord(
                f"header says {shape[0]} {dtype} ids ({shape[0] * dtype.itemsize} bytes), "
                f"the file holds {held} bytes of data"
            )
        array = np.fromfile(handle, dtype=dtype, count=shape[0])
    if array.shape[0] != shape[0]:
        raise BadRecord(f"file ended after {array.shape[0]} of {shape[0]} ids")
    return array


class NpyFormat(InputFormat):
    """One document per ``.npy`` file."""

    name = "npy"
    extensions = (".npy",)
    groups_files = True
    record_kind = "file"
    doc = FormatDoc(
        files="`.npy`",
        document="one 1-D integer array per file",
        units="consecutive files up to `--unit-size`",
    )

    def pair(self, path: str, expanded: bool) -> tuple[str, str] | None:
        """Pass over a found ``NAME.offsets.npy`` whose ``NAME.tokens.npy`` exists: the
        two are one ``npz`` input."""
        if path.endswith(".offsets.npy") and expanded:
            tokens = path[: -len(".offsets.npy")] + ".tokens.npy"
            if os.path.exists(tokens):
                return None
        return path, ""

    def read(self, unit: WorkUnit, options: ReadOptions) -> Iterator[InputBatch]:
        """One document per file of the unit."""
        collector = Collector()
        cursor = ReadCursor()
        for position, path in enumerate(unit.paths):
            cursor.location = (position, 0)
            with guard(cursor, collector.reject):
                try:
                    array = _load_npy(path)
                except BadRecord as bad:
                    collector.rejects.append(((position, 0), str(bad)))
                    continue
                collector.add_document(array, (position, 0))
                collector.input_bytes += array.nbytes
            if collector.full():
                yield collector.take()
        yield collector.take()

    def describe(self, unit: WorkUnit, location: tuple[int, int], line_base: int) -> str:
        """The file's path."""
        return unit.paths[location[0]]

    def origins(self, unit: WorkUnit, batch: InputBatch) -> RecordOrigins:
        """The file (record 0: the file is the record)."""
        return RecordOrigins.from_locations(self.record_kind, batch.locations, 0, None)
