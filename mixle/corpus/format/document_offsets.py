"""The document-offsets sidecar: every document's cumulative token offset in one file,
checked chunk by chunk (``docs/format.md`` section "Document-offsets sidecar").

A corpus of many small shards keeps its per-document offsets in as many small offsets
files: a ``"blocks"`` plan window (262,144 documents at the defaults) over 10-document
shards opens ~26,000 of them, ~0.5 s of system calls before the first batch. This
sidecar keeps the same values (``value[i]`` = tokens of documents ``0 .. i - 1``,
``i`` in ``[0, N]``) contiguously, so the window is a few slices of one mapping.

It is optional and derived, and a reader never depends on it: the manifest's
``metadata["document_offsets"]`` names it with its version, chunk size, size and the
SHA-256 of its header and digest table; each chunk of values carries its own SHA-256 in
that table and is checked when first read (O(chunk), never O(documents) on open). A
reader that finds no entry, an entry of another version, or a file that is missing or
fails a check answers from the offsets files instead (``mixle verify`` reports the
damage).

Layout (little-endian): ``MAGIC`` (8 bytes), ``u32`` version (1), ``u32`` flags (0),
``u64`` documents ``N``, ``u64`` tokens, ``u64`` chunk ``C`` (a power of two), ``u64``
chunks ``K = max(1, ceil(N / C))``; then ``N + 1`` int64 values; then ``K + 1`` int64
boundaries (``value[min(k C, N)]``, ``k = 0 .. K``); then ``K`` SHA-256 digests, digest
``k`` over values ``k C .. min((k + 1) C, N)`` (inclusive: a chunk's last value is the
next chunk's first, so checked chunks never decrease across their seam). The header,
boundaries and digests (the *head*, O(N / C)) are sealed by the manifest entry's
SHA-256 and checked on open; so the offsets at multiples of ``C`` (a ``"blocks"``
plan's block totals) are answered from the head without reading a chunk.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from mixle._arrays import distinct, run_indices
from mixle._file_checks import open_regular, read_regular_files
from mixle._io import atomic_write
from mixle.corpus.format.spec import HEADER_SIZE, check_offsets
from mixle.errors import CorpusFormatError

if TYPE_CHECKING:
    from mixle.corpus.format.shard_entry import ShardEntry
    from mixle.corpus.format.store import ShardStore

__all__ = [
    "DOCUMENT_OFFSETS_CHUNK",
    "DOCUMENT_OFFSETS_KEY",
    "DOCUMENT_OFFSETS_MAGIC",
    "DOCUMENT_OFFSETS_MAX_SHARD_DOCUMENTS",
    "DOCUMENT_OFFSETS_MIN_SHARDS",
    "DOCUMENT_OFFSETS_NAME",
    "DOCUMENT_OFFSETS_VERSION",
    "DocumentOffsets",
    "document_offsets_reference",
    "offsets_file_pieces",
    "offsets_pieces",
    "open_document_offsets",
    "shard_file_pieces",
    "store_file_pieces",
    "wants_document_offsets",
    "write_document_offsets",
]

DOCUMENT_OFFSETS_NAME = "document_offsets.bin"
DOCUMENT_OFFSETS_MAGIC = b"MXDOCOFF"
DOCUMENT_OFFSETS_VERSION = 1
#: The manifest metadata key that names the sidecar.
DOCUMENT_OFFSETS_KEY = "document_offsets"
#: Values per checked chunk (32 KiB, ~40 us of SHA-256): a ``"blocks"`` block of 4096
#: documents lies in at most two chunks.
DOCUMENT_OFFSETS_CHUNK = 4096
#: The writers add the sidecar by default to corpora of at least this many shards ...
DOCUMENT_OFFSETS_MIN_SHARDS = 1024
#: ... holding fewer documents than this per shard on average (a plan window of ``W``
#: blocks of 4096 documents then spans more than ``~W`` offsets files).
DOCUMENT_OFFSETS_MAX_SHARD_DOCUMENTS = 4096
_HEADER = struct.Struct("<8sIIQQQQ")
_DIGEST = 32
_REFERENCE_KEYS = frozenset({"file", "version", "chunk", "bytes", "sha256"})
# The values of at most this many chunks of a store that fetches are kept (8 MiB).
_MAX_FETCHED_CHUNKS = 256


def _chunks(num_documents: int, chunk: int) -> int:
    return max(1, -(-num_documents // chunk))


def _size(num_documents: int, chunk: int) -> int:
    chunks = _chunks(num_documents, chunk)
    return _HEADER.size + 8 * (num_documents + 1) + 8 * (chunks + 1) + _DIGEST * chunks


def _sha256(values: np.ndarray) -> bytes:
    """The SHA-256 of a contiguous array's bytes (no copy)."""
    return hashlib.sha256(np.ascontiguousarray(values).data).digest()


