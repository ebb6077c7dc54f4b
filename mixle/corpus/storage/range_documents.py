"""RangeDocuments: read documents of a remote corpus by byte ranges, no local copy.

For random access and inspection of a corpus too big (or too rarely used) to
download. A shard's offsets file (8 bytes per document) is fetched whole when the
shard is first touched; each document is then one ``cat_file(url, start, end)``
of exactly its bytes: never an ``fs.open()`` with a default block (s3fs would read
50 MiB for a 2 KB document). :meth:`RangeDocuments.take` sorts the requested
ranges, coalesces neighbours closer than :data:`COALESCE_GAP` (up to
:data:`MAX_COALESCED` per request) and fetches them concurrently with
``cat_ranges``. Iteration reads each shard in :data:`ITER_BLOCK`-byte blocks.

Range bodies are checked by length (a short body is refetched); whole-file
checksums cannot be checked without reading the whole file, so use the cache mode
or :func:`~mixle.corpus.verify_corpus` where content integrity matters.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from mixle.corpus.format.documents import DEFAULT_MAX_OPEN_SHARDS, ShardedDocuments
from mixle.corpus.format.shard_loader import ShardArrays, ShardLoader
from mixle.corpus.format.spec import HEADER_SIZE, OffsetsHeader
from mixle.data._documents import gather_by_take
from mixle.errors import UnsupportedStoreOperation

if TYPE_CHECKING:
    from mixle.corpus.format.manifest import Manifest, ShardEntry
    from mixle.corpus.format.store import ShardStore

__all__ = ["COALESCE_GAP", "ITER_BLOCK", "MAX_COALESCED", "RangeDocuments", "RangeShards"]

#: Ranges closer than this many bytes are fetched as one request.
COALESCE_GAP = 64 * 1024
#: Upper bound on one coalesced request.
MAX_COALESCED = 8 * 1024 * 1024
#: Block size of sequential iteration.
ITER_BLOCK = 8 * 1024 * 1024


def _empty(dtype: np.dtype[Any]) -> np.ndarray:
    empty = np.empty(0, dtype=dtype)
    empty.flags.writeable = False  # like every other returned document
    return empty


class _RangeTokens:
    """Stands in for a shard's token array: slicing fetches exactly that range."""

    __slots__ = ("dtype", "name", "size", "store")

    def __init__(self, store: ShardStore, name: str, dtype: np.dtype[Any], size: int) -> None:
        self.store = store
        self.name = name
        self.dtype = dtype
        self.size = size

    def __getitem__(self, key: slice) -> np.ndarray:
        start, stop = int(key.start), int(key.stop)
        if stop <= start:
            return _empty(self.dtype)
        item = self.dtype.itemsize
        data = self.store.read_range(self.name, start * item, stop * item)
        return np.frombuffer(data, dtype=self.dtype)  # bytes: read-only, like the mmap views


def coalesce(
    begins: np.ndarray, ends: np.ndarray, gap: int = COALESCE_GAP, limit: int = MAX_COALESCED
) -> list[tuple[int, int]]:
    """Merge sorted byte ranges closer than ``gap`` into requests of at most ``limit`` bytes.

    A single range larger than ``limit`` stays one request.
    """
    merged: list[tuple[int, int]] = []
    for begin, end in zip(begins.tolist(), ends.tolist(), strict=True):
        if merged:
            low, high = merged[-1]
            if begin <= high + gap and max(end, high) - low <= limit:
                merged[-1] = (low, max(high, end))
                continue
        merged.append((begin, end))
    return merged


class RangeShards(ShardLoader):
    """Shards read by byte ranges: the offsets file fetched whole when the shard is
    opened, tokens fetched range by range as they are sliced."""

    #: Range reads map nothing and hold no descriptor per open shard.
    descriptors_per_shard: ClassVar[int] = 0
    supports_hints: ClassVar[bool] = False  # nothing is kept locally to fill ahead

    def __init__(self, store: ShardStore) -> None:
        if not store.supports_ranges:
            raise UnsupportedStoreOperation(
                f"{store.location}: range reads need a store with supports_ranges "
                f"({type(store).__name__} has none)."
            )
        super().__init__(store)

    def open(self, entry: ShardEntry, dtype: np.dtype[Any]) -> ShardArrays:
        arrays = self.read_offsets(entry)
        tokens = _RangeTokens(self.store, entry.tokens, dtype, entry.tokens_bytes)
        return ShardArrays(tokens, arrays.offsets, None, arrays.where)

    def read_offsets(self, entry: ShardEntry) -> ShardArrays:
        name = entry.offsets
        data = self.store.read_range(name, 0, entry.offsets_bytes)
        where = f"{self.store.location}/{name}"
        OffsetsHeader.unpack(data[:HEADER_SIZE], where)
        return ShardArrays(None, np.frombuffer(data, dtype="<i8", offset=HEADER_SIZE), None, where)


