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
    windows costs one ``argsort`` of their starts, one read per overlapped document
    piece into one int64 buffer of at most ``m * (block + 1)`` tokens, and one gather.
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
        self._offsets = np.arange(block, dtype=np.int64)

    def documents_of(self, window_starts: np.ndarray) -> list[int]:
        """Indices of the documents that the windows at ``window_starts`` overlap, in order."""
        first = np.searchsorted(self._starts, window_starts, side="right") - 1
        last = np.searchsorted(self._starts, window_starts + self.block, side="right") - 1
        out: dict[int, None] = {}  # ordered and without repeats
        for a, b in zip(first.tolist(), last.tolist(), strict=True):
            out.update(dict.fromkeys(range(a, b + 1)))
        return list(out)

    def _read_range(self, start: int, stop: int, out: np.ndarray) -> None:
        """Copy ``stream[start:stop]`` into ``out`` (int64, length ``stop - start``)."""
        starts = self._starts
        boundary = self.boundary_id
        last_doc = self._lengths.shape[0] - 1
        doc = int(np.searchsorted(starts, start, side="right")) - 1
        position = start
        written = 0
        while position < stop:
            doc_start = int(starts[doc])
            length = int(self._lengths[doc])
            low = position - doc_start
            if low < length:
                high = min(stop - doc_start, length)
                tokens = checked_document(self.documents, doc, length)
                out[written : written + high - low] = tokens[low:high]
                written += high - low
                position += high - low
            if position < stop and boundary is not None and doc < last_doc:
                out[written] = boundary
                written += 1
                position += 1
            doc += 1

    def read(self, window_starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(context (m, block), next_tokens (m,))`` int64 for the given starts.

        Windows are grouped into maximal runs of overlapping or touching spans, each run
        is read once into a single buffer, and contexts are gathered from it.
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
        for first, stop, base in zip(
            run_first.tolist(), run_stop.tolist(), run_base.tolist(), strict=True
        ):
            self._read_range(first, stop, buffer[base : base + stop - first])
        local = np.empty(count, dtype=np.int64)
        local[order] = run_base[run_of] + (ordered - run_first[run_of])
        windows = np.lib.stride_tricks.sliding_window_view(buffer, self.block)
        return windows[local], buffer[local + self.block]

    def prefetch(self, window_starts: np.ndarray) -> None:
        """Pass the documents of ``window_starts`` to ``documents.prefetch`` if it exists."""
        if callable(getattr(self.documents, "prefetch", None)):
            prefetch_hint(self.documents, self.documents_of(window_starts))
