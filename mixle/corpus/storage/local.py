"""LocalStore: a corpus in a local directory, memory-mapped in place."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from mixle.corpus.format.spec import MANIFEST_NAME
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
        return os.path.join(self.directory, name)

    def read_manifest(self) -> bytes:
        path = self._path(MANIFEST_NAME)
        try:
            with open(path, "rb") as handle:
                return handle.read()
        except FileNotFoundError as exc:
            if not os.path.isdir(self.directory):
                raise CorpusNotFoundError(
                    f"no corpus at {self.directory}: not a directory."
                ) from exc
            raise CorpusNotFoundError(
                f"no corpus at {self.directory}: {MANIFEST_NAME} is missing "
                "(an interrupted write leaves no manifest)."
            ) from exc
        except IsADirectoryError as exc:
            raise CorpusFormatError(f"{path} is a directory, expected a JSON file.") from exc

    def read_prefix(self, name: str, size: int) -> bytes:
        path = self._path(name)
        try:
            with open(path, "rb") as handle:
                return handle.read(size)
        except OSError as exc:
            raise CorpusFormatError(f"{path}: cannot read ({exc.strerror or exc}).") from exc

    def file_size(self, name: str) -> int:
        path = self._path(name)
        try:
            return os.stat(path).st_size
        except OSError as exc:
            raise CorpusFormatError(f"{path}: shard file missing ({exc.strerror or exc}).") from exc

    def local_path(self, name: str) -> str:
        return self._path(name)

    def __reduce__(self) -> tuple[Any, ...]:
        return (LocalStore, (self.directory,))
