"""A lazy ``Sequence`` of documents over ``np.memmap`` files, for out-of-core tests.

Stands in for ``mixle.corpus.ShardedDocuments`` until it lands: documents are views of
one memory-mapped token file cut by an offsets file; only paths are pickled, so it works
in spawned DataLoader workers; it offers the optional ``lengths``, ``fingerprint`` and
``prefetch`` capabilities and records the prefetch hints it receives.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, overload

import numpy as np


def write_memmap_corpus(
    directory: Path, documents: Sequence[np.ndarray], dtype: str = "uint16"
) -> MemmapDocuments:
    directory.mkdir(parents=True, exist_ok=True)
    lengths = np.array([len(d) for d in documents], dtype=np.int64)
    offsets = np.zeros(len(documents) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.memmap(
        directory / "tokens.bin", dtype=dtype, mode="w+", shape=(max(int(offsets[-1]), 1),)
    )
    for index, document in enumerate(documents):
        tokens[offsets[index] : offsets[index + 1]] = document
    tokens.flush()
    del tokens
    np.save(directory / "offsets.npy", offsets)
    return MemmapDocuments(directory, dtype)


class MemmapDocuments(Sequence[np.ndarray]):
    def __init__(self, directory: Path, dtype: str) -> None:
        self.directory = Path(directory)
        self.dtype = np.dtype(dtype)
        self._offsets = np.load(self.directory / "offsets.npy")
        self._tokens: np.memmap | None = None
        self.prefetched: list[list[int]] = []
        self.reads = 0
        # ("read" | "hint", document index) in the order they happened.
        self.events: list[tuple[str, int]] = []

    def __getstate__(self) -> dict[str, Any]:
        return {"directory": self.directory, "dtype": self.dtype}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["directory"], state["dtype"])  # type: ignore[misc]

    def _open(self) -> np.memmap:
        if self._tokens is None:
            self._tokens = np.memmap(self.directory / "tokens.bin", dtype=self.dtype, mode="r")
        return self._tokens

    def __len__(self) -> int:
        return len(self._offsets) - 1

    @overload
    def __getitem__(self, index: int) -> np.ndarray: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[np.ndarray]: ...
    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            raise TypeError("slicing would copy many documents; index one at a time")
        index = int(index)
        if not 0 <= index < len(self):
            raise IndexError(index)
        self.reads += 1
        self.events.append(("read", index))
        return self._open()[self._offsets[index] : self._offsets[index + 1]]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self._offsets)

    @property
    def fingerprint(self) -> str:
        digest = hashlib.sha256(self._offsets.tobytes())
        digest.update(np.asarray(self._open()).tobytes())
        return digest.hexdigest()

    def take(self, indices: Sequence[int]) -> list[np.ndarray]:
        return [self[index] for index in indices]

    def prefetch(self, indices: Sequence[int]) -> None:
        self.prefetched.append(list(indices))
        self.events.extend(("hint", int(index)) for index in indices)
