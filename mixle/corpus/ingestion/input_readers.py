"""Read one work unit of any input format as batches of documents.

Each reader yields :class:`InputBatch` objects: the batch's token ids concatenated, the
document lengths, one location per document, and the records it could not parse
(with the reason). Locations are ``(a, b)`` integer pairs whose meaning depends on
the format (see :func:`describe_location`), so a worker can report "file, line and
position" without holding text. Batches hold about ``BATCH_TOKENS`` ids, so a
worker's memory is bounded whatever the unit size.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mixle._file_checks import open_regular
from mixle._optional import import_optional
from mixle.corpus.ingestion.flat import npy_header, open_flat
from mixle.corpus.ingestion.input_guard import ReadCursor, guard
from mixle.corpus.ingestion.inputs import WorkUnit, open_binary
from mixle.errors import IngestError

__all__ = [
    "BATCH_TOKENS",
    "InputBatch",
    "ReadOptions",
    "describe_location",
    "make_tokenizer",
    "read_unit",
]

BATCH_TOKENS = 1 << 22
_BATCH_DOCUMENTS = 1 << 15
_EMPTY = np.empty(0, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """How records become token ids (picklable; sent to every worker)."""

    fields: tuple[str, ...]
    tokenizer: str | None
    split: str


@dataclass
class InputBatch:
    """Documents read from a unit: ``tokens`` concatenated, ``lengths``, ``locations``."""

    tokens: np.ndarray
    lengths: np.ndarray
    locations: Sequence[tuple[int, int]]
    rejects: list[tuple[tuple[int, int], str]] = field(default_factory=list)
    input_bytes: int = 0
    lines: int = 0


def describe_location(unit: WorkUnit, location: tuple[int, int], line_base: int) -> str:
    """Return "FILE line L, column C" (or record / document / file) for a location.

    ``line_base`` is the number of lines of the same file before this unit.
    """
    a, b = location
    if unit.format == "text":
        return f"{unit.paths[a]} line {b + 1}"
    if unit.format == "jsonl":
        where = f"{unit.path} line {line_base + a + 1}"
        return where + (f", column {b}" if b else "")
    if unit.format == "parquet":
        return f"{unit.path} row {a}"
    if unit.format == "npy":
        return unit.paths[a]
    return f"{unit.path} document {a}"


# -- tokenizers -------------------------------------------------------------------
def make_tokenizer(spec: str | None) -> Callable[[list[str]], list[np.ndarray]] | None:
    """Return a batch tokenizer for ``spec``: ``"bytes"`` (UTF-8 bytes), a
    ``tokenizer.json`` path (Hugging Face ``tokenizers``), or ``None``."""
    if spec is None:
        return None
    if spec == "bytes":
        return lambda texts: [np.frombuffer(text.encode("utf-8"), dtype=np.uint8) for text in texts]
    tokenizers = import_optional("tokenizers", "tokenizers")
    try:
        tokenizer = tokenizers.Tokenizer.from_file(spec)
    except Exception as exc:  # the Rust side raises a plain Exception
        raise IngestError(f"cannot load tokenizer {spec} ({exc}).") from exc

    def encode(texts: list[str]) -> list[np.ndarray]:
        encodings = tokenizer.encode_batch(texts, add_special_tokens=False)
        return [np.asarray(item.ids, dtype=np.int64) for item in encodings]

    return encode


class _Bad(Exception):
    """A record that cannot be converted; ``args[0]`` is the reason, ``column`` the position."""

    def __init__(self, reason: str, column: int = 0) -> None:
        super().__init__(reason)
        self.column = column


def _ids_from_list(value: Any, line: bytes) -> np.ndarray:
    if not isinstance(value, list):
        raise _Bad(f"token ids must be a JSON list of integers, got {type(value).__name__}")
    if not value:
        return _EMPTY
    try:
        array = np.array(value)
    except (ValueError, OverflowError):
        array = np.empty(0, dtype=object)
    suspicious = b"true" in line or b"false" in line
    if array.dtype.kind != "i" or array.ndim != 1 or suspicious:
        for position, item in enumerate(value):
            if type(item) is not int:
                raise _Bad(f"token id {item!r} at position {position} is not an integer")
            if not -(2**63) <= item < 2**63:
                raise _Bad(f"token id {item} at position {position} is outside the int64 range")
    return array


def _field(record: Any, fields: tuple[str, ...]) -> Any:
    if not isinstance(record, dict):
        raise _Bad(f"expected a JSON object, got {type(record).__name__}")
    for name in fields:
        if name in record:
            return record[name]
    tried = " or ".join(repr(name) for name in fields)
    raise _Bad(f"missing field {tried} (keys: {sorted(record)[:8]})")


# -- line-based inputs --------------------------------------------------------------
def _open_stream(path: str) -> tuple[Any, Any]:
    """Open ``path`` and return ``(raw file, decompressed binary stream)``."""
    lower = path.lower()
    zstandard = import_optional("zstandard", "zstandard") if lower.endswith(".zst") else None
    raw = open_binary(path)
    if lower.endswith(".gz"):
        import gzip

        return raw, gzip.GzipFile(fileobj=raw)
    if zstandard is not None:
        import io

        reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
        return raw, io.BufferedReader(reader, 1 << 20)
    return raw, raw


def _check_compressed(path: str) -> None:
    """Decompress ``path`` to the end once, so its checksums are verified before any
    record is used: a corrupted stream may decode to plausible but wrong lines that
    only the trailing CRC reveals.

    Raises
    ------
    IngestError
        The stream is damaged or truncated (names the uncompressed byte reached).
    """
    raw, handle = _open_stream(path)
    done = 0
    try:
        while chunk := handle.read(1 << 20):
            done += len(chunk)
    except Exception as exc:
        raise IngestError(
            f"{path}: the compressed stream is damaged after {done} uncompressed bytes "
            f"({type(exc).__name__}: {exc}); none of its records were read."
        ) from exc
    finally:
        raw.close()


def _lines(
    path: str, cursor: ReadCursor, start: int = 0, stop: int = -1
) -> Iterator[tuple[int, bytes]]:
    """Yield ``(byte offset, line)`` for every line whose first byte is in ``[start, stop)``;
    ``cursor.offset`` follows the (uncompressed) byte offset being read. A compressed
    file is checked whole first (:func:`_check_compressed`)."""
    if path.lower().endswith((".gz", ".zst")):
        _check_compressed(path)
    raw, handle = _open_stream(path)
    try:
        position = start
        if start > 0:
            handle.seek(start - 1)
            position = start - 1 + len(handle.readline())
        while stop < 0 or position < stop:
            cursor.offset = position
            line = handle.readline()
            if not line:
                break
            yield position, line
            position += len(line)
    except OSError as exc:
        raise IngestError(f"{path}: cannot read ({exc}).") from exc
    finally:
        raw.close()


class _Collector:
    """Gather documents into batches of about ``BATCH_TOKENS`` ids."""

    def __init__(self) -> None:
        self.docs: list[np.ndarray] = []
        self.locations: list[tuple[int, int]] = []
        self.rejects: list[tuple[tuple[int, int], str]] = []
        self.tokens = 0
        self.input_bytes = 0
        self.lines = 0

    def reject(self, location: tuple[int, int], reason: str) -> None:
        """Record that the record at ``location`` (and what follows it) cannot be read."""
        self.rejects.append((location, reason))

    def full(self) -> bool:
        return self.tokens >= BATCH_TOKENS or len(self.docs) + len(self.rejects) >= _BATCH_DOCUMENTS

    def take(self) -> InputBatch:
        lengths = np.fromiter((d.shape[0] for d in self.docs), dtype=np.int64, count=len(self.docs))
        tokens = np.concatenate(self.docs) if len(self.docs) > 1 else (self.docs or [_EMPTY])[0]
        batch = InputBatch(
            tokens, lengths, self.locations, self.rejects, self.input_bytes, self.lines
        )
        self.__init__()  # type: ignore[misc]
        return batch


def _read_jsonl(unit: WorkUnit, options: ReadOptions) -> Iterator[InputBatch]:
    tokenize = make_tokenizer(options.tokenizer)
    collector = _Collector()
    texts: list[str] = []
    text_locations: list[tuple[int, int]] = []

    def flush_texts() -> None:
        if texts and tokenize is not None:
            collector.docs.extend(tokenize(texts))
            collector.locations.extend(text_locations)
            texts.clear()
            text_locations.clear()

    cursor = ReadCursor()
    with guard(cursor, collector.reject):
        for line_number, (_, line) in enumerate(_lines(unit.path, cursor, unit.start, unit.stop)):
            cursor.location = (line_number, 0)
            collector.input_bytes += len(line)
            collector.lines += 1
            if not line.strip():
                continue
            try:
                value = _field(_parse_record(line), options.fields)
                if tokenize is not None:
                    if not isinstance(value, str):
                        raise _Bad(
                            f"field to tokenize must be a string, got {type(value).__name__}"
                        )
                    texts.append(value)
                    text_locations.append(cursor.location)
                    collector.tokens += len(value)
                else:
                    ids = _ids_from_list(value, line)
                    collector.docs.append(ids)
                    collector.locations.append(cursor.location)
                    collector.tokens += ids.shape[0]
            except _Bad as bad:
                flush_texts()
                collector.rejects.append(((line_number, bad.column), str(bad)))
            if collector.full():
                flush_texts()
                yield collector.take()
    flush_texts()
    yield collector.take()


def _parse_record(line: bytes) -> Any:
    """One JSON record; :class:`_Bad` for malformed, too deep or oversized input."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise _Bad(f"malformed JSON: {exc.msg}", exc.pos + 1) from None
    except UnicodeDecodeError as exc:
        raise _Bad(f"invalid UTF-8 ({exc.reason})", exc.start + 1) from None
    except RecursionError:
        raise _Bad("JSON nested too deeply") from None
    except ValueError as exc:  # e.g. an integer literal over the interpreter's digit limit
        raise _Bad(f"JSON value not accepted ({exc})") from None


