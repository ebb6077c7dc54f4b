"""``parquet``: one row per document, ids in a list-of-integers column or text in a
string column with a tokenizer (needs the optional ``pyarrow``). One unit per row
group; a location is ``(row in the file, 0)``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from mixle._optional import import_optional
from mixle.corpus.ingestion.formats.base import FormatDoc, InputFormat, UnitSizes
from mixle.corpus.ingestion.formats.reading import (
    BadRecord,
    Collector,
    InputBatch,
    ReadOptions,
    RecordOrigins,
    document_id,
    make_tokenizer,
)
from mixle.corpus.ingestion.input_guard import ReadCursor, guard
from mixle.corpus.ingestion.work import InputFile, WorkUnit, open_binary
from mixle.errors import IngestError

__all__ = ["ParquetFormat"]


def _row_groups(path: str) -> int:
    parquet = import_optional("pyarrow.parquet", "parquet")
    try:
        with open_binary(path) as handle:
            return int(parquet.ParquetFile(handle).metadata.num_row_groups)
    except Exception:  # pyarrow raises its own ArrowInvalid family
        # Unreadable: one unit whose reader reports why (a failure, or a reject with
        # on_error="skip"; see input_guard).
        return 1


def _rows(
    unit: WorkUnit, options: ReadOptions, collector: Collector, cursor: ReadCursor
) -> Iterator[InputBatch]:
    parquet = import_optional("pyarrow.parquet", "parquet")
    compute = import_optional("pyarrow.compute", "parquet")
    with open_binary(unit.path) as handle:
        reader = parquet.ParquetFile(handle)
        names = reader.schema_arrow.names
        name = next((n for n in options.fields if n in names), None)
        if name is None:
            raise IngestError(
                f"{unit.path}: no column {' or '.join(map(repr, options.fields))} (columns: {names})."
            )
        id_field = options.id_field
        if id_field is not None and id_field not in names:
            raise IngestError(
                f"{unit.path}: no id column {id_field!r} (--id-field; columns: {names})."
            )
        metadata = reader.metadata
        first_row = sum(metadata.row_group(g).num_rows for g in range(unit.start))
        cursor.location = (first_row, 0)
        wanted = [name] if id_field is None or id_field == name else [name, id_field]
        group = reader.read_row_group(unit.start, columns=wanted)
        column = group.column(name).combine_chunks()
        id_values = None if id_field is None else group.column(id_field).to_pylist()
    collector.input_bytes = metadata.row_group(unit.start).total_byte_size

    def row_id(row: int) -> str:
        """The id of ``row`` of the group (``""`` without ``--id-field``)."""
        return "" if id_values is None else document_id(id_values[row], str(id_field))

    if options.tokenizer is not None:
        for row, text in enumerate(column.to_pylist()):
            location = (first_row + row, 0)
            if not isinstance(text, str):
                collector.rejects.append((location, f"column {name!r} is not a string"))
                continue
            try:
                collector.add_text(text, location, len(text), row_id(row))
            except BadRecord as bad:
                collector.rejects.append((location, str(bad)))
        return
    import pyarrow

    if not pyarrow.types.is_list(column.type) and not pyarrow.types.is_large_list(column.type):
        raise IngestError(
            f"{unit.path}: column {name!r} must be a list of integers. Got {column.type} instead."
        )
    values = column.flatten()
    if not pyarrow.types.is_integer(values.type) or values.type == pyarrow.uint64():
        raise IngestError(
            f"{unit.path}: column {name!r} holds {values.type}, expected integer token ids."
        )
    # Never through float64 (nulls would make to_numpy() float: ids over 2**53 round
    # and 2**63 - 1 turns negative): fill nulls with 0 in the integer type and keep a
    # per-row count of nulls from the validity bitmap instead.
    lengths = compute.fill_null(compute.list_value_length(column), 0).to_numpy()
    flat = compute.fill_null(values, 0).to_numpy(zero_copy_only=False)
    ends = np.cumsum(lengths.astype(np.int64))
    starts = ends - lengths
    null_before = np.zeros(flat.shape[0] + 1, dtype=np.int64)
    if values.null_count:
        np.cumsum(~values.is_valid().to_numpy(zero_copy_only=False), out=null_before[1:])
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    for row in range(len(column)):
        location = (first_row + row, 0)
        cursor.location = location
        if not valid[row]:
            collector.rejects.append((location, f"column {name!r} is null"))
            continue
        if null_before[ends[row]] != null_before[starts[row]]:
            position = int(
                np.argmax(null_before[starts[row] + 1 : ends[row] + 1] > null_before[starts[row]])
            )
            collector.rejects.append((location, f"token id at position {position} is null"))
            continue
        try:
            name_of_row = row_id(row)
        except BadRecord as bad:
            collector.rejects.append((location, str(bad)))
            continue
        piece = flat[starts[row] : ends[row]]
        collector.add_document(piece.astype(np.int64, copy=False), location, name_of_row)
        if collector.full():
            yield collector.take()


class ParquetFormat(InputFormat):
    """Apache Parquet files, read one row group per unit."""

    name = "parquet"
    extensions = (".parquet",)
    record_kind = "row"
    named_fields = True
    doc = FormatDoc(
        files="`.parquet`",
        document="one row of a list-of-integers column (or a string column with `--tokenizer`)",
        units="one per row group",
    )

    def cut(self, item: InputFile, sizes: UnitSizes) -> Sequence[tuple[int, int]]:
        """One unit per row group (one unit for an unreadable file)."""
        return [(group, group + 1) for group in range(_row_groups(item.path))]

    def read(self, unit: WorkUnit, options: ReadOptions) -> Iterator[InputBatch]:
        """The rows of row group ``unit.start``."""
        collector = Collector(
            make_tokenizer(options.tokenizer), with_ids=options.id_field is not None
        )
        cursor = ReadCursor()
        with guard(cursor, collector.reject):
            yield from _rows(unit, options, collector, cursor)
        yield collector.take()

    def describe(self, unit: WorkUnit, location: tuple[int, int], line_base: int) -> str:
        """``FILE row R``, ``R`` counted in the file from 0."""
        return f"{unit.path} row {location[0]}"

    def origins(self, unit: WorkUnit, batch: InputBatch) -> RecordOrigins:
        """The row in the file."""
        return RecordOrigins.from_locations(self.record_kind, batch.locations, None, 0, batch.ids)