def wants_document_offsets(num_shards: int, num_documents: int) -> bool:
    """Whether a corpus of this shape gets the sidecar by default (many small shards)."""
    return (
        num_shards >= DOCUMENT_OFFSETS_MIN_SHARDS
        and num_documents < DOCUMENT_OFFSETS_MAX_SHARD_DOCUMENTS * num_shards
    )


def offsets_pieces(
    token_offsets: Callable[[np.ndarray], np.ndarray], num_documents: int, step: int = 1 << 20
) -> Iterator[np.ndarray]:
    """Every cumulative offset ``0 .. N`` of a corpus, ``step`` at a time, as
    ``token_offsets(indices)`` answers them (``ShardedDocuments`` reading its shards)."""
    for first in range(0, num_documents + 1, step):
        yield token_offsets(np.arange(first, min(first + step, num_documents + 1), dtype=np.int64))


def shard_file_pieces(
    directory: str | Sequence[str], shards: Sequence[ShardEntry], group: int = 1024
) -> Iterator[np.ndarray]:
    """Every cumulative offset ``0 .. N`` of the shards ``shards`` in local ``directory``
    (one for all, or one per shard: an ingest's unit directories), a writer's own files,
    read up to ``group`` offsets files at a time in one lean pass each, each file
    checked to run from 0 to its entry's token count without decreasing."""
    directories = [directory] * len(shards) if isinstance(directory, str) else list(directory)
    runs = []  # (first, stop): consecutive shards of one directory, <= group
    first = 0
    while first < len(shards):
        stop = first + 1
        while (
            stop < len(shards) and stop - first < group and directories[stop] == directories[first]
        ):
            stop += 1
        runs.append((first, stop))
        first = stop

    def read(first: int, stop: int) -> list[bytes]:
        entries = shards[first:stop]
        return read_regular_files(
            directories[first],
            [entry.offsets for entry in entries],
            [entry.offsets_bytes for entry in entries],
            CorpusFormatError,
        )

    return offsets_file_pieces(
        shards, runs, read, lambda number: f"{directories[number]}/{shards[number].offsets}"
    )


def store_file_pieces(
    store: ShardStore, names: Sequence[str], shards: Sequence[ShardEntry], group: int = 1024
) -> Iterator[np.ndarray]:
    """:func:`shard_file_pieces` of offsets files held by ``store`` (``names[i]`` the
    file of ``shards[i]``, e.g. ``.mixle-ingest/unit-000003/shard-00000.offsets``): up
    to ``group`` files at a time, one exact range each, in one :meth:`read_ranges` call
    (a backend fetches them concurrently)."""
    runs = [(first, min(first + group, len(shards))) for first in range(0, len(shards), group)]

    def read(first: int, stop: int) -> list[bytes]:
        sizes = [entry.offsets_bytes for entry in shards[first:stop]]
        return store.read_ranges(list(names[first:stop]), [0] * len(sizes), sizes)

    return offsets_file_pieces(
        shards, runs, read, lambda number: f"{store.location}/{names[number]}"
    )


