"""A loaded epoch plan whose bytes are checked a chunk at a time, on first read.

Version 3 plan files (:mod:`mixle.corpus.storage.plan_cache`) split each array into
chunks of ``chunk_bytes`` bytes (the last one shorter) and keep one CRC-32 per chunk in a
table after the arrays; the header records the table's own CRC-32. Opening a file costs
O(header + chunks) (the table, 4 bytes per chunk); :meth:`StoredPlan.check` verifies the
chunks that hold a range of an array the first time it is read (a bitset remembers the
verified ones), so a restart costs O(what it reads), however large the plan.
:meth:`StoredPlan.check_all` verifies every chunk (a full ``mixle verify``-style pass).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Mapping

import numpy as np

from mixle.errors import CorpusFormatError

__all__ = ["StoredPlan"]


class StoredPlan(Mapping[str, np.ndarray]):
    """The arrays of one plan file (read-only views of its ``mmap``) and their chunk CRCs.

    Reading an array's elements without :meth:`check` reads unverified bytes: the data
    layer calls ``check(name, start, stop)`` (the
    :class:`~mixle.data._plan_store.CheckedArrays` contract) before every range it uses,
    and rebuilds the plan (and rewrites the file) when a check raises.

    Parameters
    ----------
    path
        The plan file (named in errors).
    arrays
        Each array as a read-only 1-or-more-dimensional view of the file.
    chunk_bytes
        Chunk size in bytes (a positive multiple of every array's item size).
    first_chunks
        Each array's first entry in ``crcs`` (its chunks are consecutive entries).
    crcs
        The chunk table: one CRC-32 per chunk, arrays in ``first_chunks`` order.
    """

    def __init__(
        self,
        path: str,
        arrays: Mapping[str, np.ndarray],
        chunk_bytes: int,
        first_chunks: Mapping[str, int],
        crcs: np.ndarray,
    ) -> None:
        self.path = path
        self._arrays = dict(arrays)
        self.chunk_bytes = chunk_bytes
        self._first_chunks = dict(first_chunks)
        self._crcs = crcs
        self._verified = np.zeros(len(crcs), dtype=bool)

    def __getitem__(self, name: str) -> np.ndarray:
        return self._arrays[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._arrays)

    def __len__(self) -> int:
        return len(self._arrays)

    @property
    def verified_chunks(self) -> int:
        """How many chunks have been verified so far (of ``len(crcs)``)."""
        return int(np.count_nonzero(self._verified))

    def check(self, name: str, start: int, stop: int) -> None:
        """Verify the chunks that hold elements ``[start, stop)`` (flat, clipped to the
        array) of array ``name``, each once per :class:`StoredPlan`.

        Raises
        ------
        CorpusFormatError
            A chunk's bytes do not match its CRC-32 (the file changed after it was
            written); the message names the file, the array and the chunk.
        """
        array = self._arrays[name]
        flat = array.reshape(-1)
        start, stop = max(start, 0), min(stop, flat.shape[0])
        if start >= stop:
            return
        per_chunk = self.chunk_bytes // array.dtype.itemsize
        first = self._first_chunks[name]
        low, high = start // per_chunk, (stop - 1) // per_chunk + 1
        pending = np.flatnonzero(~self._verified[first + low : first + high])
        for chunk in (pending + low).tolist():
            piece = flat[chunk * per_chunk : (chunk + 1) * per_chunk]
            if zlib.crc32(piece.data.cast("B")) != int(self._crcs[first + chunk]):
                begin = chunk * self.chunk_bytes
                raise CorpusFormatError(
                    f"epoch-plan file {self.path}: chunk {chunk} of array `{name}` (bytes "
                    f"{begin}-{begin + piece.nbytes} of the array) fails its CRC-32 check: "
                    "the file changed after it was written."
                )
            self._verified[first + chunk] = True

    def check_all(self) -> None:
        """Verify every chunk of every array (O(file)); raises as :meth:`check` does."""
        for name, array in self._arrays.items():
            self.check(name, 0, array.size)

    def __repr__(self) -> str:
        return f"StoredPlan({self.path!r}, {sorted(self._arrays)})"
