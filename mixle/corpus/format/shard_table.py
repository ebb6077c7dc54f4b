"""The binary shard table of a version-2 manifest: every shard's entry in fixed-width columns.

A manifest that lists 10^5 shards in JSON is ~34 MB and costs seconds (and ~120 MB of
private memory) to parse into one object per shard, in every rank and every
DataLoader worker. A version-2 manifest keeps its corpus-level fields in JSON and
names a table file instead of a ``shards`` list; the table holds the same entries as
columns (cumulative document and token counts, the two SHA-256 digests, the two file
names), memory-mappable, checked whole in a few vectorised numpy passes and with one
SHA-256, and read per shard only when a shard is touched (:class:`ShardTable` is a
lazy ``Sequence[ShardEntry]``). ``docs/format.md`` section 14 is the normative byte
layout; this module implements it.
"""

from __future__ import annotations

import hashlib
import struct
import sys
from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np

from mixle.corpus.format.shard_entry import ShardEntry, ShardFile
from mixle.corpus.format.spec import (
    DTYPE_CODES,
    MANIFEST_NAME,
    offsets_file_size,
)
from mixle.errors import CorpusFormatError

__all__ = [
    "SHARD_TABLE_NAME",
    "TABLE_HEADER",
    "TABLE_MAGIC",
    "ShardTable",
    "pack_shard_table",
]

