"""The id column of an origins sidecar: one UTF-8 string per document (``--id-field``).

Stored (``docs/format.md`` section "Origins sidecar", version 2) as ``int64`` offsets
``offsets[0] = 0 <= offsets[1] <= … <= offsets[N]`` followed by the ids' UTF-8 bytes
back to back: document ``d``'s id is ``data[offsets[d]:offsets[d + 1]]``. An id is
read in O(1); :meth:`OriginIds.find` looks one up by scanning the column (numpy, no
document's tokens are read).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mixle.errors import CorpusFormatError

__all__ = ["OriginIds"]

#: Documents compared at once by :meth:`OriginIds.find` (bounds its memory).
_FIND_CHUNK = 1 << 16


@dataclass(frozen=True, slots=True)
class OriginIds:
    """Document ids: ``offsets`` (``int64``, one more than documents) into ``data``."""

    offsets: np.ndarray
    data: bytes

    @classmethod
    def of_strings(cls, ids: Sequence[str]) -> OriginIds:
        """The column of ``ids``, in document order."""
        encoded = [value.encode("utf-8") for value in ids]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(value) for value in encoded], out=offsets[1:])
        return cls(offsets, b"".join(encoded))

    @classmethod
    def joined(cls, parts: Sequence[OriginIds]) -> OriginIds:
        """The documents of ``parts`` one after the other."""
        if not parts:
            return cls.of_strings([])
        # Each part's data starts where the one before it ends.
        bases = np.cumsum([0] + [len(part.data) for part in parts[:-1]])
        shifted = [part.offsets[1:] + int(base) for part, base in zip(parts, bases, strict=True)]
        offsets = np.concatenate([np.zeros(1, dtype=np.int64), *shifted])
        return cls(offsets, b"".join(part.data for part in parts))

    @property
    def documents(self) -> int:
        """How many documents the column holds."""
        return self.offsets.shape[0] - 1

    def select(self, keep: np.ndarray) -> OriginIds:
        """The ids of the documents where the boolean mask ``keep`` is true."""
        lengths = np.diff(self.offsets)
        offsets = np.zeros(int(np.count_nonzero(keep)) + 1, dtype=np.int64)
        np.cumsum(lengths[keep], out=offsets[1:])
        column = np.frombuffer(self.data, dtype=np.uint8)
        return OriginIds(offsets, column[np.repeat(keep, lengths)].tobytes())

    def to_bytes(self) -> bytes:
        """The offsets (little-endian ``int64``) followed by the UTF-8 bytes."""
        return self.offsets.astype("<i8").tobytes() + self.data

    @classmethod
    def from_bytes(cls, data: bytes | memoryview, documents: int, where: str) -> OriginIds:
        """The column of ``documents`` ids from :meth:`to_bytes` output (all of ``data``).

        Raises
        ------
        CorpusFormatError
            ``data`` is too short, its offsets do not start at 0 and never decrease, or
            its last offset is not where ``data`` ends (names ``where``).
        """
        table = 8 * (documents + 1)
        if len(data) < table:
            raise CorpusFormatError(
                f"{where}: {len(data)} bytes of ids, shorter than the offsets of {documents} "
                "documents (truncated)."
            )
        offsets = np.frombuffer(data, dtype="<i8", count=documents + 1).astype(np.int64)
        if (
            offsets[0] != 0
            or np.any(offsets[1:] < offsets[:-1])
            or table + offsets[-1] != len(data)
        ):
            raise CorpusFormatError(
                f"{where}: its id offsets are not in order or do not end with the file."
            )
        return cls(offsets, bytes(data[table:]))

    def get(self, index: int, where: str) -> str:
        """The id of document ``index`` (``0 <= index < documents``).

        Raises
        ------
        CorpusFormatError
            The stored bytes are not UTF-8 (names ``where``).
        """
        start, end = int(self.offsets[index]), int(self.offsets[index + 1])
        try:
            return self.data[start:end].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorpusFormatError(
                f"{where}: the id of document {index} is not UTF-8 ({exc.reason})."
            ) from None

    def find(self, value: str) -> np.ndarray:
        """The indices (ascending ``int64``) of the documents whose id is ``value``: one
        scan of the column, comparing only the ids of ``value``'s length."""
        target = np.frombuffer(value.encode("utf-8"), dtype=np.uint8)
        lengths = np.diff(self.offsets)
        candidates = np.flatnonzero(lengths == target.shape[0])
        if target.shape[0] == 0 or candidates.shape[0] == 0:
            return candidates.astype(np.int64)
        column = np.frombuffer(self.data, dtype=np.uint8)
        found = []
        span = np.arange(target.shape[0], dtype=np.int64)
        for first in range(0, candidates.shape[0], _FIND_CHUNK):
            chunk = candidates[first : first + _FIND_CHUNK]
            window = column[self.offsets[chunk][:, None] + span]
            found.append(chunk[np.all(window == target, axis=1)])
        return np.concatenate(found).astype(np.int64)
