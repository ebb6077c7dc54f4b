"""Building blocks of a format's reader: the batch it yields, the options it reads
with, where each document came from, and helpers shared by the line-based readers.

A reader yields :class:`InputBatch` objects: the batch's token ids concatenated, the
document lengths, one location per document, and the records it could not parse
(with the reason). A location is an ``(a, b)`` integer pair whose meaning the format
defines (its :meth:`~.base.InputFormat.describe` turns one into "file, line and
position" for a message; its :meth:`~.base.InputFormat.origins` into
:class:`RecordOrigins`), so a worker reports positions without holding text. Batches
hold about ``BATCH_TOKENS`` ids, so a worker's memory is bounded whatever the unit size.
"""

from __future__ import annotations

import functools
import gzip
import io
import itertools
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mixle._optional import import_optional
from mixle.corpus.ingestion.input_guard import ReadCursor
from mixle.corpus.ingestion.work import open_binary
from mixle.errors import IngestError

__all__ = [
    "BATCH_TOKENS",
    "EMPTY_IDS",
    "BadRecord",
    "Collector",
    "InputBatch",
    "ReadOptions",
    "RecordOrigins",
    "Tokenize",
    "document_id",
    "is_compressed",
    "iter_lines",
    "make_tokenizer",
]

BATCH_TOKENS = 1 << 22
_BATCH_DOCUMENTS = 1 << 15
#: The ids of an empty document (shared: never written to).
EMPTY_IDS = np.empty(0, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """How records become token ids (picklable; sent to every worker); ``id_field``:
    the field whose value is each document's id (``--id-field``), or ``None``."""

    fields: tuple[str, ...]
    tokenizer: str | None
    split: str
    id_field: str | None = None


@dataclass
class InputBatch:
    """Documents read from a unit: ``tokens`` concatenated, ``lengths``, ``locations``,
    and with ``--id-field`` their ``ids`` (one string per document; else ``None``)."""

    tokens: np.ndarray
    lengths: np.ndarray
    locations: Sequence[tuple[int, int]]
    rejects: list[tuple[tuple[int, int], str]] = field(default_factory=list)
    input_bytes: int = 0
    lines: int = 0
    ids: list[str] | None = None


@dataclass(frozen=True, slots=True)
class RecordOrigins:
    """Where each document of a batch was read, as two int64 arrays of one entry each.

    ``file[d]`` indexes the unit's input files (:attr:`~.work.WorkUnit.files`);
    ``record[d]`` is the record's index in that file, counting from 0 in the format's
    record (a line, row, document or file: ``kind``). JSONL lines count from the
    unit's first line: add the unit's line base (the lines of the earlier units of the
    same file, known once their records are) for the line in the file. ``ids`` are
    the documents' ``--id-field`` values (``None`` without one).
    """

    kind: str
    file: np.ndarray
    record: np.ndarray
    ids: list[str] | None = None

    @classmethod
    def from_locations(
        cls,
        kind: str,
        locations: Sequence[tuple[int, int]],
        file_axis: int | None,
        record_axis: int | None,
        ids: list[str] | None = None,
    ) -> RecordOrigins:
        """Origins from a list of locations: ``file`` is location entry ``file_axis``
        (0 when ``None``: a one-file unit), ``record`` entry ``record_axis`` (0 when
        ``None``: one record per file); ``ids`` as given."""
        table = np.array(locations, dtype=np.int64).reshape(-1, 2)
        zeros = np.zeros(table.shape[0], dtype=np.int64)
        return cls(
            kind,
            zeros if file_axis is None else table[:, file_axis],
            zeros if record_axis is None else table[:, record_axis],
            ids,
        )


#: A batch tokenizer: texts in; out, every text's ids back to back (one flat array)
#: and the number of ids of each text (``int64``, in order).
Tokenize = Callable[[list[str]], tuple[np.ndarray, np.ndarray]]


def _utf8_bytes(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The ``"bytes"`` tokenizer: each text's UTF-8 bytes as its ids."""
    encoded = [text.encode("utf-8") for text in texts]
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), lengths


def make_tokenizer(spec: str | None) -> Tokenize | None:
    """Return a batch tokenizer for ``spec``: ``"bytes"`` (UTF-8 bytes), a
    ``tokenizer.json`` path (Hugging Face ``tokenizers``), or ``None``.

    A file is loaded once per process while its size and modification time stay the
    same (every work unit a worker reads shares it). Texts are encoded with the
    tokenizer's ``encode_batch_fast`` where it has one (``tokenizers`` >= 0.20: the same
    ids as ``encode_batch``, without computing the character offsets nothing here
    reads), and the ids go straight into one flat array: no array per document."""
    if spec is None:
        return None
    if spec == "bytes":
        return _utf8_bytes
    try:
        status = os.stat(spec)
    except OSError as exc:
        raise IngestError(f"cannot load tokenizer {spec} ({exc}).") from exc
    tokenizer = _load_tokenizer(spec, status.st_size, status.st_mtime_ns)

    batch = getattr(tokenizer, "encode_batch_fast", None) or tokenizer.encode_batch

    def encode(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        ids = [item.ids for item in batch(texts, add_special_tokens=False)]
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        return np.array(list(itertools.chain.from_iterable(ids)), dtype=np.int64), lengths

    return encode


@functools.lru_cache(maxsize=4)
def _load_tokenizer(path: str, size: int, mtime_ns: int) -> Any:
    """The ``tokenizers.Tokenizer`` of ``path`` (``size`` and ``mtime_ns`` key the cache,
    so a replaced file is loaded again)."""
    tokenizers = import_optional("tokenizers", "tokenizers")
    try:
        return tokenizers.Tokenizer.from_file(path)
    except Exception as exc:  # the Rust side raises a plain Exception
        raise IngestError(f"cannot load tokenizer {path} ({exc}).") from exc


class BadRecord(Exception):
    """A record that cannot be converted; ``args[0]`` is the reason, ``column`` the position."""

    def __init__(self, reason: str, column: int = 0) -> None:
        super().__init__(reason)
        self.column = column


def document_id(value: Any, name: str) -> str:
    """A record's ``--id-field`` value ``value`` (of field ``name``) as the document's id:
    a string as it is, an integer (not a boolean) in decimal.

    Raises
    ------
    BadRecord
        Any other value (a float, a boolean, null, a list or an object).
    """
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    shown = "null" if value is None else type(value).__name__
    raise BadRecord(f"id field {name!r} must be a string or an integer, got {shown}")


class Collector:
    """Gather documents into batches of about ``BATCH_TOKENS`` ids.

    Documents arrive as id arrays (:meth:`add_document`) or, with the ``tokenize`` the
    collector was made with, as texts (:meth:`add_text`): those are tokenized together,
    one call per batch, when the batch is taken. ``with_ids``: each document comes
    with its ``--id-field`` value, and batches carry them (:attr:`InputBatch.ids`)."""

    def __init__(self, tokenize: Tokenize | None = None, with_ids: bool = False) -> None:
        self._tokenize = tokenize
        self._with_ids = with_ids
        self._texts: list[str] = []
        self._start()

    def _start(self) -> None:
        """Begin an empty batch."""
        self.docs: list[np.ndarray] = []
        self.locations: list[tuple[int, int]] = []
        self.ids: list[str] = []
        self.rejects: list[tuple[tuple[int, int], str]] = []
        self.tokens = 0
        self.input_bytes = 0
        self.lines = 0

    def add_document(self, ids: np.ndarray, location: tuple[int, int], name: str = "") -> None:
        """Add the document of token ids ``ids`` read at ``location``, whose id (with
        ``with_ids``) is ``name``."""
        self.docs.append(ids)
        self.locations.append(location)
        if self._with_ids:
            self.ids.append(name)
        self.tokens += ids.shape[0]

    def add_text(self, text: str, location: tuple[int, int], size: int, name: str = "") -> None:
        """Add the document ``text`` read at ``location`` (``size``: its length in
        characters or bytes, an estimate of its ids), whose id (with ``with_ids``) is
        ``name``, to be tokenized with the rest of the batch. Texts and id arrays are
        not mixed in one reader."""
        self._texts.append(text)
        self.locations.append(location)
        if self._with_ids:
            self.ids.append(name)
        self.tokens += size

    def reject(self, location: tuple[int, int], reason: str) -> None:
        """Record that the record at ``location`` (and what follows it) cannot be read."""
        self.rejects.append((location, reason))

    def full(self) -> bool:
        """Whether the batch gathered so far should be taken."""
        documents = len(self.docs) + len(self._texts) + len(self.rejects)
        return self.tokens >= BATCH_TOKENS or documents >= _BATCH_DOCUMENTS

    def take(self) -> InputBatch:
        """Return the batch gathered so far (its texts tokenized) and start an empty one."""
        if self._texts:
            assert self._tokenize is not None, "add_text needs a collector with a tokenizer"
            assert not self.docs, "a reader adds texts or id arrays, never both"
            tokens, lengths = self._tokenize(self._texts)
            self._texts = []
        else:
            docs = self.docs
            lengths = np.fromiter((d.shape[0] for d in docs), dtype=np.int64, count=len(docs))
            tokens = np.concatenate(docs) if len(docs) > 1 else (docs or [EMPTY_IDS])[0]
        batch = InputBatch(
            tokens,
            lengths,
            self.locations,
            self.rejects,
            self.input_bytes,
            self.lines,
            self.ids if self._with_ids else None,
        )
        self._start()
        return batch


def _open_stream(path: str) -> tuple[Any, Any]:
    """Open ``path`` and return ``(raw file, decompressed binary stream)``."""
    lower = path.lower()
    zstandard = import_optional("zstandard", "zstandard") if lower.endswith(".zst") else None
    raw = open_binary(path)
    if lower.endswith(".gz"):
        return raw, gzip.GzipFile(fileobj=raw)
    if zstandard is not None:
        reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
        return raw, io.BufferedReader(reader, 1 << 20)
    return raw, raw


def is_compressed(path: str) -> bool:
    """Whether ``path`` is a ``.gz``/``.zst`` stream (which cannot seek)."""
    return path.lower().endswith((".gz", ".zst"))


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


def iter_lines(
    path: str, cursor: ReadCursor, start: int = 0, stop: int = -1
) -> Iterator[tuple[int, bytes]]:
    """Yield ``(byte offset, line)`` for every line whose first byte is in ``[start, stop)``;
    ``cursor.offset`` follows the (uncompressed) byte offset being read. A compressed
    file is checked whole first (:func:`_check_compressed`)."""
    if is_compressed(path):
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