#: The name writers give the table file (readers use the name the manifest records).
SHARD_TABLE_NAME = "shards.table"
#: First 8 bytes of a shard table.
TABLE_MAGIC = b"MIXLESTB"
#: Version of the table's byte layout.
TABLE_VERSION = 1
#: ``<``: magic (8s), version (u32), dtype code (u32), shards, documents, tokens, name
#: heap bytes (u64 each), 16 reserved zero bytes. 64 bytes: the columns stay 8-aligned.
TABLE_HEADER = struct.Struct("<8sIIQQQQ16s")
_HEADER_SIZE = TABLE_HEADER.size
_DIGEST = 32
_MAX_NAME = 255
# Bytes a file name may hold (SAFE_NAME), and those it may start with.
_NAME_BYTE = np.zeros(256, dtype=bool)
_FIRST_BYTE = np.zeros(256, dtype=bool)
for _chars, _table in (
    (b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", (_NAME_BYTE, _FIRST_BYTE)),
    (b"._-", (_NAME_BYTE,)),
):
    for _array in _table:
        _array[np.frombuffer(_chars, dtype=np.uint8)] = True
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def table_size(num_shards: int, names_bytes: int) -> int:
    """Exact byte size of a table of ``num_shards`` shards whose names take ``names_bytes``."""
    return (
        _HEADER_SIZE
        + 16 * (num_shards + 1)
        + 2 * _DIGEST * num_shards
        + 16 * num_shards
        + names_bytes
    )


def pack_shard_table(entries: Sequence[ShardEntry], dtype: str) -> bytes:
    """The table bytes for shard ``entries`` (:class:`ShardEntry`, already validated)."""
    count = len(entries)
    documents = np.zeros(count + 1, dtype="<i8")
    tokens = np.zeros(count + 1, dtype="<i8")
    np.cumsum([entry.num_documents for entry in entries], out=documents[1:])
    np.cumsum([entry.num_tokens for entry in entries], out=tokens[1:])
    digests = b"".join(bytes.fromhex(entry.tokens_sha256) for entry in entries) + b"".join(
        bytes.fromhex(entry.offsets_sha256) for entry in entries
    )
    names = [name.encode("ascii") for entry in entries for name in entry.files]
    ends = np.cumsum([len(name) for name in names], dtype=np.int64).astype("<i8")
    heap = b"".join(names)
    header = TABLE_HEADER.pack(
        TABLE_MAGIC,
        TABLE_VERSION,
        DTYPE_CODES[dtype],
        count,
        int(documents[-1]),
        int(tokens[-1]),
        len(heap),
        bytes(16),
    )
    return header + documents.tobytes() + tokens.tobytes() + digests + ends.tobytes() + heap


def _int_view(column: np.ndarray) -> Any:
    """``column`` (little-endian int64) indexable as Python ints: a memoryview where the
    host is little-endian, else a native copy."""
    if sys.byteorder == "little":
        return column.data.cast("B").cast("q")
    return column.astype(np.int64).tolist()


def _hex_lines(tokens: np.ndarray, offsets: np.ndarray) -> bytes:
    """``"<tokens hex> <offsets hex>\\n"`` per shard, vectorised (the fingerprint's lines)."""
    count = tokens.shape[0]
    lines = np.empty((count, 130), dtype=np.uint8)
    for digests, column in ((tokens, 0), (offsets, 65)):
        lines[:, column : column + 64 : 2] = _HEX[digests >> 4]
        lines[:, column + 1 : column + 64 : 2] = _HEX[digests & 15]
    lines[:, 64] = ord(" ")
    lines[:, 129] = ord("\n")
    return lines.tobytes()


def _monotone(column: np.ndarray, total: int, where: str, name: str) -> None:
    if int(column[0]) != 0 or int(column[-1]) != total:
        raise CorpusFormatError(
            f"{where}: `{name}` must run from 0 to the manifest's total {total}. "
            f"Got {int(column[0])} to {int(column[-1])} instead."
        )
    steps = np.diff(column)
    if steps.size and int(steps.min()) < 0:
        shard = int(np.flatnonzero(steps < 0)[0])
        raise CorpusFormatError(f"{where}: `{name}` decreases at shard {shard}.")


class ShardTable(Sequence[ShardEntry]):
    """The shard entries of a version-2 manifest, read from its table on demand.

    Construct with :meth:`parse`, which checks the whole table (header against the
    manifest, counts, names, fingerprint) in vectorised passes. ``table[k]`` builds
    shard ``k``'s :class:`~mixle.corpus.format.manifest.ShardEntry` when asked (O(1));
    nothing is kept per shard. ``document_starts`` / ``token_starts`` are the int64
    cumulative counts (``num_shards + 1`` each), views of the table's buffer.
    """

    def __init__(
        self,
        buffer: Any,
        dtype: str,
        document_starts: np.ndarray,
        token_starts: np.ndarray,
        digests: np.ndarray,
        name_ends: np.ndarray,
        heap: memoryview,
    ) -> None:
        self._buffer = buffer  # keeps a mapping alive under the views
        self._dtype = dtype
        self._itemsize = np.dtype(dtype).itemsize
        self.document_starts = document_starts
        self.token_starts = token_starts
        self._digests = digests
        self._name_ends = name_ends
        self._heap = heap
        # Python-level views for per-shard lookups (numpy scalars cost ~1 us each).
        self._documents: Any = _int_view(document_starts)
        self._tokens: Any = _int_view(token_starts)
        self._ends: Any = _int_view(name_ends)
        self._digest_bytes = digests.reshape(-1).data.cast("B")
        self._positions: dict[str, int] | None = None  # name -> position, on first locate

    @classmethod
    def parse(
        cls,
        buffer: Any,
        *,
        where: str,
        dtype: str,
        num_shards: int,
        num_documents: int,
        num_tokens: int,
        own_name: str,
    ) -> ShardTable:
        """Check the table ``buffer`` (bytes or a read-only mapping) against the manifest.

        ``own_name`` is the table's file name (no shard may use it). The size and
        SHA-256 of the file are the caller's to check first.

        Raises
        ------
        CorpusFormatError
            The header disagrees with the manifest (naming the field), the size with
            the header, a cumulative column is not a run from 0 to the manifest's
            total, or a file name is unsafe, repeated, ``manifest.json`` or the table's.
        """
        view = memoryview(buffer).cast("B")
        if len(view) < _HEADER_SIZE:
            raise CorpusFormatError(
                f"{where}: {len(view)} bytes, shorter than the {_HEADER_SIZE}-byte header."
            )
        magic, version, code, shards, documents, tokens, heap_size, reserved = TABLE_HEADER.unpack(
            view[:_HEADER_SIZE]
        )
        if magic != TABLE_MAGIC:
            raise CorpusFormatError(
                f"{where}: not a mixle shard table (magic {magic!r}, expected {TABLE_MAGIC!r})."
            )
        if version != TABLE_VERSION:
            raise CorpusFormatError(
                f"{where}: unsupported shard table version {version} (this reader knows "
                f"{TABLE_VERSION})."
            )
        expected = {
            "dtype code": (code, DTYPE_CODES[dtype]),
            "num_shards": (shards, num_shards),
            "num_documents": (documents, num_documents),
            "num_tokens": (tokens, num_tokens),
        }
        for field, (got, want) in expected.items():
            if got != want:
                raise CorpusFormatError(
                    f"{where}: header `{field}` is {got}, the manifest says {want}."
                )
        if reserved != bytes(16):
            raise CorpusFormatError(f"{where}: header reserved bytes must be zero.")
        if len(view) != table_size(shards, heap_size):
            raise CorpusFormatError(
                f"{where}: {len(view)} bytes, but {shards} shards and {heap_size} bytes of "
                f"names make {table_size(shards, heap_size)}."
            )
        at = _HEADER_SIZE
        starts = []
        for _ in range(2):
            starts.append(np.frombuffer(view, dtype="<i8", count=shards + 1, offset=at))
            at += 8 * (shards + 1)
        digests = np.frombuffer(view, dtype=np.uint8, count=2 * _DIGEST * shards, offset=at)
        digests = digests.reshape(2, shards, _DIGEST)
        at += 2 * _DIGEST * shards
        name_ends = np.frombuffer(view, dtype="<i8", count=2 * shards, offset=at)
        heap = view[at + 16 * shards :]
        _monotone(starts[0], num_documents, where, "document_starts")
        _monotone(starts[1], num_tokens, where, "token_starts")
        _check_names(name_ends, np.frombuffer(heap, dtype=np.uint8), where, own_name)
        return cls(buffer, dtype, starts[0], starts[1], digests, name_ends, heap)

    def fingerprint(self) -> str:
        """The corpus fingerprint (``docs/format.md`` section 7) over the table's digests."""
        digest = hashlib.sha256(f"mixle-corpus-v1\n{self._dtype}\n".encode("ascii"))
        block = 1 << 16  # shards per pass: bounded scratch memory
        for first in range(0, len(self), block):
            stop = min(first + block, len(self))
            digest.update(_hex_lines(self._digests[0, first:stop], self._digests[1, first:stop]))
        return digest.hexdigest()

    def __len__(self) -> int:
        return self.document_starts.shape[0] - 1

    @overload
    def __getitem__(self, index: int) -> ShardEntry: ...

    @overload
    def __getitem__(self, index: slice) -> list[ShardEntry]: ...

    def __getitem__(self, index: int | slice) -> ShardEntry | list[ShardEntry]:
        if isinstance(index, slice):
            return [self[k] for k in range(len(self))[index]]
        count = len(self)
        if index < 0:
            index += count
        if not 0 <= index < count:
            raise IndexError(f"shard {index} is out of range for a table of {count} shards.")
        documents = self._documents[index + 1] - self._documents[index]
        tokens = self._tokens[index + 1] - self._tokens[index]
        digests, second = self._digest_bytes, (count + index) * _DIGEST
        return ShardEntry(
            tokens=self._name(2 * index),
            offsets=self._name(2 * index + 1),
            num_documents=documents,
            num_tokens=tokens,
            tokens_bytes=tokens * self._itemsize,
            offsets_bytes=offsets_file_size(documents),
            tokens_sha256=digests[index * _DIGEST : (index + 1) * _DIGEST].hex(),
            offsets_sha256=digests[second : second + _DIGEST].hex(),
        )

    def locate(self, name: str) -> tuple[int, ShardFile] | None:
        """``(shard number, "tokens" or "offsets")`` of the file ``name``, or ``None``.

        The first call indexes the names (one dict of ``2 * num_shards`` strings, built
        from one decode of the heap); later calls are O(1).
        """
        if self._positions is None:
            text = str(self._heap, "ascii")
            ends = [0, *self._name_ends.tolist()]
            self._positions = {text[ends[j] : ends[j + 1]]: j for j in range(len(ends) - 1)}
        position = self._positions.get(name)
        if position is None:
            return None
        return position // 2, "tokens" if position % 2 == 0 else "offsets"

    def offsets_names(self, numbers: Sequence[int] | None = None) -> list[str]:
        """The offsets file names of shards ``numbers`` (default: every shard, in order),
        from one decode of the heap (no :class:`ShardEntry` built)."""
        text = str(self._heap, "ascii")
        ends = self._name_ends.tolist()
        if numbers is None:
            return [text[ends[j - 1] : ends[j]] for j in range(1, len(ends), 2)]
        return [text[ends[2 * k] : ends[2 * k + 1]] for k in numbers]

    def __iter__(self) -> Iterator[ShardEntry]:
        return (self[k] for k in range(len(self)))

    def _name(self, position: int) -> str:
        begin = self._ends[position - 1] if position else 0
        return str(self._heap[begin : self._ends[position]], "ascii")

    def __reduce__(self) -> tuple[Any, ...]:
        raise TypeError("a ShardTable is not pickled; pickle the reader (it reopens the corpus).")


def _check_names(ends: np.ndarray, heap: np.ndarray, where: str, own_name: str) -> None:
    """Every name is a safe file name (``docs/format.md`` section 6), all are distinct,
    none is ``manifest.json`` or the table's own name. Vectorised over the heap."""
    count = ends.shape[0]
    if count == 0:
        if heap.size:
            raise CorpusFormatError(f"{where}: names heap must be empty for 0 shards.")
        return
    begins = np.concatenate([[0], ends[:-1]])
    sizes = ends - begins
    if int(sizes.min()) < 1 or int(sizes.max()) > _MAX_NAME or int(ends[-1]) != heap.size:
        bad = (
            int(np.flatnonzero((sizes < 1) | (sizes > _MAX_NAME))[0])
            if (int(sizes.min()) < 1 or int(sizes.max()) > _MAX_NAME)
            else count - 1
        )
        raise CorpusFormatError(
            f"{where}: `name_ends` must give every name 1 to {_MAX_NAME} bytes and end at "
            f"the heap's {heap.size} bytes (shard {bad // 2})."
        )
    unsafe = ~_NAME_BYTE[heap]
    unsafe[begins] |= ~_FIRST_BYTE[heap[begins]]
    # Names start with a letter or digit, so a ".." in the heap lies inside one name.
    unsafe[:-1] |= (heap[:-1] == ord(".")) & (heap[1:] == ord("."))
    if unsafe.any():
        position = int(np.flatnonzero(unsafe)[0])
        name = int(np.searchsorted(ends, position, side="right"))
        raise CorpusFormatError(
            f"{where}: the {'tokens' if name % 2 == 0 else 'offsets'} name of shard "
            f"{name // 2} is not a plain file name (letters, digits, '.', '_', '-', first "
            f"a letter or digit, no '..')."
        )
    # Each name as a zero-padded row of `width` bytes (a strided gather of the heap),
    # hashed to one uint64; only names whose hashes collide are compared as bytes.
    width = -(-int(sizes.max()) // 8) * 8
    padded_heap = np.zeros(heap.size + width, dtype=np.uint8)
    padded_heap[: heap.size] = heap
    rows = np.lib.stride_tricks.sliding_window_view(padded_heap, width)[begins]
    rows[np.arange(width) >= sizes[:, None]] = 0
    words = rows.view("<u8")
    hashes = np.zeros(count, dtype=np.uint64)
    for column in range(words.shape[1]):
        hashes = (hashes ^ words[:, column]) * np.uint64(0x100000001B3)
        hashes ^= hashes >> np.uint64(29)
    order = np.argsort(hashes, kind="stable")
    same = np.flatnonzero(hashes[order[1:]] == hashes[order[:-1]])
    keys = rows.view(f"S{width}").reshape(count)
    if any(keys[order[k]] == keys[order[k + 1]] for k in same.tolist()):
        raise CorpusFormatError(f"{where}: shard file names must be unique.")
    for reserved in (MANIFEST_NAME, own_name):
        if len(reserved) <= width and (keys == reserved.encode("ascii")).any():
            raise CorpusFormatError(f"{where}: no shard file may be named {reserved}.")
