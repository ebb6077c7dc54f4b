"""``jsonl``: one JSON object per line, holding token ids or text.

Uncompressed files are cut into line-aligned byte ranges (each line belongs to the
unit holding its first byte); ``.gz``/``.zst`` streams cannot seek, so they are one
unit each. A location is ``(line in the unit, column)``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from mixle.corpus.ingestion.formats.base import FormatDoc, InputFormat, UnitSizes
from mixle.corpus.ingestion.formats.reading import (
    EMPTY_IDS,
    BadRecord,
    Collector,
    InputBatch,
    ReadOptions,
    RecordOrigins,
    document_id,
    is_compressed,
    iter_lines,
    make_tokenizer,
)
from mixle.corpus.ingestion.input_guard import ReadCursor, guard
from mixle.corpus.ingestion.work import InputFile, WorkUnit, open_binary

__all__ = ["JsonlFormat"]


def _ids_from_list(value: Any, line: bytes) -> np.ndarray:
    if not isinstance(value, list):
        raise BadRecord(f"token ids must be a JSON list of integers, got {type(value).__name__}")
    if not value:
        return EMPTY_IDS
    try:
        array = np.array(value)
    except (ValueError, OverflowError):
        array = np.empty(0, dtype=object)
    suspicious = b"true" in line or b"false" in line
    if array.dtype.kind != "i" or array.ndim != 1 or suspicious:
        for position, item in enumerate(value):
            if type(item) is not int:
                raise BadRecord(f"token id {item!r} at position {position} is not an integer")
            if not -(2**63) <= item < 2**63:
                raise BadRecord(
                    f"token id {item} at position {position} is outside the int64 range"
                )
    return array


def _field(record: Any, fields: tuple[str, ...], what: str = "field") -> Any:
    if not isinstance(record, dict):
        raise BadRecord(f"expected a JSON object, got {type(record).__name__}")
    for name in fields:
        if name in record:
            return record[name]
    tried = " or ".join(repr(name) for name in fields)
    raise BadRecord(f"missing {what} {tried} (keys: {sorted(record)[:8]})")


def _parse_record(line: bytes) -> Any:
    """One JSON record; :class:`BadRecord` for malformed, too deep or oversized input."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise BadRecord(f"malformed JSON: {exc.msg}", exc.pos + 1) from None
    except UnicodeDecodeError as exc:
        raise BadRecord(f"invalid UTF-8 ({exc.reason})", exc.start + 1) from None
    except RecursionError:
        raise BadRecord("JSON nested too deeply") from None
    except ValueError as exc:  # e.g. an integer literal over the interpreter's digit limit
        raise BadRecord(f"JSON value not accepted ({exc})") from None


class JsonlFormat(InputFormat):
    """JSON Lines: ids in a list field, or text in a string field with a tokenizer."""

    name = "jsonl"
    extensions = (".jsonl", ".ndjson", ".jsonl.gz", ".jsonl.zst", ".ndjson.gz")
    record_kind = "line"
    named_fields = True
    doc = FormatDoc(
        files="`.jsonl`, `.ndjson`, `.jsonl.gz`, `.ndjson.gz`, `.jsonl.zst`",
        document="one line; ids in `--field` (default `input_ids`, else `tokens`), or text "
        "in `--field` (default `text`) with `--tokenizer`",
        units="uncompressed: line-aligned byte ranges of `--unit-size`; compressed: one per file",
    )

    def cut(self, item: InputFile, sizes: UnitSizes) -> Sequence[tuple[int, int]]:
        """Byte ranges of ``unit_bytes`` (none for an empty file); one unit if compressed."""
        if is_compressed(item.path):
            return [(0, -1)]
        step = sizes.unit_bytes
        return [(start, min(start + step, item.size)) for start in range(0, item.size, step)]

    def read(self, unit: WorkUnit, options: ReadOptions) -> Iterator[InputBatch]:
        """The documents of the lines whose first byte is in the unit's range."""
        tokenize = make_tokenizer(options.tokenizer)
        id_field = options.id_field
        collector = Collector(tokenize, with_ids=id_field is not None)
        cursor = ReadCursor()
        with guard(cursor, collector.reject):
            lines = iter_lines(unit.path, cursor, unit.start, unit.stop)
            for line_number, (_, line) in enumerate(lines):
                cursor.location = (line_number, 0)
                collector.input_bytes += len(line)
                collector.lines += 1
                if not line.strip():
                    continue
                try:
                    record = _parse_record(line)
                    value = _field(record, options.fields)
                    name = ""
                    if id_field is not None:
                        found = _field(record, (id_field,), "id field")
                        name = document_id(found, id_field)
                    if tokenize is not None:
                        if not isinstance(value, str):
                            raise BadRecord(
                                f"field to tokenize must be a string, got {type(value).__name__}"
                            )
                        collector.add_text(value, cursor.location, len(value), name)
                    else:
                        collector.add_document(_ids_from_list(value, line), cursor.location, name)
                except BadRecord as bad:
                    collector.rejects.append(((line_number, bad.column), str(bad)))
                if collector.full():
                    yield collector.take()
        yield collector.take()

    def describe(self, unit: WorkUnit, location: tuple[int, int], line_base: int) -> str:
        """``FILE line L[, column C]``, ``L`` counted in the file from 1."""
        line, column = location
        where = f"{unit.path} line {line_base + line + 1}"
        return where + (f", column {column}" if column else "")

    def origins(self, unit: WorkUnit, batch: InputBatch) -> RecordOrigins:
        """Lines counted from the unit's first line (add the unit's line base)."""
        return RecordOrigins.from_locations(self.record_kind, batch.locations, None, 0, batch.ids)

    def lines_before(self, unit: WorkUnit) -> int:
        """The line starting at 0 plus one per newline before ``start - 1`` (a unit
        holds the lines whose first byte is in ``[start, stop)``)."""
        if unit.start <= 0:
            return 0
        count, remaining = 1, unit.start - 1
        with open_binary(unit.path) as handle:
            while remaining > 0:
                data = handle.read(min(remaining, 1 << 24))
                if not data:
                    break
                count += data.count(b"\n")
                remaining -= len(data)
        return count
