"""LocalStore: a corpus in a local directory, memory-mapped in place."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from mixle._file_checks import contained_path, open_regular, read_regular, regular_size
from mixle.corpus.format.shard_loader import map_file
from mixle.corpus.format.spec import MANIFEST_NAME, MAX_MANIFEST_BYTES
from mixle.corpus.format.store import ShardStore
from mixle.errors import CorpusFormatError, CorpusNotFoundError

__all__ = ["LocalStore"]


class LocalStore(ShardStore):
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

    def __reduce__(self) -> tuple[Any, ...]:
        return (LocalStore, (self.directory,))
