"""Where a corpus's files live: the one seam between the reader and storage.

:class:`ShardedDocuments` never opens a path itself. It asks a :class:`ShardStore`
for the manifest bytes, for the first bytes of an offsets file (headers are checked
on open without fetching whole files), for file sizes, and, when a shard is first
read, for a *local* path holding the complete file, which it then memory-maps. A
remote backend (fsspec URL + local cache) implements the same four methods and
registers itself in :data:`STORE_FACTORIES` under its URL schemes; nothing else in
the reader changes.

Stores must pickle as their location and options (no open handles, no bytes), so a
pickled reader reopens lazily in a DataLoader worker.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from mixle._file_checks import contained_path, open_regular, regular_size
from mixle.corpus.format.spec import MANIFEST_NAME
from mixle.errors import ArgumentError, ArgumentTypeError, CorpusFormatError, CorpusNotFoundError

__all__ = ["STORE_FACTORIES", "LocalStore", "ShardStore", "is_url", "open_store"]


def is_url(location: str) -> bool:
    """True for an fsspec URL (``s3://...``); ``file://`` and plain paths are local."""
    return "://" in location and not location.startswith("file://")


@runtime_checkable
class ShardStore(Protocol):
    """What the reader needs from storage. Implementations need not inherit.

    ``location`` and ``options`` reconstruct the store via :func:`open_store`; they
    are what a pickled reader carries. File names passed in are already checked by
    :func:`mixle.corpus.format.spec.check_file_name`.
    """

    @property
    def location(self) -> str: ...

    @property
    def options(self) -> Mapping[str, Any]: ...

    def read_manifest(self) -> bytes:
        """Return the bytes of ``manifest.json``; raise :class:`CorpusNotFoundError` if absent."""
        ...

    def read_prefix(self, name: str, size: int) -> bytes:
        """Return the first ``size`` bytes of file ``name`` (fewer if it is shorter)."""
        ...

    def file_size(self, name: str) -> int:
        """Return the size of file ``name`` in bytes; raise :class:`CorpusFormatError` if absent."""
        ...

    def local_path(self, name: str) -> str:
        """Return a local path holding the complete file ``name`` (fetching it if remote)."""
        ...


class LocalStore:
    """A corpus in a local directory: every file is already local."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    @property
    def location(self) -> str:
        return self.directory

    @property
    def options(self) -> Mapping[str, Any]:
        return {}

    def _path(self, name: str) -> str:
        return contained_path(self.directory, name)

    def read_manifest(self) -> bytes:
        path = self._path(MANIFEST_NAME)
        try:
            with open_regular(path, CorpusFormatError) as handle:
                return handle.read()
        except CorpusFormatError as exc:
            missing = exc.__cause__
            if not isinstance(missing, FileNotFoundError | NotADirectoryError):
                raise
            if not os.path.isdir(self.directory):
                raise CorpusNotFoundError(
                    f"no corpus at {self.directory}: not a directory."
                ) from missing
            raise CorpusNotFoundError(
                f"no corpus at {self.directory}: {MANIFEST_NAME} is missing "
                "(an interrupted write leaves no manifest)."
            ) from missing

    def read_prefix(self, name: str, size: int) -> bytes:
        path = self._path(name)
        try:
            with open_regular(path, CorpusFormatError) as handle:
                return handle.read(size)
        except OSError as exc:
            raise CorpusFormatError(f"{path}: cannot read ({exc.strerror or exc}).") from exc

    def file_size(self, name: str) -> int:
        return regular_size(self._path(name), CorpusFormatError)

    def local_path(self, name: str) -> str:
        return self._path(name)

    def __reduce__(self) -> tuple[Any, ...]:
        return (LocalStore, (self.directory,))


def _local_factory(location: str, **options: Any) -> ShardStore:
    if options:
        raise ArgumentError(f"a local corpus takes no storage options. Got {sorted(options)}.")
    if location.startswith("file://"):
        location = location[len("file://") :]
    return LocalStore(os.path.abspath(location))


#: URL scheme -> factory ``(location, **options) -> ShardStore``. ``""`` is a local
#: path. A remote backend adds its schemes here (e.g. ``"s3"``, ``"gs"``, ``"http"``).
STORE_FACTORIES: dict[str, Callable[..., ShardStore]] = {"": _local_factory, "file": _local_factory}


def open_store(location: Any, **options: Any) -> ShardStore:
    """Return the :class:`ShardStore` for ``location`` (a path or URL).

    Raises
    ------
    ArgumentTypeError
        ``location`` is not a string or path.
    ArgumentError
        The URL scheme has no registered backend.
    """
    if isinstance(location, ShardStore) and not isinstance(location, str):
        return location
    try:
        text = os.fspath(location)
    except TypeError as exc:
        raise ArgumentTypeError(
            f"`path` must be a str or os.PathLike. Got {type(location).__name__} instead."
        ) from exc
    if isinstance(text, bytes):
        raise ArgumentTypeError("`path` must be a str, not bytes.")
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    factory = STORE_FACTORIES.get(scheme)
    if factory is None:
        raise ArgumentError(
            f"no storage backend for {scheme}:// URLs (known: "
            f"{sorted(s for s in STORE_FACTORIES if s)}); see mixle.corpus remote support."
        )
    return factory(text, **options)
