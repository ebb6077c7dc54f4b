"""The store contract: what the corpus reader needs from wherever a corpus lives.

:class:`~mixle.corpus.format.documents.ShardedDocuments` never opens a path itself.
It asks a :class:`ShardStore` for the manifest bytes, for the first bytes of an
offsets file (headers are checked on open without fetching whole files), for file
sizes, and, when a shard is first read, for a *local* path holding the complete
file, which it then memory-maps. Every method the package calls on a store is
declared here; the optional capabilities (pinning, background prefetch, closing,
the reader class to build) have defaults that are right for a local directory, so a
backend overrides only what it supports. Implementations live in
:mod:`mixle.corpus.storage` (local directory, fsspec remote, zarr).

Stores must pickle as their location and options (no open handles, no bytes), so a
pickled reader reopens lazily in a DataLoader worker.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any

from mixle.corpus.format.documents import ShardedDocuments
from mixle.errors import CorpusFormatError

__all__ = ["ShardStore"]


class ShardStore(abc.ABC):
    """Where a corpus's files live. File names passed in are already checked by
    :func:`mixle.corpus.format.spec.check_file_name`.

    ``location`` and ``options`` reconstruct the store via
    :func:`mixle.corpus.storage.open.open_store`.
    """

    @property
    @abc.abstractmethod
    def location(self) -> str:
        """The path or URL the store was opened at (used in every error message)."""

    @property
    @abc.abstractmethod
    def options(self) -> Mapping[str, Any]:
        """Keyword arguments of ``open_corpus`` that recreate this store."""

    @abc.abstractmethod
    def read_manifest(self) -> bytes:
        """Return the bytes of ``manifest.json``; raise :class:`CorpusNotFoundError` if absent."""

    @abc.abstractmethod
    def read_prefix(self, name: str, size: int) -> bytes:
        """Return the first ``size`` bytes of file ``name`` (fewer if it is shorter)."""

    @abc.abstractmethod
    def file_size(self, name: str) -> int:
        """Return the size of file ``name`` in bytes; raise :class:`CorpusFormatError` if absent."""

    @abc.abstractmethod
    def local_path(self, name: str) -> str:
        """Return a local path holding the complete file ``name`` (fetching it if remote).

        A store that fetches pins the local copy until :meth:`release` is called.
        """

    def read_file(self, name: str, size: int) -> Any:
        """Return the whole file ``name``, which must be exactly ``size`` bytes: bytes,
        or a read-only buffer (a local store maps it). Reads at most ``size`` bytes.

        Raises
        ------
        CorpusFormatError
            The file is missing, not a regular file, or of another size.
        """
        actual = self.file_size(name)
        data = self.read_prefix(name, size) if actual == size else b""
        if actual != size or len(data) != size:
            raise CorpusFormatError(
                f"{self.location}/{name}: {actual} bytes, the manifest says {size}."
            )
        return data

    # -- optional capabilities, with the defaults of a store whose files are local --
    @property
    def local_directory(self) -> str | None:
        """The local directory holding every file in place (names are its direct
        children), or ``None``: files are fetched. Default: ``None``."""
        return None

    def release(self, name: str) -> None:
        """Drop the pin :meth:`local_path` took on ``name``.

        Default: nothing to release, a local file needs no pin.
        """
        del name

    def prefetch_files(self, names: Sequence[str]) -> None:
        """Start making ``names`` local in the background, in order; never blocks.

        Default: nothing to fetch, the files are already local.
        """
        del names

    def close(self) -> None:
        """Stop background work (prefetching) and drop its pins.

        Default: a local store runs no background work.
        """
        return

    @property
    def documents_type(self) -> type[ShardedDocuments]:
        """The reader class that :func:`~mixle.corpus.open_corpus` builds over this store.

        Default: :class:`ShardedDocuments`, which memory-maps :meth:`local_path` files
        in place.
        """
        return ShardedDocuments
