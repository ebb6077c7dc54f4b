"""How a reader obtains one shard's arrays: the strategy ``ShardedDocuments`` is composed with.

:class:`~mixle.corpus.format.documents.ShardedDocuments` owns everything that is the
same for every backend: document lookup, the open-shard set and its CLOCK eviction,
the offsets checks, batched reads and the batch gather. A :class:`ShardLoader` owns what
differs: how a shard's token and offsets arrays are obtained (mapped in place,
downloaded into a cache and mapped, or fetched range by range), what must happen when a
shard leaves the open set (unpinning a cached copy), whether shards can be fetched in
the background ahead of use, and how many file descriptors an open shard holds.
:class:`MappedShards` (a local directory) lives here; the cached and the range-read
strategies live in :mod:`mixle.corpus.storage`.
"""

from __future__ import annotations

import abc
import mmap
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from mixle._file_checks import open_regular, regular_descriptor
from mixle.corpus.format.spec import HEADER_SIZE
from mixle.errors import CorpusFormatError

if TYPE_CHECKING:
    from mixle.corpus.format.documents import ShardedDocuments
    from mixle.corpus.format.manifest import ShardEntry
    from mixle.corpus.format.store import ShardStore

__all__ = ["MappedShards", "ShardArrays", "ShardLoader", "map_file"]


@dataclass(frozen=True, slots=True)
class ShardArrays:
    """One shard's arrays as a loader obtained them.

    Attributes
    ----------
    tokens
        The token array (a read-only view of a mapping), or, for a loader that reads
        ranges on demand, an object whose ``[a:b]`` slices fetch those tokens.
    offsets
        The int64 offsets (``num_documents + 1``), past the header.
    mapping
        The token file's mapping, or ``None`` (nothing mapped, or an empty file).
    where
        The offsets file as named in errors.
    checked
        Whether ``offsets`` has already been checked whole.
    header
        The offsets file's 32-byte header when the loader read it anyway (so a reader
        can check it without another read), else ``None``.
    """

    tokens: Any
    offsets: np.ndarray
    mapping: mmap.mmap | None
    where: str
    checked: bool = False
    header: bytes | None = None


def map_file(path: str, size: int) -> mmap.mmap | None:
    """Map the regular file ``path`` of ``size`` bytes (checked on the open descriptor)."""
    if size == 0:
        return None
    fd = regular_descriptor(path, CorpusFormatError, size)
    try:
        mapping = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
    if len(mapping) != size:
        actual = len(mapping)
        mapping.close()
        raise CorpusFormatError(f"{path}: {actual} bytes, the manifest says {size} (file changed).")
    return mapping


class ShardLoader(abc.ABC):
    """How shards of one store are obtained, released and fetched ahead.

    ``open`` and ``read_offsets`` are required; the other members default to what is
    right for files that are already local.
    """

    #: File descriptors one open shard holds (see :mod:`mixle.corpus.format.descriptors`).
    descriptors_per_shard: ClassVar[int] = 2
    #: Whether documents of open shards take ``madvise(WILLNEED)`` hints (their tokens
    #: are a mapping).
    supports_hints: ClassVar[bool] = True
    #: Whether :meth:`fetch_ahead` brings shards in without opening them; otherwise a
    #: hint opens (maps) the shards it names, up to the open-shard budget.
    supports_background_fetch: ClassVar[bool] = False
    #: The :class:`~mixle.corpus.format.documents.ShardedDocuments` subclass to build
    #: over this loader when it has batch read paths of its own (coalesced range
    #: reads); ``None``: the plain reader.
    documents_type: ClassVar[type[ShardedDocuments] | None] = None
    #: Whether :meth:`open` checks both files' kind and size against the entry on the
    #: descriptors it maps and returns the offsets header (``ShardArrays.header``), so
    #: a reader of a shard table checks a shard's files on first touch with no reads
    #: of its own; otherwise the reader checks them through the store first.
    checks_files: ClassVar[bool] = False

    def __init__(self, store: ShardStore) -> None:
        self.store = store

    @abc.abstractmethod
    def open(self, entry: ShardEntry, dtype: np.dtype[Any]) -> ShardArrays:
        """Obtain the arrays of shard ``entry`` (tokens of ``dtype``)."""

    @abc.abstractmethod
    def read_offsets(self, entry: ShardEntry) -> ShardArrays:
        """The offsets of shard ``entry`` without opening it (``tokens`` is ``None``)."""

    def release(self, entry: ShardEntry) -> None:
        """Shard ``entry`` left the reader's open set. Default: nothing held."""
        del entry

    def fetch_ahead(self, entries: Sequence[ShardEntry]) -> None:
        """Start bringing ``entries`` in, in order, without blocking. Default: no-op."""
        del entries

    def close(self) -> None:
        """Stop background work. Default: none runs."""
        return


class MappedShards(ShardLoader):
    """Shards whose files are local: both files memory-mapped in place."""

    checks_files: ClassVar[bool] = True

    def open(self, entry: ShardEntry, dtype: np.dtype[Any]) -> ShardArrays:
        tokens_path = self.store.local_path(entry.tokens)
        offsets_path = self.store.local_path(entry.offsets)
        mapping = map_file(tokens_path, entry.tokens_bytes)
        offsets_map = map_file(offsets_path, entry.offsets_bytes)
        tokens = (
            np.empty(0, dtype=dtype) if mapping is None else np.frombuffer(mapping, dtype=dtype)
        )
        assert offsets_map is not None  # an offsets file is never empty
        offsets = np.frombuffer(offsets_map, dtype="<i8", offset=HEADER_SIZE)
        header = offsets_map[:HEADER_SIZE]
        return ShardArrays(tokens, offsets, mapping, offsets_path, header=header)

    def read_offsets(self, entry: ShardEntry) -> ShardArrays:
        path = self.store.local_path(entry.offsets)
        with open_regular(path, CorpusFormatError, entry.offsets_bytes) as handle:
            data = handle.read()
        offsets = np.frombuffer(data, dtype="<i8", offset=HEADER_SIZE)
        return ShardArrays(None, offsets, None, path, header=data[:HEADER_SIZE])
