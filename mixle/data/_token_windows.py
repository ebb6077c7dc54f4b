"""Window assembly over the concatenated token stream of a document sequence.

The *stream* is ``documents[0] ++ [boundary] ++ documents[1] ++ ... ++ documents[-1]``
(the boundary id only when one is given, and only *between* documents). Window ``i``
is ``stream[i : i + block]`` with target ``stream[i + block]``. Positions are resolved
with prefix sums over the document lengths, so reading a window touches only the
documents it overlaps, whichever shard they live in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mixle._checks import as_token_ids
from mixle.data._documents import prefetch_hint
from mixle.errors import ArgumentError, TokenIdError

__all__ = ["TokenWindows", "checked_document"]


def checked_document(documents: Sequence[Any], index: int, length: int) -> np.ndarray:
    """Return ``documents[index]`` as a 1-D integer array whose values copy exactly to int64.

    Signed integer arrays and unsigned ones of up to 32 bits are returned as they are
    (the common case, no per-token work); anything else (floats, uint64, lists) is
    validated by :func:`mixle._checks.as_token_ids`, naming the document and position.

    Raises
    ------
    TokenIdError
        A token id is fractional, non-finite or outside int64.
    ArgumentError
        The document's length differs from ``length`` (its entry in ``lengths``).
    """
    doc = documents[index]
    if isinstance(doc, list | tuple) and any(isinstance(v, bool | np.bool_) for v in doc):
        # np.asarray([0, True]) would pass the bool as the id 1.
        raise TokenIdError(f"document {index} holds a bool where token ids are expected.")
    if not isinstance(doc, np.ndarray) or not (
        doc.dtype.kind == "i" or (doc.dtype.kind == "u" and doc.dtype.itemsize < 8)
    ):
        doc = as_token_ids(doc, f"document {index}")
    if doc.ndim != 1 or doc.shape[0] != length:
        raise ArgumentError(
            f"document {index} has shape {doc.shape}, but the document lengths say {length} tokens."
        )
    return doc


def _expand(low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate ``range(low[i], high[i])`` for all ``i``: return ``(i, value)`` arrays."""
    counts = high - low
    owner = np.repeat(np.arange(low.shape[0]), counts)
    ends = np.cumsum(counts)
    values = np.arange(int(ends[-1]) if ends.size else 0) - np.repeat(ends - counts, counts)
    return owner, values + low[owner]


def _safe_chunk(chunk: Any, start: int, stop: int) -> np.ndarray:
    array = np.asarray(chunk)
    if array.shape != (stop - start,):
        raise ArgumentError(
            f"`documents.read_tokens({start}, {stop})` returned shape {array.shape}; "
            f"expected ({stop - start},)."
        )
    if array.dtype.kind == "i" or (array.dtype.kind == "u" and array.dtype.itemsize < 8):
        return array
    return as_token_ids(array, f"tokens {start}..{stop} of `documents`")


