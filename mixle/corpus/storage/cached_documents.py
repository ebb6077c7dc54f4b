"""CachedDocuments: the memory-mapped reader over shards fetched into the shared cache.

Identical to :class:`~mixle.corpus.ShardedDocuments` on the read path (documents
are zero-copy views of mmap'd files in the cache); it adds the two things a remote
corpus needs:

- **pins**: a shard is pinned in the :class:`~mixle.corpus.storage.cache.ShardCache` while
  it is in this reader's open-shard LRU, so no process evicts it; leaving the LRU
  unpins it.
- **background prefetch**: :meth:`prefetch` (called by consumers that know their
  future order, via :func:`mixle.data.prefetch_hint`) starts downloading the next
  shards without blocking; already open shards get the usual ``madvise`` hint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from mixle.corpus.format.documents import _NO_SHARD, ShardedDocuments, _OpenShard
from mixle.corpus.format.spec import HEADER_SIZE, check_offsets
from mixle.errors import ArgumentTypeError, CorpusFormatError

__all__ = ["CachedDocuments"]


class CachedDocuments(ShardedDocuments):
    """A :class:`ShardedDocuments` over a remote or zarr store with a local shard cache.

    Obtain one with :func:`mixle.corpus.open_corpus` on a URL or a zarr corpus.
    """

    #: Two mappings plus one cache pin lock per file (``ShardCache.pin``).
    descriptors_per_shard: ClassVar[int] = 4

    def _release_shard(self, number: int) -> None:
        entry = self._entries[number]
        self._store.release(entry.tokens)
        self._store.release(entry.offsets)

    def _load(self, number: int) -> _OpenShard:
        if self._slots[number] is None:
            # Make room among the resident shards (and unpin) before fetching, so the
            # download's eviction pass may already reclaim the shard pushed out.
            with self._lock:
                victims = self._make_room()
            for victim in victims:
                self._release_shard(victim)
        return super()._load(number)

    def _make_room(self) -> list[int]:
        """CLOCK-evict until one slot is free; return the evicted numbers (lock held)."""
        resident = self._resident
        victims = []
        while resident and len(resident) >= self._max_open:
            hand = self._hand % len(resident)
            candidate = resident[hand]
            if self._referenced[candidate]:
                self._referenced[candidate] = False
                self._hand = (hand + 1) % len(resident)
                continue
            self._slots[candidate] = None
            resident.pop(hand)
            self._hand = hand % len(resident) if resident else 0
            victims.append(candidate)
        return victims

    def _admit(self, number: int) -> None:
        before = set(self._resident)
        super()._admit(number)
        for gone in before - set(self._resident):  # only if another thread raced us
            self._release_shard(gone)

    def _read_offsets(self, number: int) -> np.ndarray:
        shard = self._slots[number]
        if shard is not None:
            shard.check_all()
            return shard.offsets_array
        entry = self._entries[number]
        path = self._store.local_path(entry.offsets)
        try:
            offsets = np.fromfile(path, dtype="<i8", offset=HEADER_SIZE)
        finally:
            self._store.release(entry.offsets)
        if offsets.shape[0] != entry.num_documents + 1:
            raise CorpusFormatError(f"{path}: offsets count changed since open.")
        if number not in self._checked:
            check_offsets(offsets, entry.num_tokens, path)
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
        is_open = np.fromiter(
            (self._slots[n] is not None for n in numbers.tolist()), dtype=bool, count=len(numbers)
        )
        wanted: list[str] = []
        for number in ordered:
            if self._slots[number] is None and self._entries[number].num_documents:
                wanted.extend((self._entries[number].offsets, self._entries[number].tokens))
        self._store.prefetch_files(wanted)
        if is_open.any():
            super().prefetch(array[is_open])

    def close(self) -> None:
        """Unpin every open shard, stop prefetching, and drop the mappings this reader holds.

        Views already returned stay valid (POSIX keeps an unlinked mapped file alive).
        The reader stays usable: the next read fetches and pins again.
        """
        with self._lock:
            numbers = list(self._resident)
            for number in numbers:
                self._slots[number] = None
            self._resident.clear()
            self._hand = 0
            self._last = _NO_SHARD
        for number in numbers:
            self._release_shard(number)
        self._store.close()

    def __enter__(self) -> CachedDocuments:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
