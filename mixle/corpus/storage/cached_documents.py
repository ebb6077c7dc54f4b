"""CachedDocuments: the memory-mapped reader over shards fetched into the shared cache.

:class:`~mixle.corpus.ShardedDocuments` composed with :class:`CachedShards`, the loading
strategy a remote corpus needs. The read path is the local one (documents are zero-copy
views of mmap'd files in the cache); the strategy adds:

- **pins**: a shard is pinned in the :class:`~mixle.corpus.storage.cache.ShardCache` while
  it is in the reader's open-shard set, so no process evicts it; leaving the set
  unpins it.
- **background prefetch**: ``prefetch`` (called by consumers that know their future
  order: :meth:`mixle.data.DocumentSource.prefetch`) starts downloading the next shards
  without blocking; already open shards get the usual ``madvise`` hint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from mixle.corpus.format.documents import DEFAULT_MAX_OPEN_SHARDS, ShardedDocuments
from mixle.corpus.format.shard_loader import MappedShards, ShardArrays, ShardLoader
from mixle.corpus.format.spec import HEADER_SIZE

if TYPE_CHECKING:
    from mixle.corpus.format.manifest import Manifest, ShardEntry
    from mixle.corpus.format.store import ShardStore

__all__ = ["CachedDocuments", "CachedShards"]


class CachedShards(MappedShards):
    """Shards downloaded into a pinned local cache by the store, then memory-mapped.

    ``store.local_path`` fetches and pins a file; :meth:`release` unpins both files of
    a shard when it leaves the reader's open set; :meth:`fetch_ahead` starts downloads
    in the background (``store.prefetch_files``).
    """

    #: Two mappings plus one cache pin lock per file (``ShardCache.pin``).
    descriptors_per_shard: ClassVar[int] = 4
    supports_background_fetch: ClassVar[bool] = True

    def read_offsets(self, entry: ShardEntry) -> ShardArrays:
        path = self.store.local_path(entry.offsets)
        try:
            offsets = np.fromfile(path, dtype="<i8", offset=HEADER_SIZE)
        finally:
            self.store.release(entry.offsets)
        return ShardArrays(None, offsets, None, path)

    def release(self, entry: ShardEntry) -> None:
        self.store.release(entry.tokens)
        self.store.release(entry.offsets)

    def fetch_ahead(self, entries: Sequence[ShardEntry]) -> None:
        self.store.prefetch_files([name for e in entries for name in (e.offsets, e.tokens)])

    def close(self) -> None:
        self.store.close()


class CachedDocuments(ShardedDocuments):
    """A :class:`ShardedDocuments` over a remote or zarr store with a local shard cache.

    Obtain one with :func:`mixle.corpus.open_corpus` on a URL or a zarr corpus. Reads
    through :class:`CachedShards`; :meth:`close` (or leaving a ``with`` block) unpins
    every open shard and stops prefetching.
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
            loader=CachedShards(store) if loader is None else loader,
        )


CachedShards.documents_type = CachedDocuments
