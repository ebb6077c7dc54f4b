"""The scale sidecars of a corpus, decided and written in one place.

Two optional, derived files make a large corpus fast to open and to plan:
``block_offsets.bin`` (``docs/format.md`` section 16: the cumulative token offset at
every 4096th document, for corpora of 2^24 documents or more) and
``document_offsets.bin`` (section 17: every document's offset in one file, for corpora
of many small shards). Every path that publishes a corpus calls
:func:`write_scale_sidecars` in its commit step, before the manifest: the
:class:`~mixle.corpus.CorpusWriter`, the commit of ingest units (local processes,
Dask, task arrays; local disk or an object store), ``merge_corpora``, a raw copy of a
corpus that names none (``convert_corpus`` from zarr) and ``mixle sidecars``. So a
corpus gets the same sidecars, byte for byte, whichever path wrote it: their bytes
depend only on the documents' cumulative offsets, never on how they are sharded.

:func:`wanted_sidecars` is the one rule (the thresholds live beside each format,
``BLOCK_OFFSETS_MIN_DOCUMENTS`` and ``DOCUMENT_OFFSETS_MIN_SHARDS`` /
``DOCUMENT_OFFSETS_MAX_SHARD_DOCUMENTS``, and are read when it is called).
The offsets come from the shards' own offsets files, wherever they lie:
:class:`LocalOffsetsFiles` (one directory, or one per shard: an ingest's unit
directories) or :class:`StoreOffsetsFiles` (any store that reads byte ranges: the
units of an ingest into ``s3://``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from mixle._file_checks import open_regular
from mixle._io import atomic_write_bytes
from mixle.corpus.format import block_offsets as _block
from mixle.corpus.format import document_offsets as _document
from mixle.corpus.format.block_offsets import (
    BLOCK_OFFSETS_KEY,
    BLOCK_OFFSETS_NAME,
    BLOCK_OFFSETS_STRIDE,
    BlockOffsets,
    BlockOffsetsRecorder,
    block_offsets_reference,
    encode_block_offsets,
)
from mixle.corpus.format.document_offsets import (
    DOCUMENT_OFFSETS_KEY,
    DOCUMENT_OFFSETS_NAME,
    shard_file_pieces,
    store_file_pieces,
    write_document_offsets,
)
from mixle.corpus.format.spec import HEADER_SIZE
from mixle.errors import ArgumentError, CorpusFormatError

if TYPE_CHECKING:
    from mixle.corpus.format.manifest import Manifest
    from mixle.corpus.format.shard_entry import ShardEntry
    from mixle.corpus.format.store import ShardStore

__all__ = [
    "SCALE_SIDECARS",
    "LocalOffsetsFiles",
    "OffsetsFiles",
    "SidecarChoice",
    "StoreOffsetsFiles",
    "sidecar_flag",
    "sidecar_status",
    "wanted_sidecars",
    "write_scale_sidecars",
]

#: The scale sidecars, by manifest metadata key: the file each key names.
SCALE_SIDECARS = {
    BLOCK_OFFSETS_KEY: BLOCK_OFFSETS_NAME,
    DOCUMENT_OFFSETS_KEY: DOCUMENT_OFFSETS_NAME,
}


def sidecar_flag(name: str, value: Any) -> bool | None:
    """Check a ``True`` / ``False`` / ``None`` (the default rule) sidecar argument.

    Raises
    ------
    ArgumentError
        ``value`` is anything else (``1``, ``"yes"``).
    """
    if value is not None and not isinstance(value, bool):
        raise ArgumentError(f"`{name}` must be True, False or None. Got {value!r} instead.")
    return value


@dataclass(frozen=True, slots=True)
class SidecarChoice:
    """Which scale sidecars a corpus gets."""

    block_offsets: bool
    document_offsets: bool

    @property
    def names(self) -> tuple[str, ...]:
        """The files chosen (block offsets first, as write_scale_sidecars lists them)."""
        chosen = (
            (self.block_offsets, BLOCK_OFFSETS_NAME),
            (self.document_offsets, DOCUMENT_OFFSETS_NAME),
        )
        return tuple(name for wanted, name in chosen if wanted)


def wanted_sidecars(
    num_shards: int,
    num_documents: int,
    *,
    block_offsets: bool | None = None,
    document_offsets: bool | None = None,
) -> SidecarChoice:
    """The sidecars a corpus of ``num_shards`` shards and ``num_documents`` documents
    gets: each flag that is ``None`` follows the default rule (block offsets from
    ``BLOCK_OFFSETS_MIN_DOCUMENTS`` = 2^24 documents on; document offsets for 1,024
    shards or more holding fewer than 4,096 documents per shard on average), a bool
    forces it. The one rule every writer and ``mixle sidecars`` follow."""
    block = sidecar_flag("block_offsets", block_offsets)
    document = sidecar_flag("document_offsets", document_offsets)
    if block is None:
        block = num_documents >= _block.BLOCK_OFFSETS_MIN_DOCUMENTS
    if document is None:
        document = _document.wants_document_offsets(num_shards, num_documents)
    return SidecarChoice(block, document)


class OffsetsFiles(Protocol):
    """The offsets files of a corpus's shards, in corpus order, wherever they lie."""

    @property
    def shards(self) -> Sequence[ShardEntry]:
        """The shard entries (counts and sizes checked against each file read)."""
        ...

    def pieces(self) -> Iterator[np.ndarray]:
        """Every cumulative offset ``0 .. N`` in consecutive pieces, each file checked
        (:func:`~mixle.corpus.format.document_offsets.offsets_file_pieces`)."""
        ...

    def values(self, shard: int, positions: np.ndarray) -> np.ndarray:
        """The int64 values at ``positions`` (ascending, in ``[0, documents]``) of
        shard number ``shard``'s offsets file."""
        ...