class RangeDocuments(ShardedDocuments):
    """A :class:`ShardedDocuments` whose documents are fetched by byte-range requests.

    Obtain one with ``open_corpus(url, mode="range")``. Composed with
    :class:`RangeShards`; same documents, ``take`` and errors as the cached reader;
    ``prefetch`` is a no-op (nothing is kept locally). Batched reads (``take``,
    ``gather_into``, iteration) coalesce the ranges of many documents into few
    concurrent requests.
    """

    def __init__(
        self,
        store: ShardStore,
        manifest: Manifest,
        *,
        max_open_shards: int = DEFAULT_MAX_OPEN_SHARDS,
        loader: ShardLoader | None = None,
    ) -> None:
        super().__init__(
            store,
            manifest,
            max_open_shards=max_open_shards,
            loader=RangeShards(store) if loader is None else loader,
        )

    def take(self, indices: Sequence[int] | np.ndarray) -> list[np.ndarray]:
        """Documents at ``indices``, fetched with coalesced, concurrent range requests."""
        array = self._normalize(indices)
        if array.size == 0:
            return []
        out: list[np.ndarray | None] = [None] * array.shape[0]
        item = self._dtype.itemsize
        names: list[str] = []
        spans: list[tuple[int, int]] = []
        wanted: list[tuple[int, int, int, int]] = []  # (request, position, begin, end)
        for number, positions in self._groups(array):
            shard = self._shard(number)
            chosen = np.arange(array.shape[0]) if positions is None else positions
            local = array[chosen] - shard.start
            begins = shard.offsets_array[local] * item
            ends = shard.offsets_array[local + 1] * item
            order = np.argsort(begins, kind="stable")
            name = self._entries[number].tokens
            requests = coalesce(begins[order], ends[order])
            first = len(spans)
            names.extend([name] * len(requests))
            spans.extend(requests)
            request = first
            for position, begin, end in zip(
                chosen[order].tolist(), begins[order].tolist(), ends[order].tolist(), strict=True
            ):
                if end <= begin:
                    out[position] = _empty(self._dtype)
                    continue
                while not spans[request][0] <= begin <= end <= spans[request][1]:
                    request += 1
                wanted.append((request, position, begin, end))
        nonempty = [i for i, (low, high) in enumerate(spans) if high > low]
        bodies = self._store.read_ranges(
            [names[i] for i in nonempty],
            [spans[i][0] for i in nonempty],
            [spans[i][1] for i in nonempty],
        )
        blocks: dict[int, bytes] = dict(zip(nonempty, bodies, strict=True))
        for request, position, begin, end in wanted:
            low = spans[request][0]
            out[position] = np.frombuffer(
                blocks[request], dtype=self._dtype, count=(end - begin) // item, offset=begin - low
            )
        return [doc for doc in out if doc is not None]

    def gather_into(
        self,
        indices: np.ndarray,
        begins: np.ndarray,
        ends: np.ndarray,
        out: np.ndarray,
        at: np.ndarray,
    ) -> None:
        """Pieces of documents into ``out`` (see :meth:`ShardedDocuments.gather_into`),
        the documents fetched with :meth:`take`'s coalesced, concurrent range requests."""
        gather_by_take(self, indices, begins, ends, out, at)

    def __iter__(self) -> Iterator[np.ndarray]:
        item = self._dtype.itemsize
        for number, entry in enumerate(self._entries):
            if not entry.num_documents:
                continue
            bounds = self._read_offsets(number).tolist()
            block_start, block = 0, _empty(self._dtype)
            for begin, end in itertools.pairwise(bounds):
                if end > block_start + block.shape[0]:
                    block_start = begin
                    stop = max(end, min(begin + ITER_BLOCK // item, entry.num_tokens))
                    data = self._store.read_range(entry.tokens, begin * item, stop * item)
                    block = np.frombuffer(data, dtype=self._dtype)
                yield block[begin - block_start : end - block_start]


RangeShards.documents_type = RangeDocuments