def _read_text(unit: WorkUnit, options: ReadOptions) -> Iterator[InputBatch]:
    tokenize = make_tokenizer(options.tokenizer or "bytes")
    assert tokenize is not None
    collector = _Collector()

    def emit(lines: list[bytes], file_index: int, first_line: int) -> None:
        data = b"".join(lines)
        if options.split == "paragraphs":
            data = data.rstrip(b"\r\n")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            prefix = data[: exc.start]
            line = first_line + prefix.count(b"\n")
            column = exc.start - (prefix.rfind(b"\n") + 1) + 1
            reason = f"invalid UTF-8 at column {column} ({exc.reason})"
            collector.rejects.append(((file_index, line), reason))
            return
        collector.docs.extend(tokenize([text]))
        collector.locations.append((file_index, first_line))
        collector.tokens += len(data)

    cursor = ReadCursor()
    for file_index, path in enumerate(unit.paths):
        cursor.location, cursor.offset = (file_index, 0), -1
        with guard(cursor, collector.reject):
            block: list[bytes] = []
            block_line = 0
            line_number = -1
            for line_number, (_, line) in enumerate(_lines(path, cursor)):
                cursor.location = (file_index, line_number)
                collector.input_bytes += len(line)
                collector.lines += 1
                if options.split == "paragraphs" and not line.strip():
                    if block:
                        emit(block, file_index, block_line)
                        block = []
                        if collector.full():
                            yield collector.take()
                    continue
                if not block:
                    block_line = line_number
                block.append(line)
            if block or (options.split != "paragraphs" and line_number < 0):
                emit(block, file_index, block_line)
        if collector.full():
            yield collector.take()
    yield collector.take()


