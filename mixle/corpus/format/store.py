"""The store contract: what the corpus reader needs from wherever a corpus lives.

:class:`~mixle.corpus.format.documents.ShardedDocuments` never opens a path itself.
It asks a :class:`ShardStore` for the manifest bytes, for the first bytes of an
offsets file (headers are checked on open without fetching whole files), for file
sizes, and, when a shard is first read, for a *local* path holding the complete
file, which it then memory-maps. Every method the package calls on a store is
declared here, for reading and for writing (publishing, ingest output, merge and
export write through the same store). What a backend can do is declared by four
capability flags, named after zarr's store ABC:

``supports_ranges``
    :meth:`ShardStore.read_range` / :meth:`ShardStore.read_ranges` fetch byte ranges
    (and :meth:`ShardStore.read_files` whole small files).
``supports_writes``
    :meth:`ShardStore.write_bytes`, :meth:`ShardStore.put_file` and
    :meth:`ShardStore.remove` store and delete files (each write is visible whole or
    not at all).
``supports_listing``
    :meth:`ShardStore.list_sizes` lists the files under a prefix.
``supports_server_side_copy``
    :meth:`ShardStore.copy` copies without moving the bytes through this machine.

A method whose flag is false raises :class:`~mixle.errors.UnsupportedStoreOperation`
(a ``NotImplementedError``). The optional reading capabilities (pinning, background
prefetch, closing, the :class:`~mixle.corpus.format.shard_loader.ShardLoader` the
reader is composed with) have defaults that are right for a local directory, so a
backend overrides only what it supports. Implementations live in
:mod:`mixle.corpus.storage` (local directory, fsspec remote, zarr); a backend of its
own is registered with :func:`mixle.corpus.register_backend` and checked with
:class:`mixle.testing.StoreContract`.

Stores must pickle as their location and options (no open handles, no bytes), so a
pickled reader reopens lazily in a DataLoader worker.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from mixle.corpus.format.shard_loader import MappedShards, ShardLoader
from mixle.errors import CorpusFormatError, UnsupportedStoreOperation

__all__ = ["ShardStore"]


class ShardStore(abc.ABC):
    """Where a corpus's files live. File names passed in are already checked by
    :func:`mixle.corpus.format.spec.check_file_name`.

    ``location`` and ``options`` reconstruct the store via
    :func:`mixle.corpus.storage.open.open_store`.
    """

    #: :meth:`read_range` and :meth:`read_ranges` are available.
    supports_ranges: ClassVar[bool] = False
    #: :meth:`write_bytes`, :meth:`put_file` and :meth:`remove` are available.
    supports_writes: ClassVar[bool] = False
    #: :meth:`list_sizes` is available.
    supports_listing: ClassVar[bool] = False
    #: :meth:`copy` copies without moving bytes through this machine.
    supports_server_side_copy: ClassVar[bool] = False

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

    def shard_loader(self) -> ShardLoader:
        """The strategy the reader obtains shards with (built once per reader).

        Default: :class:`~mixle.corpus.format.shard_loader.MappedShards`, which
        memory-maps :meth:`local_path` files in place.
        """
        return MappedShards(self)

    def exists(self, name: str) -> bool:
        """Whether a file ``name`` (``/``-separated, relative to the store) exists.

        Default: asks :meth:`file_size`, so every store answers it.
        """
        try:
            self.file_size(name)
        except (FileNotFoundError, ValueError):
            return False
        return True

    # -- capabilities a backend declares with its flags --------------------------------
    def _unsupported(self, operation: str, flag: str) -> UnsupportedStoreOperation:
        return UnsupportedStoreOperation(
            f"{self.location}: this store ({type(self).__name__}) does not support "
            f"{operation} ({flag} is False)."
        )

    def read_range(self, name: str, start: int, end: int, *, exact: bool = True) -> bytes:
        """Bytes ``[start, end)`` of ``name``; with ``exact``, exactly that many.

        Requires ``supports_ranges``.
        """
        raise self._unsupported("read_range", "supports_ranges")

    def read_ranges(
        self, names: Sequence[str], starts: Sequence[int], ends: Sequence[int]
    ) -> list[bytes]:
        """Several exact ranges at once (a backend may fetch them concurrently).

        Default: one :meth:`read_range` each. Requires ``supports_ranges``.
        """
        return [
            self.read_range(name, start, end)
            for name, start, end in zip(names, starts, ends, strict=True)
        ]

    def read_files(self, names: Sequence[str]) -> dict[str, bytes]:
        """``{name: content}`` of the files among ``names`` that exist, each read whole
        (missing ones are left out): the small records of ingest output and merge.

        Default: :meth:`file_size` and one :meth:`read_range` each (a backend may
        fetch them concurrently). Requires ``supports_ranges``.
        """
        found = {}
        for name in names:
            if self.exists(name):
                found[name] = self.read_range(name, 0, self.file_size(name))
        return found

    def write_bytes(self, name: str, data: bytes) -> None:
        """Store ``data`` as ``name``, visible whole or not at all; requires ``supports_writes``."""
        raise self._unsupported("write_bytes", "supports_writes")

    def put_file(self, local: str, name: str) -> None:
        """Store the local file ``local`` as ``name``, visible whole or not at all.

        Default: :meth:`write_bytes` of the file's bytes. Requires ``supports_writes``.
        """
        if not self.supports_writes:
            raise self._unsupported("put_file", "supports_writes")
        with open(local, "rb") as handle:
            self.write_bytes(name, handle.read())

    def remove(self, name: str) -> None:
        """Remove the file ``name`` if it exists; requires ``supports_writes``."""
        raise self._unsupported("remove", "supports_writes")

    def list_sizes(self, prefix: str = "") -> dict[str, int]:
        """``{name relative to prefix: size}`` of every file under ``prefix`` (``{}`` if none).

        Requires ``supports_listing``.
        """
        raise self._unsupported("list_sizes", "supports_listing")

    def copy(self, source: str, target: str, *, origin: ShardStore | None = None) -> None:
        """Copy file ``source`` to ``target`` (replacing ``target``) without moving the
        bytes through this machine.

        ``source`` is a file of ``origin`` (default: this store), which must be a store
        of the same backend (a merge copies the shards of its inputs). Requires
        ``supports_server_side_copy``.
        """
        raise self._unsupported("copy", "supports_server_side_copy")