def offsets_file_pieces(
    shards: Sequence[ShardEntry],
    runs: Sequence[tuple[int, int]],
    read: Callable[[int, int], list[bytes]],
    where: Callable[[int], str],
) -> Iterator[np.ndarray]:
    """Every cumulative offset ``0 .. N`` of ``shards``, one piece per run ``(first,
    stop)`` of consecutive shards whose offsets files (header included) ``read(first,
    stop)`` returns; each file checked to be of its entry's size and to run from 0 to
    its entry's token count without decreasing (``where(number)`` names a bad one)."""
    base = 0
    for first, stop in runs:
        entries = shards[first:stop]
        datas = read(first, stop)
        for number, (entry, data) in enumerate(zip(entries, datas, strict=True), first):
            if len(data) != entry.offsets_bytes:
                raise CorpusFormatError(
                    f"{where(number)}: {len(data)} bytes, the manifest says {entry.offsets_bytes}."
                )
        flat = np.concatenate(
            [np.frombuffer(data, "<i8", offset=HEADER_SIZE) for data in datas]
            or [np.empty(0, dtype=np.int64)]
        )
        sizes = np.array([entry.num_documents + 1 for entry in entries], dtype=np.int64)
        totals = np.array([entry.num_tokens for entry in entries], dtype=np.int64)
        ends = np.cumsum(sizes)
        steps = np.diff(flat)
        steps[ends[:-1] - 1] = 0  # from one file's last offset to the next's first
        if (flat[ends - sizes] != 0).any() or (flat[ends - 1] != totals).any() or (steps < 0).any():
            for number, (entry, data) in enumerate(zip(entries, datas, strict=True), first):
                offsets = np.frombuffer(data, "<i8", offset=HEADER_SIZE)  # names the bad file
                check_offsets(offsets, entry.num_tokens, where(number))
        # Each shard's documents start at the tokens of the shards before it.
        bases = base + np.cumsum(totals) - totals
        keep = np.ones(flat.shape[0], dtype=np.bool_)
        keep[ends - 1] = False  # a shard's end is the next shard's start
        yield (flat + np.repeat(bases, sizes))[keep]
        base += int(totals.sum())
    yield np.array([base], dtype=np.int64)


def write_document_offsets(
    path: str | os.PathLike[str],
    pieces: Iterable[np.ndarray],
    num_documents: int,
    *,
    chunk: int = DOCUMENT_OFFSETS_CHUNK,
) -> dict[str, Any]:
    """Write the sidecar of a corpus of ``num_documents`` documents to ``path``,
    atomically, from its cumulative offsets ``0 .. N`` given in consecutive ``pieces``
    (:func:`offsets_pieces`, :func:`shard_file_pieces`); return the manifest metadata
    entry that names it. Streams: O(largest piece) memory.
    """
    if chunk < 1 or chunk & (chunk - 1):
        raise ValueError(f"`chunk` must be a power of two. Got {chunk} instead.")
    digests: list[bytes] = []
    firsts: list[np.ndarray] = []  # each chunk's first value: the boundaries
    pending = np.empty(0, dtype="<i8")
    written = 0
    with atomic_write(os.fspath(path), "wb") as handle:
        handle.write(bytes(_HEADER.size))
        for piece in pieces:
            pending = np.concatenate([pending, np.asarray(piece, dtype="<i8")])
            # A chunk is hashed once the value after it (its inclusive end) is known.
            full = (pending.shape[0] - 2) // chunk if pending.shape[0] > chunk + 1 else 0
            for k in range(full):
                digests.append(_sha256(pending[k * chunk : (k + 1) * chunk + 1]))
            firsts.append(pending[: full * chunk : chunk].copy())
            handle.write(pending[: full * chunk].tobytes())
            written += full * chunk
            pending = pending[full * chunk :]
        if written + pending.shape[0] != num_documents + 1:
            raise CorpusFormatError(
                f"{os.fspath(path)}: {written + pending.shape[0]} offsets for {num_documents} "
                "documents."
            )
        digests.append(_sha256(pending))
        handle.write(pending.tobytes())
        boundaries = np.concatenate([*firsts, pending[[0, -1]]]).astype("<i8")
        table = boundaries.tobytes() + b"".join(digests)
        handle.write(table)
        tokens = int(pending[-1])
        header = _HEADER.pack(
            DOCUMENT_OFFSETS_MAGIC,
            DOCUMENT_OFFSETS_VERSION,
            0,
            num_documents,
            tokens,
            chunk,
            len(digests),
        )
        handle.seek(0)
        handle.write(header)
    if len(digests) != _chunks(num_documents, chunk):  # pragma: no cover - a bug here
        raise AssertionError(f"{len(digests)} chunks for {num_documents} documents")
    return document_offsets_reference(header + table, _size(num_documents, chunk), chunk)


