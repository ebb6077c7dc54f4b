"""Read one work unit of any input format as batches of documents.

The reading itself is the unit's format's (:meth:`~.formats.InputFormat.read`, in
its module under :mod:`mixle.corpus.ingestion.formats`); this module is what the
workers and the error reports call, whatever the format. A batch's locations are
``(a, b)`` pairs whose meaning the format defines: :func:`describe_location` turns one
into "file, line and position", :func:`record_origins` a batch's into the input file
and record of each document.
"""

from __future__ import annotations

from collections.abc import Iterator

from mixle.corpus.ingestion.formats import (
    BATCH_TOKENS,
    InputBatch,
    ReadOptions,
    RecordOrigins,
    get_format,
    make_tokenizer,
)
from mixle.corpus.ingestion.work import WorkUnit

__all__ = [
    "BATCH_TOKENS",
    "InputBatch",
    "ReadOptions",
    "describe_location",
    "make_tokenizer",
    "read_unit",
    "record_origins",
]


def describe_location(unit: WorkUnit, location: tuple[int, int], line_base: int) -> str:
    """Return "FILE line L, column C" (or row / document / file) for a location.

    ``line_base`` is the number of lines of the same file before this unit.
    """
    return get_format(unit.format).describe(unit, location, line_base)


def record_origins(unit: WorkUnit, batch: InputBatch) -> RecordOrigins:
    """Where each document of ``batch``, read from ``unit``, came from: the input file
    (an index into ``unit.files``) and the record in it. O(documents in the batch), no
    I/O; JSONL lines count from the unit's first line (see :class:`RecordOrigins`)."""
    return get_format(unit.format).origins(unit, batch)


def read_unit(unit: WorkUnit, options: ReadOptions) -> Iterator[InputBatch]:
    """Yield the documents of ``unit`` in input order, in bounded batches.

    Never raises for bad input: whatever fails while reading a file (a damaged
    stream, a corrupt page, a lying header, a FIFO) ends that file with a reject
    naming the record reached (see :mod:`mixle.corpus.ingestion.input_guard`).
    """
    return get_format(unit.format).read(unit, options)
