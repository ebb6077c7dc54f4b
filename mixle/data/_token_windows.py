"""Window assembly over the concatenated token stream of a document sequence.

The *stream* is ``documents[0] ++ [boundary] ++ documents[1] ++ ... ++ documents[-1]``
(the boundary id only when one is given, and only *between* documents). Window ``i``
is ``stream[i : i + block]`` with target ``stream[i + block]``. Positions are resolved
with prefix sums over the document lengths, so reading a window touches only the
documents it overlaps, whichever shard they live in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mixle._arrays import in_first_seen_order
from mixle._checks import as_token_ids
from mixle.data._documents import (
    DocumentSource,
    RangeReadableSource,
    range_reader,
    supports_prefetch,
)
from mixle.errors import ArgumentError, TokenIdError

__all__ = ["TokenWindows", "checked_document"]


def checked_document(
    documents: Sequence[Any] | DocumentSource, index: int, length: int
) -> np.ndarray:
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


# Below this many documents, indexing one by one beats a batched ``take`` call's setup.
_TAKE_MIN = 64

# Integer dtypes whose every value copies exactly into int64 (native and little-endian).
_EXACT_DTYPES = frozenset(
    np.dtype(name).newbyteorder(order)
    for name in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32")
    for order in ("=", "<", ">")
)


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
        self, documents: DocumentSource, lengths: np.ndarray, block: int, boundary_id: int | None
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
        dtype = documents.dtype
        self._trusted = dtype is not None and (
            dtype.kind == "i" or (dtype.kind == "u" and dtype.itemsize < 8)
        )
        # Optional capability: read_tokens(a, b) returns tokens a..b of the plain
        # concatenation of all documents (no boundaries) in one call, so a window costs
        # one slice instead of one per document it overlaps.
        self._ranges: RangeReadableSource | None = range_reader(documents)
        self._supports_prefetch = supports_prefetch(documents)

    def documents_of(self, window_starts: np.ndarray) -> list[int]:
        """Indices of the documents the windows at ``window_starts`` overlap.

        In the order they will be read, each once (vectorised).
        """
        if window_starts.shape[0] == 0:
            return []
        # Sorted queries walk the prefix sums in one direction (far fewer cache misses on
        # a large corpus); the results are put back in read order.
        order = np.argsort(window_starts)
        ordered = window_starts[order]
        first = np.empty_like(window_starts)
        last = np.empty_like(window_starts)
        first[order] = np.searchsorted(self._starts, ordered, side="right") - 1
        last[order] = np.searchsorted(self._starts, ordered + self.block, side="right") - 1
        docs = _expand(first, last + 1)[1]
        return in_first_seen_order(docs).tolist()

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

    def _concatenate_pieces(self, first: np.ndarray, stop: np.ndarray) -> np.ndarray:
        """``stream[first[r]:stop[r]]`` for every run, concatenated, as one int64 array.

        Plans every document piece (and boundary) vectorised, slices each overlapped
        document once, and converts all pieces to int64 in a single ``np.concatenate``.
        """
        starts = self._starts
        doc_first = np.searchsorted(starts, first, side="right") - 1
        doc_last = np.searchsorted(starts, stop - 1, side="right") - 1
        run, docs = _expand(doc_first, doc_last + 1)
        doc_start = starts[docs]
        doc_stop = doc_start + self._lengths[docs]
        run_first, run_stop = first[run], stop[run]
        low = np.maximum(doc_start, run_first) - doc_start
        high = np.minimum(doc_stop, run_stop) - doc_start
        keep = high > low
        wanted = docs[keep].tolist()
        arrays = self._fetch(wanted)
        if not self._trusted:
            lengths = self._lengths[docs[keep]].tolist()
            arrays = [
                checked_document(self.documents, doc, length)
                for doc, length in zip(wanted, lengths, strict=True)
            ]
        pieces = [
            tokens[a:b]
            for tokens, a, b in zip(arrays, low[keep].tolist(), high[keep].tolist(), strict=True)
        ]
        if self.boundary_id is not None:
            # The boundary after document d sits at stream position doc_stop[d]; put
            # each one right after its document's piece.
            has = (docs < self._lengths.shape[0] - 1) & (doc_stop >= run_first)
            has &= doc_stop < run_stop
            if has.any():
                boundary = np.array([self.boundary_id], dtype=np.int64)
                pieces_iter = iter(pieces)
                pieces = []
                for kept, bounded in zip(keep.tolist(), has.tolist(), strict=True):
                    if kept:
                        pieces.append(next(pieces_iter))
                    if bounded:
                        pieces.append(boundary)
        return np.concatenate(pieces, dtype=np.int64)

    def _fetch(self, docs: list[int]) -> list[Any]:
        documents = self.documents
        if len(docs) >= _TAKE_MIN:
            return list(documents.take(docs))
        return [documents[d] for d in docs]

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
        assert self._ranges is not None
        read_tokens = self._ranges.read_tokens
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

    def _read_each(self, window_starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One ``read_tokens`` call per window, copied straight into its output row.

        Without boundary ids a window is one contiguous token range, so no planning,
        merging or final gather is needed: the cheapest path, used whenever it applies.
        """
        assert self._ranges is not None
        read_tokens = self._ranges.read_tokens
        block = self.block
        span = block + 1
        context = np.empty((window_starts.shape[0], block), dtype=np.int64)
        target = np.empty(window_starts.shape[0], dtype=np.int64)
        for row, start in enumerate(window_starts.tolist()):
            chunk = read_tokens(start, start + span)
            if (
                not isinstance(chunk, np.ndarray)
                or chunk.dtype not in _EXACT_DTYPES
                or chunk.shape != (span,)
            ):
                chunk = _safe_chunk(chunk, start, start + span)
            context[row] = chunk[:block]
            target[row] = chunk[block]
        return context, target

    def _read_scattered(self, window_starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each window's document pieces, in window order, converted in one concatenate.

        For windows that rarely overlap (a shuffled batch): no sorting, merging or final
        gather; the pieces are planned vectorised and each costs one slice.
        """
        block = self.block
        span = block + 1
        starts, lengths = self._starts, self._lengths
        first = np.searchsorted(starts, window_starts, side="right") - 1
        last = np.searchsorted(starts, window_starts + block, side="right") - 1
        window, docs = _expand(first, last + 1)
        # Clip every (window, document) pair to the window's span, vectorised.
        window_first = window_starts[window]
        doc_start = starts[docs]
        doc_stop = doc_start + lengths[docs]
        low = np.maximum(window_first, doc_start) - doc_start
        high = np.minimum(window_first + span, doc_stop) - doc_start
        boundary = self.boundary_id
        if boundary is None:
            plan = [
                (doc, a, b)
                for doc, a, b in zip(docs.tolist(), low.tolist(), high.tolist(), strict=True)
                if b > a
            ]
        else:
            # The boundary after document d (not the last) sits at stream position
            # doc_stop[d]; it belongs to the window when that lies inside its span.
            bounded = (docs < lengths.shape[0] - 1) & (doc_stop >= window_first)
            bounded &= doc_stop < window_first + span
            plan = []  # (document, low, high); document -1 stands for a boundary token
            for doc, a, b, has in zip(
                docs.tolist(), low.tolist(), high.tolist(), bounded.tolist(), strict=True
            ):
                if b > a:
                    plan.append((doc, a, b))
                if has:
                    plan.append((-1, 0, 1))
        arrays = iter(self._fetch([doc for doc, _, _ in plan if doc >= 0]))
        marker = np.array([0 if boundary is None else boundary], dtype=np.int64)
        pieces = []
        for doc, a, b in plan:
            if doc < 0:
                pieces.append(marker)
                continue
            tokens = next(arrays)
            if not self._trusted:
                tokens = checked_document(self.documents, doc, int(lengths[doc]))
            pieces.append(tokens[a:b])
        rows = np.concatenate(pieces, dtype=np.int64).reshape(-1, span)
        return np.ascontiguousarray(rows[:, :block]), rows[:, block].copy()

    def read(
        self, window_starts: np.ndarray, *, scattered: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(context (m, block), next_tokens (m,))`` int64 for the given starts.

        Without ``read_tokens``, windows are grouped into maximal runs of overlapping
        or touching spans; each run is copied once into one int64 buffer (one slice per
        overlapped document piece) and the windows are gathered from that buffer.
        ``scattered=True`` (a shuffled batch, whose windows rarely overlap) reads each
        window's pieces directly instead, skipping the grouping. Both give the same
        result; only the cost differs.
        """
        span = self.block + 1
        count = window_starts.shape[0]
        if count == 0:
            return np.empty((0, self.block), dtype=np.int64), np.empty(0, dtype=np.int64)
        if self._ranges is not None and self.boundary_id is None:
            return self._read_each(window_starts)
        if scattered and self._ranges is None:
            return self._read_scattered(window_starts)
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
        if self._ranges is None:
            buffer = self._concatenate_pieces(run_first, run_stop)
        else:
            buffer = np.empty(int(run_base[-1] + run_sizes[-1]), dtype=np.int64)
            before = self._boundaries_before(run_first)
            boundary_dest = (
                np.empty(0, dtype=np.int64)
                if self.boundary_id is None
                else self._boundary_dest(run_first, run_stop, run_base, before)
            )
            self._copy_ranges(run_first, run_stop, run_base, buffer, before, boundary_dest)
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
        """Pass the documents of ``window_starts`` to ``documents.prefetch`` (if it reads ahead)."""
        if self._supports_prefetch:
            self.documents.prefetch(self.documents_of(window_starts))