def document_offsets_reference(head: bytes, size: int, chunk: int) -> dict[str, Any]:
    """The manifest metadata entry naming a sidecar of ``size`` bytes whose header and
    digest table are ``head``."""
    return {
        "file": DOCUMENT_OFFSETS_NAME,
        "version": DOCUMENT_OFFSETS_VERSION,
        "chunk": chunk,
        "bytes": size,
        "sha256": hashlib.sha256(head).hexdigest(),
    }


def sidecar_reference(metadata: Mapping[str, Any]) -> dict[str, Any] | None:
    """The version-1 sidecar entry of a manifest's ``metadata``; ``None`` when it names
    none, or one this reader does not know (another version: it is only an index).

    Raises
    ------
    CorpusFormatError
        The entry claims version 1 but is malformed (``file``, ``version``, ``chunk``
        a power of two, ``bytes``, ``sha256``).
    """
    reference = metadata.get(DOCUMENT_OFFSETS_KEY)
    if reference is None or (
        isinstance(reference, dict) and reference.get("version") != DOCUMENT_OFFSETS_VERSION
    ):
        return None
    if (
        not isinstance(reference, dict)
        or set(reference) != _REFERENCE_KEYS
        or reference["file"] != DOCUMENT_OFFSETS_NAME
        or not all(
            isinstance(reference[key], int) and not isinstance(reference[key], bool)
            for key in ("chunk", "bytes")
        )
        or reference["chunk"] < 1
        or reference["chunk"] & (reference["chunk"] - 1)
        or not isinstance(reference["sha256"], str)
    ):
        raise CorpusFormatError(
            f"manifest metadata '{DOCUMENT_OFFSETS_KEY}' is {reference!r}, not a version-"
            f"{DOCUMENT_OFFSETS_VERSION} reference to {DOCUMENT_OFFSETS_NAME}."
        )
    return reference


