"""Concatenate-and-chunk arithmetic shared by the eager and the streaming packer.

A rank's *stream* is its documents concatenated in order, with ``boundary_id`` (when
given) between consecutive documents. Row ``r`` holds stream tokens
``[r * block, r * block + block + 1)``; consecutive rows share one token, so every
adjacent pair of the stream is a target exactly once. Only the final row may run past
the end of the stream; its missing tokens are ``pad_id`` and their targets are masked.

Everything here works on stream *positions* through the cumulative piece lengths
``starts`` (``starts[i]`` is where document ``i`` of the rank begins in the stream),
so any token range ``[a, b)`` is found with two ``np.searchsorted`` calls and filled
with one ``np.concatenate`` of document slices: there is no per-token Python, and a
batch costs O(batch_size x block) memory however large the corpus is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from mixle._checks import nonnegative_int
from mixle._gather import SplitOutput
from mixle.data._documents import DocumentSource, as_documents, fetch_documents
from mixle.data._options import PackOptions
from mixle.data._order import as_document_indices
from mixle.errors import ArgumentError, ArgumentTypeError

__all__ = [
    "PackedCorpus",
    "RowLayout",
    "StreamLayout",
    "pack_documents",
    "rows_for_stream",
    "stream_segment",
]


def _interleave(
    arrays: list[np.ndarray], boundary: np.ndarray, *, trailing: bool
) -> list[np.ndarray]:
    """``[a0, boundary, a1, boundary, ...]`` (a trailing boundary if asked), built by slice
    assignment: no per-document tuples, which would feed the cyclic GC on large corpora."""
    count = len(arrays)
    pieces = [boundary] * (2 * count - (0 if trailing else 1)) if count else []
    pieces[::2] = arrays
    return pieces


# A read-through layout's searches bisect element by element (each probe read through its
# reader) down to this many starts, then read them and search them with numpy.
_CHECKED_SPAN = 4096
# ``read(name, start, stop)``: elements ``[start, stop)`` (``0 <= start <= stop``) of a
# stored array (``"indices"``, ``"lengths"``, ``"starts"``), verified before they are
# returned; a reader may answer from a rebuilt copy when the stored bytes changed.
RangeRead = Callable[[str, int, int], np.ndarray]


def rows_for_stream(stream_tokens: int, block: int) -> int:
    """Number of ``block + 1`` rows at stride ``block`` that cover every target pair."""
    if stream_tokens < 2:
        return 0
    return -(-(stream_tokens - 1) // block)


class RowLayout(Protocol):
    """A packed stream's layout, read a token range at a time.

    ``stream_tokens`` is the stream's length; ``segment(begin, end)`` a
    :class:`StreamLayout` of the documents around stream tokens ``[begin, end)`` (a
    whole layout answers with itself, a windowed one with the windows the range
    touches); ``document_order()`` every document of the stream in order (O(documents):
    for inspection, never on the batch path).
    """

    @property
    def stream_tokens(self) -> int: ...

    def segment(self, begin: int, end: int) -> StreamLayout: ...

    def document_order(self) -> np.ndarray: ...


@dataclass(frozen=True, slots=True)
class StreamLayout:
    """Where each document of one rank's stream starts; O(documents) int64 memory.

    A layout may also be a *segment* of a longer stream (a window of a windowed
    layout): its ``starts`` are positions in the whole stream, its ``starts[-1]`` is
    where the next document begins (after the last one's boundary, if any) and
    ``first`` is the stream position of its first document.

    Attributes
    ----------
    indices
        Global document indices, in stream order.
    lengths
        ``lengths[i] == len(documents[indices[i]])``.
    starts
        ``starts[i]`` is the stream position of document ``i``'s first token;
        ``starts[-1]`` is the stream length. Length ``len(indices) + 1``.
    has_boundary
        Whether a boundary token follows every document but the stream's last.
    first
        How many documents of the stream come before ``indices[0]`` (0 for a whole
        stream).
    reader
        For a layout over a stored plan whose bytes are verified on first read (see
        :class:`~mixle.data._plan_store.VerifiedArrays`): how its elements are read.
        Then :meth:`segment`, :meth:`positions`, :meth:`column` and
        :meth:`document_order` read through it and answer with plain layouts (or
        arrays) of verified elements; reading the three arrays directly reads the
        stored bytes unverified (only their shapes are trusted).
    """

    indices: np.ndarray
    lengths: np.ndarray
    starts: np.ndarray
    has_boundary: bool
    first: int = 0
    reader: RangeRead | None = field(default=None, compare=False, repr=False)

    @classmethod
    def build(cls, indices: np.ndarray, lengths: np.ndarray, has_boundary: bool) -> StreamLayout:
        """Lay out ``indices`` (validated, int64); ``lengths[i]`` is document ``indices[i]``'s."""
        lengths = np.asarray(lengths, dtype=np.int64)
        pieces = lengths + 1 if has_boundary else lengths
        starts = np.zeros(len(indices) + 1, dtype=np.int64)
        # int64 cumsum: an int32 cumsum overflows past 2**31 tokens.
        np.cumsum(pieces, out=starts[1:])
        if has_boundary and len(indices):
            starts[-1] -= 1  # no boundary after the last document
        return cls(indices, lengths, starts, has_boundary)

    @property
    def stream_tokens(self) -> int:
        """Total tokens of the stream, boundaries included (of a segment: where it ends)."""
        return int(self.starts[-1])

    def segment(self, begin: int, end: int) -> StreamLayout:
        """The layout itself (it holds every document of the stream); of a layout with a
        reader, the verified :meth:`positions` of the documents overlapping
        ``[begin, end)``."""
        if self.reader is None:
            return self
        first, stop = self.documents_between(begin, end)
        return self.positions(first, max(first, stop))

    def positions(self, first: int, stop: int) -> StreamLayout:
        """The documents at positions ``[first, stop)`` (clipped) as a segment: their
        indices, lengths and ``stop - first + 1`` starts, read through the reader."""
        count = len(self.indices)
        first, stop = min(max(first, 0), count), min(max(stop, 0), count)
        stop = max(first, stop)
        return StreamLayout(
            self.column("indices", first, stop),
            self.column("lengths", first, stop),
            self.column("starts", first, stop + 1),
            self.has_boundary,
            self.first + first,
        )

    def column(
        self, name: Literal["indices", "lengths", "starts"], first: int, stop: int
    ) -> np.ndarray:
        """``getattr(self, name)[first:stop]`` (``0 <= first <= stop``), read through the
        reader when the layout has one."""
        if self.reader is not None:
            return self.reader(name, first, stop)
        array: np.ndarray = getattr(self, name)
        return array[first:stop]

    def document_order(self) -> np.ndarray:
        return self.column("indices", 0, len(self.indices))

    def documents_between(self, begin: int, end: int) -> tuple[int, int]:
        """Positions ``[i0, i1)`` in ``indices`` of the documents overlapping ``[begin, end)``."""
        first = self._searched(begin, "right") - 1
        stop = self._searched(end, "left")
        return max(first, 0), min(stop, len(self.indices))

    def _searched(self, value: int, side: Literal["left", "right"]) -> int:
        """``starts.searchsorted(value, side)``; of a layout with a reader, reading only
        the (verified) starts a bisection probes: O(log documents) chunks."""
        read = self.reader
        if read is None:
            return int(self.starts.searchsorted(value, side=side))
        low, high = 0, len(self.starts)  # the answer lies in [low, high]
        while high - low > _CHECKED_SPAN:
            middle = (low + high) // 2
            start = int(read("starts", middle, middle + 1)[0])
            below = start <= value if side == "right" else start < value
            low, high = (middle + 1, high) if below else (low, middle)
        return low + int(read("starts", low, high).searchsorted(value, side=side))


def stream_segment(
    documents: DocumentSource,
    layout: StreamLayout,
    begin: int,
    end: int,
    out: np.ndarray | SplitOutput,
    boundary_id: int | None,
) -> tuple[int, int]:
    """Write stream tokens ``[begin, end)`` (``end <= stream_tokens``) into ``out``.

    ``out`` is an int64 array of length ``end - begin``, or a
    :class:`~mixle._gather.SplitOutput` of that ``size`` (consecutive batches, each
    with its own buffer, written by the same one gather) when ``documents`` has
    ``gathers_split_output``. Reads only the documents that
    overlap the range, each once, with one ``documents.gather_into`` call (one vectorised
    copy per shard for a sharded corpus; no intermediate arrays); boundary tokens are
    written by ranges. Returns ``(first, stop)``, the positions in ``layout.indices`` of
    the documents read (``(0, 0)`` when the range is empty).

    Raises
    ------
    TokenIdError, ArgumentTypeError
        A document holds an invalid token id or is not one-dimensional.
    CorpusFormatError, IndexError
        A document is shorter than the length recorded when the layout was built, or
        changed since (``documents`` must not change while it is being streamed).
    """
    if end <= begin:
        return 0, 0
    first, stop = layout.documents_between(begin, end)
    starts = layout.starts[first:stop]
    lengths = layout.lengths[first:stop]
    # Pieces: documents strictly between the first and the last lie wholly inside
    # [begin, end), boundaries included (the next document starts before `end`); only
    # the first may start before `begin` and only the last may run past `end`.
    at = starts - begin
    begins = np.zeros(stop - first, dtype=np.int64)
    ends = lengths.copy()
    ends[-1] = min(int(ends[-1]), end - int(starts[-1]))
    begins[0] = -int(at[0])
    at[0] = 0
    fill = 0 if boundary_id is None else boundary_id
    if layout.has_boundary:
        # The boundary after document k sits just before document k + 1 starts (written
        # first: a gather may copy the pieces and the one slot between them as one span).
        if isinstance(out, SplitOutput):
            out.put(at[1:] - 1, fill)
        else:
            out[at[1:] - 1] = fill
    documents.gather_into(
        layout.indices[first:stop],
        begins,
        ends,
        out,  # type: ignore[arg-type]  # a SplitOutput only where the source takes one
        at,
    )
    if layout.has_boundary:
        # The last document's boundary is inside the range only if it ends before `end`,
        # and the stream's last document has none (it ends where the next start is).
        after = int(starts[-1]) + int(lengths[-1]) - begin
        if after < min(end, int(layout.starts[stop])) - begin:
            if isinstance(out, SplitOutput):
                out.put(np.array([after], dtype=np.int64), fill)
            else:
                out[after] = fill
    if isinstance(out, SplitOutput):
        out.flush()
    return first, stop


class PackedCorpus:
    """Rows packed by :func:`pack_documents`, with their loss mask and efficiency.

    Attributes
    ----------
    rows
        ``(n_rows, block + 1)`` int64. ``rows[:, :-1]`` is the model input and
        ``rows[:, 1:]`` the next-token target at every position. Row ``r`` is stream
        tokens ``[r * block, r * block + block + 1)``; rows from :func:`pack_documents`
        are a read-only overlapping view of one stream buffer (consecutive rows share a
        token), so they cost no second copy — call ``rows.copy()`` for a writable array.
    loss_mask
        ``(n_rows, block)`` bool; ``loss_mask[r, j]`` is True iff target ``rows[r, j + 1]``
        is a real token, False only on padding at the tail of the final row.
    real_tokens
        Number of real target positions (``loss_mask.sum()``).
    total_tokens
        Number of target positions (``n_rows * block``).
    """

    __slots__ = ("loss_mask", "real_tokens", "rows", "total_tokens")

    def __init__(
        self, rows: np.ndarray, *, real_tokens: int, total_tokens: int, loss_mask: np.ndarray
    ) -> None:
        real_tokens = nonnegative_int("real_tokens", real_tokens)
        total_tokens = nonnegative_int("total_tokens", total_tokens)
        if rows.ndim != 2 or rows.dtype != np.int64:
            raise ArgumentTypeError(
                f"`rows` must be a 2-D int64 array. Got {rows.dtype} of shape {rows.shape} instead."
            )
        expected = (rows.shape[0], max(rows.shape[1] - 1, 0))
        if loss_mask.dtype != np.bool_ or loss_mask.shape != expected:
            raise ArgumentTypeError(
                f"`loss_mask` must be a bool array of shape {expected}. "
                f"Got {loss_mask.dtype} of shape {loss_mask.shape} instead."
            )
        if real_tokens > total_tokens:
            raise ArgumentError(
                f"`real_tokens` ({real_tokens}) must not exceed `total_tokens` ({total_tokens})."
            )
        self.rows = rows
        self.loss_mask = loss_mask
        self.real_tokens = real_tokens
        self.total_tokens = total_tokens

    @property
    def packing_efficiency(self) -> float:
        """``real_tokens / total_tokens``: the real fraction of target positions (0.0 if none)."""
        return self.real_tokens / self.total_tokens if self.total_tokens else 0.0

    @property
    def context(self) -> np.ndarray:
        """``rows[:, :-1]``, the model input, ``(n_rows, block)``."""
        return self.rows[:, :-1]

    @property
    def targets(self) -> np.ndarray:
        """``rows[:, 1:]``, the next-token targets, ``(n_rows, block)``."""
        return self.rows[:, 1:]

    def __repr__(self) -> str:
        return (
            f"PackedCorpus(rows={self.rows.shape}, real_tokens={self.real_tokens}, "
            f"total_tokens={self.total_tokens}, efficiency={self.packing_efficiency:.4f})"
        )


def pack_documents(
    documents: Sequence[Any],
    indices: Any,
    block: int,
    *,
    pad_id: int = 0,
    boundary_id: int | None = None,
) -> PackedCorpus:
    """Concatenate ``documents[indices]`` in order and chunk the stream into rows.

    The stream is the documents in ``indices`` order with ``boundary_id`` (if given)
    between consecutive documents — a real, never-masked token. Rows hold ``block + 1``
    tokens at stride ``block``, so every adjacent pair of the stream is a target exactly
    once: for a stream of ``S >= 2`` tokens there are ``ceil((S - 1) / block)`` rows and
    ``loss_mask.sum() == S - 1``; a stream of 0 or 1 tokens has no target and gives zero
    rows. Only the final row may hold ``pad_id`` (at its tail), and only those targets
    are masked, so at most ``block - 1`` target positions are wasted per call.

    Parameters
    ----------
    documents
        Any sequence of 1-D integer token arrays; only ``documents[i]`` for ``i`` in
        ``indices`` is read.
    indices
        1-D integer document indices (repeats allowed), in packing order.
    block
        Positive number of input tokens per row.
    pad_id, boundary_id
        Exact integers in int64 range (``boundary_id`` may be ``None``).

    Raises
    ------
    ArgumentTypeError
        ``block``/``pad_id``/``boundary_id`` is a bool, float or non-integer; ``indices``
        is not integers; a document is not 1-D or holds bools or non-numbers.
    ArgumentError
        ``block <= 0``; an index is out of range.
    TokenIdError
        A document holds a fractional, non-finite or out-of-int64-range id (names the
        document and position). Every document is validated before anything is packed.

    Complexity: O(stream tokens) time, one int64 copy of the stream in memory.
    """
    options = PackOptions(block, pad_id, boundary_id)
    block, pad_id, boundary_id = options.block, options.pad_id, options.boundary_id
    source = as_documents(documents)
    order = as_document_indices(indices, "`indices`", len(source))
    # Every document is fetched and validated before anything is packed.
    arrays = fetch_documents(source, order.tolist())
    stream_tokens = sum(map(len, arrays))
    pieces = arrays
    if boundary_id is not None and len(arrays) > 1:
        boundary = np.array([boundary_id], dtype=np.int64)
        pieces = _interleave(arrays, boundary, trailing=False)
        stream_tokens += len(arrays) - 1
    n_rows = rows_for_stream(stream_tokens, block)
    buffer = np.empty(max(n_rows * block + 1, stream_tokens), dtype=np.int64)
    if pieces:
        np.concatenate(pieces, out=buffer[:stream_tokens], casting="same_kind")
    buffer[stream_tokens:] = pad_id
    rows = np.lib.stride_tricks.as_strided(
        buffer, shape=(n_rows, block + 1), strides=(block * 8, 8), writeable=False
    )
    real = stream_tokens - 1 if n_rows else 0
    mask = np.zeros(n_rows * block, dtype=np.bool_)
    mask[:real] = True
    return PackedCorpus(
        rows, real_tokens=real, total_tokens=n_rows * block, loss_mask=mask.reshape(n_rows, block)
    )