class LocalOffsetsFiles:
    """Offsets files on local disk: in ``directory``, or ``directory[i]`` for shard ``i``."""

    def __init__(self, directory: str | Sequence[str], shards: Sequence[ShardEntry]) -> None:
        self.shards = shards
        self._directory = directory

    def _path(self, shard: int) -> str:
        directory = self._directory
        return os.path.join(
            directory if isinstance(directory, str) else directory[shard],
            self.shards[shard].offsets,
        )

    def pieces(self) -> Iterator[np.ndarray]:
        return shard_file_pieces(self._directory, self.shards)

    def values(self, shard: int, positions: np.ndarray) -> np.ndarray:
        size = self.shards[shard].offsets_bytes
        with open_regular(self._path(shard), CorpusFormatError, size) as handle:
            # One 8-byte read per value: a block boundary every 4096 documents is one
            # value per 32 KiB of offsets, so a pass over the whole file would be wasted.
            data = b"".join(
                os.pread(handle.fileno(), 8, HEADER_SIZE + 8 * position)
                for position in positions.tolist()
            )
        if len(data) != 8 * positions.shape[0]:
            raise CorpusFormatError(f"{self._path(shard)}: shorter than its manifest entry.")
        return np.frombuffer(data, dtype="<i8").astype(np.int64)


class StoreOffsetsFiles:
    """Offsets files in a store that reads byte ranges: ``names[i]`` holds shard ``i``'s."""

    def __init__(
        self, store: ShardStore, names: Sequence[str], shards: Sequence[ShardEntry]
    ) -> None:
        if len(names) != len(shards):
            raise ValueError(f"{len(names)} offsets file names for {len(shards)} shards")
        self.shards, self._store, self._names = shards, store, names

    def pieces(self) -> Iterator[np.ndarray]:
        return store_file_pieces(self._store, self._names, self.shards)

    def values(self, shard: int, positions: np.ndarray) -> np.ndarray:
        starts = (HEADER_SIZE + 8 * positions).tolist()
        datas = self._store.read_ranges(
            [self._names[shard]] * len(starts), starts, [start + 8 for start in starts]
        )
        return np.frombuffer(b"".join(datas), dtype="<i8").astype(np.int64)