class DocumentOffsets:
    """An opened sidecar: :meth:`at` answers the cumulative offset before any document,
    each chunk of values checked on its first read (digest, order, and the shard
    starts inside it against the manifest's cumulative token counts).

    Build one with :func:`open_document_offsets`.
    """

    def __init__(
        self,
        store: ShardStore,
        reference: Mapping[str, Any],
        document_starts: np.ndarray,
        token_starts: np.ndarray,
    ) -> None:
        self.where = f"{store.location}/{DOCUMENT_OFFSETS_NAME}"
        self.num_documents = num_documents = int(document_starts[-1])
        self.num_tokens = int(token_starts[-1])
        chunk = reference["chunk"]
        self.chunk, self._shift = chunk, chunk.bit_length() - 1
        self.num_chunks = count = _chunks(num_documents, chunk)
        size = _size(num_documents, chunk)
        if reference["bytes"] != size:
            raise CorpusFormatError(
                f"{self.where}: the manifest says {reference['bytes']} bytes; {num_documents} "
                f"documents in chunks of {chunk} take {size} (from another corpus)."
            )
        self._store, self._starts, self._token_starts = store, document_starts, token_starts
        self._table_at = _HEADER.size + 8 * (num_documents + 1)  # boundaries, then digests
        self._values: np.ndarray | None = None  # the mapped values (local files)
        self._fetched: dict[int, np.ndarray] = {}  # checked chunks (stores that fetch)
        directory = store.local_directory
        if directory is not None:
            path = os.path.join(directory, DOCUMENT_OFFSETS_NAME)
            with open_regular(path, CorpusFormatError, size) as handle:
                self._mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            if len(self._mapping) != size:
                raise CorpusFormatError(f"{self.where}: changed size while opened.")
            head = bytes(self._mapping[: _HEADER.size]) + bytes(self._mapping[self._table_at :])
            self._values = np.frombuffer(
                self._mapping, dtype="<i8", count=num_documents + 1, offset=_HEADER.size
            )
        elif store.supports_ranges:
            head = store.read_range(DOCUMENT_OFFSETS_NAME, 0, _HEADER.size) + store.read_range(
                DOCUMENT_OFFSETS_NAME, self._table_at, size
            )
        else:
            raise CorpusFormatError(f"{self.where}: this store reads no byte ranges.")
        if hashlib.sha256(head).hexdigest() != reference["sha256"]:
            raise CorpusFormatError(
                f"{self.where}: its header and digests are not the manifest's (replaced or forged)."
            )
        magic, version, _, documents, tokens, stored_chunk, chunks = _HEADER.unpack_from(head)
        if (magic, version, documents, tokens, stored_chunk, chunks) != (
            DOCUMENT_OFFSETS_MAGIC,
            DOCUMENT_OFFSETS_VERSION,
            num_documents,
            self.num_tokens,
            chunk,
            count,
        ):
            raise CorpusFormatError(
                f"{self.where}: header says version {version}, {documents} documents, "
                f"{tokens} tokens, {chunks} chunks of {stored_chunk}; the corpus has "
                f"{num_documents} documents and {self.num_tokens} tokens."
            )
        boundaries = np.frombuffer(head, dtype="<i8", count=count + 1, offset=_HEADER.size)
        aligned = document_starts[document_starts % chunk == 0]
        if (
            int(boundaries[0]) != 0
            or int(boundaries[-1]) != self.num_tokens
            or bool((boundaries[1:] < boundaries[:-1]).any())
            or not np.array_equal(
                boundaries[aligned >> self._shift],
                token_starts[document_starts % chunk == 0],
            )
        ):
            raise CorpusFormatError(
                f"{self.where}: its boundaries do not run from 0 to {self.num_tokens} without "
                "decreasing, or disagree with the manifest's shard token counts."
            )
        self._boundaries = boundaries
        self._digests = head[_HEADER.size + 8 * (count + 1) :]
        self._checked = np.zeros(count, dtype=np.bool_)

    def at(self, indices: np.ndarray) -> np.ndarray:
        """The offsets before ``indices`` (int64, each in ``[0, N]``), a new array.

        Indices that are multiples of ``C`` (or ``N``) are answered from the checked
        head; the chunks holding the others are checked on their first read.

        Raises
        ------
        CorpusFormatError
            A chunk read fails its digest or its structure (names the file and chunk).
        """
        shift, last = self._shift, self.num_documents
        positions = indices >> shift
        inner = (indices & (self.chunk - 1)) != 0
        inner &= indices != last
        outer = None if inner.all() else ~inner
        if outer is not None:
            heads = positions[outer]
            heads[indices[outer] == last] = self.num_chunks  # the count's own boundary
            if not inner.any():
                return self._boundaries[heads]
        wanted = positions[inner] if outer is not None else positions
        touched = distinct(wanted)
        todo = touched[~self._checked[touched]]
        if self._values is not None:
            for k in todo.tolist():
                self._check(k, self._chunk_values(k))
            result = self._values[indices]
        else:
            result = np.empty(indices.shape[0], dtype=np.int64)
            result[inner] = self._fetched_values(touched, todo, wanted, indices[inner])
        if outer is not None:
            result[outer] = self._boundaries[heads]
        return result

    def runs(self, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """The offsets before the indices of runs ``starts[j] .. starts[j] + counts[j] - 1``
        (int64, in ``[0, N]``, ``counts`` positive), concatenated: a new array.

        For a local file each run is one slice of the mapping, and only the chunks the
        runs lie in are checked (on their first read): a plan window of 64 blocks of
        4096 documents checks at most 128 chunks and builds no index array. A store
        that fetches answers as :meth:`at` of the runs' indices.

        Raises
        ------
        CorpusFormatError
            A chunk read fails its digest or its structure (names the file and chunk).
        """
        values = self._values
        if values is None:
            return self.at(run_indices(starts, counts))
        shift, last_chunk = self._shift, self.num_chunks - 1
        # Chunk k's digest covers values k C .. (k + 1) C inclusive, so the run of values
        # b .. e - 1 lies in chunks b >> shift .. (e - 2) >> shift (one chunk when e = b + 1).
        firsts = np.minimum(starts >> shift, last_chunk)
        lasts = np.clip((starts + counts - 2) >> shift, firsts, last_chunk)
        checked = self._checked
        for first, last in zip(firsts.tolist(), lasts.tolist(), strict=True):
            for k in range(first, last + 1):
                if not checked[k]:
                    self._check(k, self._chunk_values(k))
        result = np.empty(int(counts.sum()), dtype=np.int64)
        at = 0
        for begin, count in zip(starts.tolist(), counts.tolist(), strict=True):
            result[at : at + count] = values[begin : begin + count]
            at += count
        return result

    def _fetched_values(
        self, touched: np.ndarray, todo: np.ndarray, chunks: np.ndarray, indices: np.ndarray
    ) -> np.ndarray:
        """The values at ``indices`` (in chunks ``chunks``; ``touched`` their distinct
        chunks, ``todo`` those not checked yet) from a store that fetches: each chunk
        one range (fetched together), kept (at most ``_MAX_FETCHED_CHUNKS``) once checked."""
        del todo  # a chunk checked before may have been dropped since: fetch what is missing
        fetched = self._fetched
        missing = [k for k in touched.tolist() if k not in fetched]
        if len(fetched) + len(missing) > _MAX_FETCHED_CHUNKS:
            fetched.clear()
            missing = touched.tolist()
        for k, values in zip(missing, self._fetch(missing), strict=True):
            fetched[k] = self._check(k, values)
        table = np.zeros((touched.shape[0], self.chunk + 1), dtype=np.int64)
        for row, k in enumerate(touched.tolist()):
            values = fetched[k]
            table[row, : values.shape[0]] = values
        rows = np.searchsorted(touched, chunks)
        return table[rows, indices - (touched[rows] << self._shift)]

    def _chunk_values(self, k: int) -> np.ndarray:
        assert self._values is not None
        return self._values[k << self._shift : min((k + 1) << self._shift, self.num_documents) + 1]

    def _fetch(self, chunks: list[int]) -> list[np.ndarray]:
        """The values of ``chunks``, one range each, in one ``read_ranges`` call (a
        backend may fetch them concurrently)."""
        firsts = [k << self._shift for k in chunks]
        starts = [_HEADER.size + 8 * first for first in firsts]
        ends = [
            _HEADER.size + 8 * (min(first + self.chunk, self.num_documents) + 1) for first in firsts
        ]
        datas = self._store.read_ranges([DOCUMENT_OFFSETS_NAME] * len(chunks), starts, ends)
        return [np.frombuffer(data, dtype="<i8") for data in datas]

    def _check(self, k: int, values: np.ndarray) -> np.ndarray:
        """Check chunk ``k``'s values (digest, never decreasing, inside ``[0, tokens]``,
        ``0`` first and the token count last, and equal to the manifest's cumulative
        token count at every shard start they hold); mark it checked."""
        first = k << self._shift
        expected = self._digests[_DIGEST * k : _DIGEST * (k + 1)]
        if _sha256(values) != expected:
            raise CorpusFormatError(
                f"{self.where}: chunk {k} (documents {first}..{first + values.shape[0] - 1}) "
                "is not the one its digest names (damaged or replaced)."
            )
        low = int(np.searchsorted(self._starts, first, side="left"))
        high = int(np.searchsorted(self._starts, first + values.shape[0] - 1, side="right"))
        starts = self._starts[low:high]
        if (
            bool((values[1:] < values[:-1]).any())
            or int(values[0]) < 0
            or int(values[-1]) > self.num_tokens
            or int(values[0]) != int(self._boundaries[k])
            or int(values[-1]) != int(self._boundaries[k + 1])
            or not np.array_equal(values[starts - first], self._token_starts[low:high])
        ):
            raise CorpusFormatError(
                f"{self.where}: chunk {k} (documents {first}..{first + values.shape[0] - 1}) "
                "decreases, leaves [0, tokens] or disagrees with the manifest's shard token "
                "counts."
            )
        self._checked[k] = True
        return values


def open_document_offsets(
    store: ShardStore,
    metadata: Mapping[str, Any],
    document_starts: np.ndarray,
    token_starts: np.ndarray,
) -> DocumentOffsets | None:
    """The sidecar the manifest ``metadata`` names, its header and digest table checked
    (O(documents / chunk)); ``None`` when it names none (or one of another version).

    ``document_starts`` and ``token_starts`` are the manifest's cumulative document and
    token counts per shard (``[0, ..., N]`` and ``[0, ..., tokens]``).

    Raises
    ------
    CorpusFormatError
        The entry is malformed, or the file is missing, of another size, or its header
        and digests are not the manifest's (the message names the file).
    """
    reference = sidecar_reference(metadata)
    if reference is None:
        return None
    return DocumentOffsets(store, reference, document_starts, token_starts)
