"""LocalStore: a corpus in a local directory, memory-mapped in place."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Mapping, Sequence
from typing import Any

from mixle._file_checks import contained_path, open_regular, read_regular, regular_size
from mixle._io import atomic_write_bytes, link_or_copy, rename_durably, temporary_name
from mixle.corpus.format.shard_loader import map_file
from mixle.corpus.format.spec import MANIFEST_NAME, MAX_MANIFEST_BYTES
from mixle.corpus.format.store import ShardStore
from mixle.errors import ArgumentError, CorpusFormatError, CorpusNotFoundError, UnsafePathError

__all__ = ["LocalStore", "local_sizes"]


class LocalStore(ShardStore):
    """A corpus in a local directory: every file is already local.

    Writes are durable renames of complete temporary files (:mod:`mixle._io`), so a
    file appears whole or not at all; ``copy`` hard-links where it can.
    """

    supports_ranges = True
    supports_writes = True
    supports_listing = True
    supports_server_side_copy = True

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

    def _tree_path(self, name: str) -> str:
        """``directory/name`` for a ``/``-separated relative ``name`` (writes, listing)."""
        parts = name.split("/")
        if name.startswith("/") or any(part in ("", ".", "..") for part in parts):
            raise UnsafePathError(f"{name!r} is not a relative path inside {self.directory}.")
        return os.path.join(self.directory, *parts)

    def read_manifest(self) -> bytes:
        path = self._path(MANIFEST_NAME)
        try:
            return read_regular(path, CorpusFormatError, MAX_MANIFEST_BYTES)
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

    def read_file(self, name: str, size: int) -> Any:
        """The file ``name`` of exactly ``size`` bytes, memory-mapped (no private copy)."""
        mapping = map_file(self._path(name), size)
        return b"" if mapping is None else mapping

    @property
    def local_directory(self) -> str:
        return self.directory

    def file_size(self, name: str) -> int:
        return regular_size(self._path(name), CorpusFormatError)

    def local_path(self, name: str) -> str:
        return self._path(name)

    def read_range(self, name: str, start: int, end: int, *, exact: bool = True) -> bytes:
        if end <= start:
            return b""
        path = self._path(name)
        with open_regular(path, CorpusFormatError) as handle:
            handle.seek(start)
            data = handle.read(end - start)
        if exact and len(data) != end - start:
            raise CorpusFormatError(
                f"{path}: range [{start}, {end}) holds {len(data)} bytes (file truncated)."
            )
        return data

    def read_files(self, names: Sequence[str]) -> dict[str, bytes]:
        """The regular files among ``names`` (``/``-separated) that exist, read whole."""
        found = {}
        for name in names:
            try:
                found[name] = read_regular(self._tree_path(name), CorpusFormatError)
            except CorpusFormatError as exc:
                if not isinstance(exc.__cause__, FileNotFoundError | NotADirectoryError):
                    raise
        return found

    def write_bytes(self, name: str, data: bytes) -> None:
        target = self._tree_path(name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        atomic_write_bytes(target, data, temporary=temporary_name(target, unique=True))

    def put_file(self, local: str, name: str) -> None:
        target = self._tree_path(name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        temporary = temporary_name(target, unique=True)
        try:
            shutil.copyfile(local, temporary)
            rename_durably(temporary, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise

    def exists(self, name: str) -> bool:
        return os.path.exists(self._tree_path(name))

    def remove(self, name: str) -> None:
        path = self._tree_path(name)
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            os.unlink(path)

    def list_sizes(self, prefix: str = "") -> dict[str, int]:
        return local_sizes(self._tree_path(prefix) if prefix else self.directory)

    def copy(self, source: str, target: str, *, origin: ShardStore | None = None) -> None:
        """Hard-link (or, where links are not allowed, copy) ``source`` of ``origin``
        (default this store, else another local directory) to ``target``."""
        where = self if origin is None else origin
        if not isinstance(where, LocalStore):
            raise ArgumentError(
                f"{where.location} is not a local directory: {self.directory} cannot copy from it."
            )
        link_or_copy(where._tree_path(source), self._tree_path(target))

    def __reduce__(self) -> tuple[Any, ...]:
        return (LocalStore, (self.directory,))


def local_sizes(base: str) -> dict[str, int]:
    """``{path relative to base: size}`` of every file under ``base`` (``scandir``: no
    file is opened; ``{}`` when ``base`` does not exist)."""
    sizes: dict[str, int] = {}
    pending = [""]
    while pending:
        relative = pending.pop()
        try:
            entries = list(os.scandir(os.path.join(base, relative)))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            name = f"{relative}/{entry.name}" if relative else entry.name
            if entry.is_dir(follow_symlinks=False):
                pending.append(name)
            else:
                sizes[name] = entry.stat(follow_symlinks=False).st_size
    return sizes