def _block_values(files: OffsetsFiles, num_documents: int, stride: int) -> np.ndarray:
    """The block-offsets entries (the offset before documents ``0, stride, ..., N``)
    read from the offsets files at those documents only: O(N / stride) values, one
    read per value (a page on local disk, a range on a store)."""
    shards = files.shards
    boundaries = np.minimum(
        np.arange(-(-num_documents // stride) + 1, dtype=np.int64) * stride, num_documents
    )
    counts = np.array([entry.num_documents for entry in shards], dtype=np.int64)
    tokens = np.array([entry.num_tokens for entry in shards], dtype=np.int64)
    document_starts = np.concatenate([[0], np.cumsum(counts)])
    token_starts = np.concatenate([[0], np.cumsum(tokens)])
    # The shard each boundary lies in (the last of equal starts: empty shards skipped);
    # a boundary at a shard's start is that shard's cumulative token count.
    numbers = np.searchsorted(document_starts, boundaries, side="right") - 1
    result = token_starts[numbers]
    inside = np.flatnonzero(boundaries != document_starts[numbers])
    for shard in np.unique(numbers[inside]).tolist():
        chosen = inside[numbers[inside] == shard]
        positions = boundaries[chosen] - document_starts[shard]
        result[chosen] = token_starts[shard] + files.values(shard, positions)
    return result


class _EveryStride:
    """Pass cumulative-offset pieces through, keeping every ``stride``-th value (the
    block-offsets entries, gathered on the document-offsets pass: no second read)."""

    def __init__(self, pieces: Iterator[np.ndarray], stride: int) -> None:
        self._pieces, self._stride = pieces, stride
        self._kept: list[np.ndarray] = []
        self._seen = self._last = 0

    def __iter__(self) -> Iterator[np.ndarray]:
        for piece in self._pieces:
            # Global index ``seen + j`` is kept when it is a multiple of the stride.
            self._kept.append(piece[-self._seen % self._stride :: self._stride].astype(np.int64))
            self._seen += piece.shape[0]
            if piece.shape[0]:
                self._last = int(piece[-1])
            yield piece

    def values(self, num_documents: int) -> np.ndarray:
        """The entries of every piece seen (offsets ``0 .. N``): the block offsets."""
        tail = [np.array([self._last], dtype=np.int64)] if num_documents % self._stride else []
        return np.concatenate([*self._kept, *tail])


def sidecar_status(manifest: Manifest) -> dict[str, dict[str, Any]]:
    """For each scale sidecar, by metadata key (``"block_offsets"``,
    ``"document_offsets"``): its ``file``, whether the manifest names it (``present``)
    and whether a corpus of this shape gets it by default (``recommended``). Reads
    the manifest only."""
    choice = wanted_sidecars(len(manifest.shards), manifest.num_documents)
    recommended = {
        BLOCK_OFFSETS_KEY: choice.block_offsets,
        DOCUMENT_OFFSETS_KEY: choice.document_offsets,
    }
    return {
        key: {"file": name, "present": key in manifest.metadata, "recommended": recommended[key]}
        for key, name in SCALE_SIDECARS.items()
    }


def write_scale_sidecars(
    directory: str,
    files: OffsetsFiles,
    metadata: MutableMapping[str, Any],
    *,
    block_offsets: bool | None = None,
    document_offsets: bool | None = None,
    recorded: BlockOffsetsRecorder | None = None,
) -> list[str]:
    """Write the scale sidecars :func:`wanted_sidecars` chooses for the shards of
    ``files`` into the local ``directory`` (each atomically), name each in
    ``metadata`` and drop the entry of each one not written; return the files written.

    ``directory`` is where the commit step publishes from (the corpus directory, an
    ingest's work directory, a staging directory uploaded next). One pass over the
    offsets files when the document offsets are written (the block offsets are taken
    from it); otherwise the block offsets read one value per 4096 documents, or none
    at all with ``recorded`` (a writer's :class:`BlockOffsetsRecorder` of every
    document). Memory O(2^20 offsets + documents / 4096).

    Raises
    ------
    CorpusFormatError
        An offsets file is missing, of another size, or does not run from 0 to its
        shard's token count without decreasing (names the file); nothing is named in
        ``metadata`` then.
    """
    shards = files.shards
    num_documents = sum(entry.num_documents for entry in shards)
    num_tokens = sum(entry.num_tokens for entry in shards)
    choice = wanted_sidecars(
        len(shards),
        num_documents,
        block_offsets=block_offsets,
        document_offsets=document_offsets,
    )
    written: list[str] = []
    stride = BLOCK_OFFSETS_STRIDE
    block_values: np.ndarray | None = None
    if choice.document_offsets:
        path = os.path.join(directory, DOCUMENT_OFFSETS_NAME)
        picker = _EveryStride(files.pieces(), stride)
        reference = write_document_offsets(path, picker, num_documents)
        block_values = picker.values(num_documents)
        metadata[DOCUMENT_OFFSETS_KEY] = reference
        written.append(DOCUMENT_OFFSETS_NAME)
    else:
        metadata.pop(DOCUMENT_OFFSETS_KEY, None)
    if choice.block_offsets:
        if recorded is not None:
            data = recorded.encode()
        else:
            if block_values is None:
                block_values = _block_values(files, num_documents, stride)
            data = encode_block_offsets(block_values, num_documents, stride)
        path = os.path.join(directory, BLOCK_OFFSETS_NAME)
        BlockOffsets(data, num_documents, num_tokens, stride, path)  # checked before it is named
        atomic_write_bytes(path, data)
        metadata[BLOCK_OFFSETS_KEY] = block_offsets_reference(data)
        written.insert(0, BLOCK_OFFSETS_NAME)
    else:
        metadata.pop(BLOCK_OFFSETS_KEY, None)
    return written