class TokenWindows:
    """Random access to the windows of the token stream of ``documents``.

    Parameters
    ----------
    documents
        Any sequence of 1-D integer arrays (indexed, never copied whole).
    lengths
        int64 document lengths, ``lengths[i] == len(documents[i])``.
    block
        Window length.
    boundary_id
        Token inserted between consecutive documents, or ``None``.

    Notes
    -----
    Holds one int64 prefix-sum array (``len(documents) + 1`` entries). Reading ``m``
    windows costs O(m log m + m log len(documents)) vectorised planning, one slice
    copy per overlapped document piece (fetched with ``documents.take`` when offered)
    into one int64 buffer of at most ``m * (block + 1)`` tokens, and one gather.
    """

    def __init__(
        self, documents: Sequence[Any], lengths: np.ndarray, block: int, boundary_id: int | None
    ) -> None:
        self.documents = documents
        self.block = block
        self.boundary_id = boundary_id
        self._lengths = lengths
        count = lengths.shape[0]
        starts = np.zeros(count + 1, dtype=np.int64)
        # int64 before summing: int32 lengths would overflow past 2**31 tokens.
        np.cumsum(lengths, dtype=np.int64, out=starts[1:])
        if boundary_id is not None and count > 1:
            starts[1:] += np.arange(1, count + 1, dtype=np.int64)
            starts[-1] -= 1  # no boundary after the last document
        self._starts = starts
        self.num_tokens = int(starts[-1])
        self.num_windows = max(self.num_tokens - block, 0)
        # A corpus that declares an integer dtype of up to 32 bits (or int64) holds only
        # ids that copy exactly into int64: its documents need no per-read check.
        dtype = getattr(documents, "dtype", None)
        self._trusted = isinstance(dtype, np.dtype) and (
            dtype.kind == "i" or (dtype.kind == "u" and dtype.itemsize < 8)
        )
        # Optional capability: read_tokens(a, b) returns tokens a..b of the plain
        # concatenation of all documents (no boundaries) in one call, so a window costs
        # one slice instead of one per document it overlaps.
        read_tokens = getattr(documents, "read_tokens", None)
        self._read_tokens: Callable[[int, int], Any] | None = (
            read_tokens if callable(read_tokens) else None
        )

    def documents_of(self, window_starts: np.ndarray) -> list[int]:
        """Indices of the documents the windows at ``window_starts`` overlap.

        In the order they will be read, each once (vectorised).
        """
        if window_starts.shape[0] == 0:
            return []
        first = np.searchsorted(self._starts, window_starts, side="right") - 1
        last = np.searchsorted(self._starts, window_starts + self.block, side="right") - 1
        docs = _expand(first, last + 1)[1]
        _, where = np.unique(docs, return_index=True)
        return docs[np.sort(where)].tolist()

    def _boundaries_before(self, positions: np.ndarray) -> np.ndarray:
        """Number of boundary tokens at stream positions ``< positions``."""
        if self.boundary_id is None:
            return np.zeros_like(positions)
        # The boundary after document k sits at starts[k + 1] - 1, for k < count - 1.
        return np.searchsorted(self._starts[1:-1], positions, side="right")

    def _boundary_dest(
        self, first: np.ndarray, stop: np.ndarray, base: np.ndarray, before: np.ndarray
    ) -> np.ndarray:
        """Buffer positions of the boundary tokens inside the runs ``[first, stop)``."""
        after = self._boundaries_before(stop)
        run, k = _expand(before, after)
        return base[run] - first[run] + self._starts[k + 1] - 1

    def _copy_pieces(
        self, first: np.ndarray, stop: np.ndarray, base: np.ndarray, buffer: np.ndarray
    ) -> None:
        """Copy the document pieces of the runs ``[first, stop)`` (one slice per piece)."""
        starts = self._starts
        doc_first = np.searchsorted(starts, first, side="right") - 1
        doc_last = np.searchsorted(starts, stop - 1, side="right") - 1
        run, docs = _expand(doc_first, doc_last + 1)
        doc_start = starts[docs]
        low = np.maximum(doc_start, first[run])
        high = np.minimum(doc_start + self._lengths[docs], stop[run])
        keep = high > low
        docs, doc_start, run = docs[keep], doc_start[keep], run[keep]
        low, high = low[keep], high[keep]
        dest = (base[run] - first[run] + low).tolist()
        doc_list = docs.tolist()
        take = getattr(self.documents, "take", None)
        arrays = take(doc_list) if callable(take) else [self.documents[d] for d in doc_list]
        lengths = self._lengths[docs].tolist()
        for doc, tokens, length, a, b, at in zip(
            doc_list,
            arrays,
            lengths,
            (low - doc_start).tolist(),
            (high - doc_start).tolist(),
            dest,
            strict=True,
        ):
            if not self._trusted:
                tokens = checked_document(self.documents, doc, length)
            buffer[at : at + b - a] = tokens[a:b]

    def _copy_ranges(
        self,
        first: np.ndarray,
        stop: np.ndarray,
        base: np.ndarray,
        buffer: np.ndarray,
        before: np.ndarray,
        boundary_dest: np.ndarray,
    ) -> None:
        """Copy the runs with ``documents.read_tokens``: one call per run, any document count."""
        read_tokens = self._read_tokens
        assert read_tokens is not None
        token_first = (first - before).tolist()
        token_stop = (stop - self._boundaries_before(stop)).tolist()
        chunks = [
            _safe_chunk(read_tokens(a, b), a, b)
            for a, b in zip(token_first, token_stop, strict=True)
        ]
        if boundary_dest.size == 0:
            for chunk, at in zip(chunks, base.tolist(), strict=True):
                buffer[at : at + chunk.shape[0]] = chunk
        else:
            is_token = np.ones(buffer.shape[0], dtype=bool)
            is_token[boundary_dest] = False
            buffer[is_token] = np.concatenate(chunks)

    def read(self, window_starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(context (m, block), next_tokens (m,))`` int64 for the given starts.

        Windows are grouped into maximal runs of overlapping or touching spans; each
        run is copied once into one int64 buffer (one slice copy per overlapped
        document piece) and the windows are gathered from that buffer.
        """
        span = self.block + 1
        count = window_starts.shape[0]
        if count == 0:
            return np.empty((0, self.block), dtype=np.int64), np.empty(0, dtype=np.int64)
        order = np.argsort(window_starts, kind="stable")
        ordered = window_starts[order]
        new_run = np.empty(count, dtype=bool)
        new_run[0] = True
        np.greater(ordered[1:], ordered[:-1] + span, out=new_run[1:])
        run_of = np.cumsum(new_run) - 1
        heads = np.flatnonzero(new_run)
        run_first = ordered[heads]
        run_stop = ordered[np.append(heads[1:] - 1, count - 1)] + span
        run_sizes = run_stop - run_first
        run_base = np.zeros(heads.shape[0], dtype=np.int64)
        np.cumsum(run_sizes[:-1], out=run_base[1:])
        buffer = np.empty(int(run_base[-1] + run_sizes[-1]), dtype=np.int64)

        before = self._boundaries_before(run_first)
        boundary_dest = (
            np.empty(0, dtype=np.int64)
            if self.boundary_id is None
            else self._boundary_dest(run_first, run_stop, run_base, before)
        )
        if self._read_tokens is not None:
            self._copy_ranges(run_first, run_stop, run_base, buffer, before, boundary_dest)
        else:
            self._copy_pieces(run_first, run_stop, run_base, buffer)
        boundary = self.boundary_id
        if boundary is not None and boundary_dest.size:
            buffer[boundary_dest] = boundary

        local = np.empty(count, dtype=np.int64)
        local[order] = run_base[run_of] + (ordered - run_first[run_of])
        # Row i of `windows` is buffer[i : i + block] (a strided view, built directly
        # because sliding_window_view's argument handling costs more than the gather).
        windows = np.ndarray(
            (buffer.shape[0] - self.block + 1, self.block),
            dtype=np.int64,
            buffer=buffer,
            strides=(buffer.itemsize, buffer.itemsize),
        )
        return windows[local], buffer[local + self.block]

    def prefetch(self, window_starts: np.ndarray) -> None:
        """Pass the documents of ``window_starts`` to ``documents.prefetch`` if it exists."""
        if callable(getattr(self.documents, "prefetch", None)):
            prefetch_hint(self.documents, self.documents_of(window_starts))
