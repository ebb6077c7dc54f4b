"""CachedDocuments: the memory-mapped reader over shards fetched into the shared cache.

Identical to :class:`~mixle.corpus.ShardedDocuments` on the read path (documents
are zero-copy views of mmap'd files in the cache); it adds the two things a remote
corpus needs:

- **pins**: a shard is pinned in the :class:`~mixle.corpus._cache.ShardCache` while
  it is in this reader's open-shard LRU, so no process evicts it; leaving the LRU
  unpins it.
- **background prefetch**: :meth:`prefetch` (called by consumers that know their
  future order, via :func:`mixle.data.prefetch_hint`) starts downloading the next
  shards without blocking; already open shards get the usual ``madvise`` hint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mixle.corpus._format import HEADER_SIZE, check_offsets
from mixle.corpus._reader import _NO_SHARD, ShardedDocuments, _OpenShard
from mixle.errors import ArgumentTypeError, CorpusFormatError

__all__ = ["CachedDocuments"]


class CachedDocuments(ShardedDocuments):
    """A :class:`ShardedDocuments` over a remote or zarr store with a local shard cache.

    Obtain one with :func:`mixle.corpus.open_corpus` on a URL or a zarr corpus.
    """

    def _release_shard(self, number: int) -> None:
        entry = self._entries[number]
        release = getattr(self._store, "release", None)
        if release is not None:
            release(entry["tokens"])
            release(entry["offsets"])

    def _load(self, number: int) -> _OpenShard:
        if number not in self._open:
            # Make room in the LRU (and unpin) before fetching, so that the download's
            # eviction pass may already reclaim the shard this read pushes out.
            victims = []
            with self._lock:
                while len(self._open) >= self._max_open:
                    victims.append(self._open.popitem(last=False)[0])
            for victim in victims:
                self._release_shard(victim)
        before = set(self._open)
        shard = super()._load(number)
        for gone in before - set(self._open):
            if gone != number:
                self._release_shard(gone)
        return shard

    def _read_offsets(self, number: int) -> np.ndarray:
        shard = self._open.get(number)
        if shard is not None:
            return shard.offsets_array
        entry = self._entries[number]
        path = self._store.local_path(entry["offsets"])
        try:
            offsets = np.fromfile(path, dtype="<i8", offset=HEADER_SIZE)
        finally:
            release = getattr(self._store, "release", None)
            if release is not None:
                release(entry["offsets"])
        if offsets.shape[0] != entry["num_documents"] + 1:
            raise CorpusFormatError(f"{path}: offsets count changed since open.")
        if number not in self._checked:
            check_offsets(offsets, entry["num_tokens"], path)
            self._checked.add(number)
        return offsets

    def prefetch(self, indices: Sequence[int] | np.ndarray) -> None:
        """Hint that ``indices`` will be read soon, in that order; never blocks on I/O.

        The first few shards not yet open (in order of first use) start downloading
        in the background and stay pinned until read; documents in open shards get
        ``madvise(WILLNEED)``. Invalid indices are ignored.
        """
        try:
            array = self._normalize(indices)
        except (IndexError, ArgumentTypeError):
            return
        if array.size == 0:
            return
        numbers = np.searchsorted(self._starts_array, array, side="right") - 1
        _, first = np.unique(numbers, return_index=True)
        ordered = numbers[np.sort(first)].tolist()
        is_open = np.isin(numbers, np.fromiter(self._open, dtype=np.int64, count=len(self._open)))
        fetch = getattr(self._store, "prefetch_files", None)
        if fetch is not None:
            wanted: list[str] = []
            for number in ordered:
                if number not in self._open and self._entries[number]["num_documents"]:
                    wanted.extend(
                        (self._entries[number]["offsets"], self._entries[number]["tokens"])
                    )
            fetch(wanted)
        if is_open.any():
            super().prefetch(array[is_open])

    def close(self) -> None:
        """Unpin every open shard, stop prefetching, and drop the mappings this reader holds.

        Views already returned stay valid (POSIX keeps an unlinked mapped file alive).
        The reader stays usable: the next read fetches and pins again.
        """
        with self._lock:
            numbers = list(self._open)
            self._open.clear()
            self._last = _NO_SHARD
        for number in numbers:
            self._release_shard(number)
        close = getattr(self._store, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> CachedDocuments:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