# -- record and array inputs --------------------------------------------------------
def _read_parquet(unit: WorkUnit, options: ReadOptions) -> Iterator[InputBatch]:
    collector = _Collector()
    cursor = ReadCursor()
    with guard(cursor, collector.reject):
        yield from _parquet_rows(unit, options, collector, cursor)
    yield collector.take()


def _parquet_rows(
    unit: WorkUnit, options: ReadOptions, collector: _Collector, cursor: ReadCursor
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
        metadata = reader.metadata
        first_row = sum(metadata.row_group(g).num_rows for g in range(unit.start))
        cursor.location = (first_row, 0)
        column = reader.read_row_group(unit.start, columns=[name]).column(name).combine_chunks()
    collector.input_bytes = metadata.row_group(unit.start).total_byte_size
    if options.tokenizer is not None:
        tokenize = make_tokenizer(options.tokenizer)
        assert tokenize is not None
        for row, text in enumerate(column.to_pylist()):
            if not isinstance(text, str):
                collector.rejects.append(((first_row + row, 0), f"column {name!r} is not a string"))
                continue
            collector.docs.extend(tokenize([text]))
            collector.locations.append((first_row + row, 0))
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
        piece = flat[starts[row] : ends[row]]
        collector.docs.append(piece.astype(np.int64, copy=False))
        collector.locations.append(location)
        collector.tokens += piece.shape[0]
        if collector.full():
            yield collector.take()


def _load_npy(path: str) -> np.ndarray:
    """Read a 1-D integer ``.npy`` whose header is checked against the file size first
    (a header claiming 2**40 ids is an error, not an 8 TiB allocation)."""
    with open_regular(path, IngestError) as handle:
        size = os.fstat(handle.fileno()).st_size
        shape, _, dtype = npy_header(handle, path)
        if len(shape) != 1 or dtype.kind not in "iu" or dtype == np.uint64 or dtype.hasobject:
            raise _Bad(f"must be a 1-D integer array, got {dtype} {shape}")
        held = size - handle.tell()
        if shape[0] * dtype.itemsize != held:
            raise _Bad(
                f"header says {shape[0]} {dtype} ids ({shape[0] * dtype.itemsize} bytes), "
                f"the file holds {held} bytes of data"
            )
        array = np.fromfile(handle, dtype=dtype, count=shape[0])
    if array.shape[0] != shape[0]:
        raise _Bad(f"file ended after {array.shape[0]} of {shape[0]} ids")
    return array


def _read_npy(unit: WorkUnit, options: ReadOptions) -> Iterator[InputBatch]:
    collector = _Collector()
    cursor = ReadCursor()
    for position, path in enumerate(unit.paths):
        cursor.location = (position, 0)
        with guard(cursor, collector.reject):
            try:
                array = _load_npy(path)
            except _Bad as bad:
                collector.rejects.append(((position, 0), str(bad)))
                continue
            collector.docs.append(array)
            collector.locations.append((position, 0))
            collector.tokens += array.shape[0]
            collector.input_bytes += array.nbytes
        if collector.full():
            yield collector.take()
    yield collector.take()


class _Records(Sequence[tuple[int, int]]):
    """Locations ``(base + i, 0)`` of consecutive records, without a list per batch."""

    def __init__(self, base: int) -> None:
        self.base = base

    def __getitem__(self, index: Any) -> Any:
        return (self.base + int(index), 0)

    def __len__(self) -> int:
        raise TypeError("record locations have no length")


def _read_flat(unit: WorkUnit, options: ReadOptions) -> Iterator[InputBatch]:
    collector = _Collector()
    cursor = ReadCursor(location=(unit.start, 0))
    with guard(cursor, collector.reject):
        # A unit planned without a readable header (see plan_units) covers the whole
        # file, and has its checksums verified here rather than by the planner.
        source = open_flat(unit.format, unit.path, unit.companion, check_crc=unit.stop < 0)
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


_READERS: dict[str, Callable[[WorkUnit, ReadOptions], Iterator[InputBatch]]] = {
    "jsonl": _read_jsonl,
    "text": _read_text,
    "parquet": _read_parquet,
    "npy": _read_npy,
    "npz": _read_flat,
    "megatron": _read_flat,
}


def read_unit(unit: WorkUnit, options: ReadOptions) -> Iterator[InputBatch]:
    """Yield the documents of ``unit`` in input order, in bounded batches.

    Never raises for bad input: whatever fails while reading a file (a damaged
    stream, a corrupt page, a lying header, a FIFO) ends that file with a reject
    naming the record reached (see :mod:`mixle.corpus.ingestion.input_guard`).
    """
    return _READERS[unit.format](unit, options)
