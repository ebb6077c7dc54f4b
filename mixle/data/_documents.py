"""What the data layer needs from a document collection, and nothing about files.

:class:`DocumentSource` declares the whole read surface the iteration code uses:
``len``, ``getitem``, ``lengths``, ``fingerprint``, ``dtype``, ``take``,
``prefetch`` and the batch gather ``gather_into``; :class:`RangeReadableSource` adds
``read_tokens`` for collections that can read a range of their concatenated tokens in
one call. The memory-mapped :class:`mixle.corpus.ShardedDocuments` and its views satisfy
them structurally (no inheritance). Anything else that is a sequence of 1-D token arrays
(a Python list, a tuple, a 2-D numpy array) is adapted once, where it enters the data
layer, by :func:`as_documents`, which wraps it in :class:`SequenceDocuments`; a source
written before ``gather_into`` existed (every other member, no ``gather_into``) is
wrapped in :class:`TakeGatherAdapter`, which gathers through its ``take``. From there on
the code calls the protocol and never asks what it holds.
"""

from __future__ import annotations

import hashlib
import inspect
import operator
from collections.abc import Sequence
from typing import Any, Protocol, cast, runtime_checkable

import numpy as np

from mixle._checks import as_token_ids
from mixle._gather import SplitOutput
from mixle.errors import ArgumentTypeError, CorpusFormatError

__all__ = [
    "DocumentSource",
    "OffsetReadableSource",
    "OffsetRunsReadableSource",
    "RangeReadableSource",
    "SequenceDocuments",
    "TakeGatherAdapter",
    "as_documents",
    "document_lengths",
    "document_tokens",
    "documents_fingerprint",
    "fetch_documents",
    "gather_by_take",
    "is_document_source",
    "offset_reader",
    "offset_runs_reader",
    "prefetch_hint",
    "range_reader",
    "supports_prefetch",
]


@runtime_checkable
class DocumentSource(Protocol):
    """A collection of documents, each a 1-D integer token array.

    Implementations need not inherit from this class. ``lengths`` must be an int64
    array with ``lengths[i] == len(documents[i])``; ``fingerprint`` must change whenever
    any document's content changes; ``dtype`` is the dtype of every returned array, or
    ``None`` when the collection does not promise one; ``take(indices)`` returns the
    documents at ``indices`` in order; ``prefetch(indices)`` is a hint that those
    documents will be read soon, in that order (it must not block on I/O; the streams
    pass a 1-D int64 array).

    ``gather_into(indices, begins, ends, out, at)`` is the packer's batch read: for each
    ``k`` it writes tokens ``[begins[k], ends[k])`` of document ``indices[k]``, cast to
    ``out``'s dtype, to ``out[at[k] : at[k] + ends[k] - begins[k]]`` and writes nothing
    else of ``out``. The arguments are 1-D int64 arrays of one length (``out`` a
    writable 1-D array); a piece outside its document or outside ``out``, or an index
    out of range, raises (:class:`IndexError`, or :class:`CorpusFormatError` when the
    stored data is inconsistent) before the call returns. A memory-mapped corpus does it
    in one vectorised call per shard, with no intermediate arrays; the default
    (:func:`gather_by_take`) reads the documents with ``take``.
    """

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Any: ...

    @property
    def lengths(self) -> np.ndarray: ...

    @property
    def fingerprint(self) -> str: ...

    @property
    def dtype(self) -> np.dtype[Any] | None: ...

    def take(self, indices: Sequence[int]) -> list[Any]: ...

    def prefetch(self, indices: Sequence[int] | np.ndarray) -> None: ...

    def gather_into(
        self,
        indices: np.ndarray,
        begins: np.ndarray,
        ends: np.ndarray,
        out: np.ndarray,
        at: np.ndarray,
    ) -> None: ...


@runtime_checkable
class RangeReadableSource(DocumentSource, Protocol):
    """A :class:`DocumentSource` that reads token ranges of its concatenation directly.

    ``read_tokens(start, stop)`` returns tokens ``start:stop`` of all documents
    concatenated in order with nothing between them.
    """

    def read_tokens(self, start: int, stop: int) -> np.ndarray: ...


@runtime_checkable
class OffsetReadableSource(DocumentSource, Protocol):
    """A :class:`DocumentSource` that reads cumulative token offsets at chosen documents.

    ``token_offsets(indices)`` returns, for each ``i`` in ``indices`` (``0 <= i <=
    len(documents)``), the number of tokens of documents ``0 .. i - 1`` as int64, in
    O(len(indices)) reads (a memory-mapped corpus answers from its offsets files, a
    remote one from ranges): a plan totals any run of documents without the whole
    ``lengths`` array. A writable result is the caller's (a plan may overwrite it in
    place); an array the source keeps is returned read-only.
    """

    def token_offsets(self, indices: Sequence[int] | np.ndarray) -> np.ndarray: ...


@runtime_checkable
class OffsetRunsReadableSource(OffsetReadableSource, Protocol):
    """An :class:`OffsetReadableSource` that also reads the offsets of runs of
    consecutive documents.

    ``token_offset_runs(starts, counts)`` returns ``token_offsets`` of the indices
    ``starts[j], ..., starts[j] + counts[j] - 1`` for each ``j``, concatenated, without
    an index array (a memory-mapped corpus copies each run from its offsets files): a
    plan window of whole blocks of documents reads its lengths that way.
    """

    def token_offset_runs(
        self, starts: Sequence[int] | np.ndarray, counts: Sequence[int] | np.ndarray
    ) -> np.ndarray: ...


# Integer dtypes whose every value is a valid int64 token id: copying them into an int64
# buffer is lossless, so no per-element check is needed (as in `as_token_ids`).
_LOSSLESS = frozenset(
    np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32)
)
_DTYPE_NDIM = operator.attrgetter("dtype", "ndim")
_FAST_KINDS = frozenset((dtype, 1) for dtype in _LOSSLESS)


def _validated(raw: Any, index: int) -> np.ndarray:
    """Slow path of :func:`document_tokens`: full id validation via ``as_token_ids``."""
    array = np.asarray(raw)
    if array.ndim == 1 and array.dtype in _LOSSLESS:
        return array
    return as_token_ids(array, f"document {index}")


def document_tokens(documents: Sequence[Any], index: int) -> np.ndarray:
    """Return document ``index`` as a 1-D array whose ids are valid int64 token ids.

    Integer arrays of up to 32 bits (and int64) are returned as they are (no copy);
    anything else goes through :func:`mixle._checks.as_token_ids`, which rejects
    fractional, non-finite, boolean and out-of-range ids, naming the document and the
    position.
    """
    raw = documents[index]
    if isinstance(raw, np.ndarray) and raw.ndim == 1 and raw.dtype in _LOSSLESS:
        return raw
    return _validated(raw, index)


def fetch_documents(documents: DocumentSource, indices: list[int]) -> list[np.ndarray]:
    """``[document_tokens(documents, i) for i in indices]``, vectorised for the common case.

    When every fetched document already is a 1-D array of a lossless integer dtype (one
    C-level pass over the dtypes and ndims), nothing is converted; otherwise each document
    goes through the validating path, which names the first bad document and position.
    """
    raw = documents.take(indices)
    try:
        fast = set(map(_DTYPE_NDIM, raw)) <= _FAST_KINDS
    except AttributeError:  # lists or other non-array documents
        fast = False
    if fast:
        return raw
    return [_validated(array, index) for array, index in zip(raw, indices, strict=True)]


def gather_by_take(
    documents: DocumentSource,
    indices: np.ndarray,
    begins: np.ndarray,
    ends: np.ndarray,
    out: np.ndarray | SplitOutput,
    at: np.ndarray,
    recorded: np.ndarray | None = None,
) -> None:
    """The default ``gather_into``: read the documents with ``take``, copy each piece
    (into ``out``, an array or a ``mixle._gather.SplitOutput``).

    Token ids are validated (:func:`document_tokens`) before anything is copied. With
    ``recorded`` (the lengths the source reported earlier), a document whose length
    changed since raises :class:`CorpusFormatError`.
    """
    wanted = np.asarray(indices, dtype=np.int64).tolist()
    arrays = fetch_documents(documents, wanted)
    rows = zip(wanted, np.asarray(begins).tolist(), np.asarray(ends).tolist(), strict=True)
    pieces = []
    for k, ((index, begin, end), array) in enumerate(zip(rows, arrays, strict=True)):
        length = len(array)
        if recorded is not None and length != recorded[index]:
            raise CorpusFormatError(
                f"document {index} has {length} tokens, but {int(recorded[index])} were "
                "recorded when the stream was laid out; `documents` must not change while "
                "it is being streamed."
            )
        if not 0 <= begin <= end <= length:
            raise IndexError(
                f"piece {k}: tokens [{begin}, {end}) are outside document {index} "
                f"({length} tokens)."
            )
        pieces.append(array[begin:end])
    positions = np.asarray(at).tolist()
    size = out.size
    for k, (piece, position) in enumerate(zip(pieces, positions, strict=True)):
        if position < 0 or position + len(piece) > size:
            raise IndexError(
                f"piece {k}: {len(piece)} tokens at {position} do not fit in `out` ({size} tokens)."
            )
    if isinstance(out, SplitOutput):  # correct, not fast: one write per piece
        for piece, position in zip(pieces, positions, strict=True):
            out.write(position, np.asarray(piece))
        out.flush()
        return
    for piece, position in zip(pieces, positions, strict=True):
        out[position : position + len(piece)] = piece


def _checked_length(document: Any, index: int) -> int:
    shape = np.shape(document)
    if len(shape) != 1:
        raise ArgumentTypeError(
            f"document {index} must be a 1-D array of token ids. Got shape {shape} instead."
        )
    return int(shape[0])


class SequenceDocuments:
    """:class:`DocumentSource` over any in-memory sequence of 1-D token arrays.

    ``lengths`` indexes every document once (the arrays are not kept) and
    ``fingerprint`` hashes every document's length and int64 token ids once (O(corpus),
    cached); ``dtype`` is ``None`` (no promise), ``take`` indexes one by one,
    ``prefetch`` does nothing (``supports_prefetch`` is False) and ``gather_into`` is
    :func:`gather_by_take`, which also raises :class:`CorpusFormatError` when a
    document's length changed since ``lengths`` was read.

    Raises
    ------
    ArgumentTypeError
        ``items`` is not indexable, or (when ``lengths`` is read) a document is not
        one-dimensional.
    """

    supports_prefetch = False

    def __init__(self, items: Any) -> None:
        if isinstance(items, str | bytes) or not (
            isinstance(items, Sequence | np.ndarray)
            or (hasattr(items, "__getitem__") and hasattr(items, "__len__"))
        ):
            raise ArgumentTypeError(
                "`documents` must be a sequence of 1-D token arrays. "
                f"Got {type(items).__name__} instead."
            )
        self.items = items
        self._lengths: np.ndarray | None = None
        self._fingerprint: str | None = None

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> Any:
        return self.items[index]

    @property
    def lengths(self) -> np.ndarray:
        if self._lengths is None:
            items = self.items
            lengths = np.empty(len(items), dtype=np.int64)
            for index in range(len(items)):
                lengths[index] = _checked_length(items[index], index)
            self._lengths = lengths
        return self._lengths

    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            digest = hashlib.sha256(b"mixle-documents-v1")
            for index in range(len(self.items)):
                tokens = np.ascontiguousarray(np.asarray(self.items[index]), dtype=np.int64)
                digest.update(np.int64(tokens.shape[0]).tobytes())
                digest.update(tokens.tobytes())
            self._fingerprint = digest.hexdigest()
        return self._fingerprint

    @property
    def dtype(self) -> np.dtype[Any] | None:
        return None

    def take(self, indices: Sequence[int]) -> list[Any]:
        return list(map(self.items.__getitem__, indices))

    def prefetch(self, indices: Sequence[int] | np.ndarray) -> None:
        """No-op: the documents are already in memory."""

    def gather_into(
        self,
        indices: np.ndarray,
        begins: np.ndarray,
        ends: np.ndarray,
        out: np.ndarray,
        at: np.ndarray,
    ) -> None:
        """:func:`gather_by_take`, checking lengths against ``lengths`` once read."""
        gather_by_take(self, indices, begins, ends, out, at, self._lengths)

    def __repr__(self) -> str:
        return f"SequenceDocuments({type(self.items).__name__} of {len(self.items)})"


class TakeGatherAdapter:
    """A :class:`DocumentSource` without ``gather_into``, given the default one.

    Every other member is the wrapped ``source``'s own; ``gather_into`` is
    :func:`gather_by_take`. Built once by :func:`as_documents`.
    """

    def __init__(self, source: Any) -> None:
        self.source = source

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> Any:
        return self.source[index]

    @property
    def lengths(self) -> np.ndarray:
        return cast(np.ndarray, self.source.lengths)

    @property
    def fingerprint(self) -> str:
        return cast(str, self.source.fingerprint)

    @property
    def dtype(self) -> np.dtype[Any] | None:
        return cast("np.dtype[Any] | None", self.source.dtype)

    def take(self, indices: Sequence[int]) -> list[Any]:
        return cast("list[Any]", self.source.take(indices))

    def prefetch(self, indices: Sequence[int] | np.ndarray) -> None:
        self.source.prefetch(indices)

    def gather_into(
        self,
        indices: np.ndarray,
        begins: np.ndarray,
        ends: np.ndarray,
        out: np.ndarray,
        at: np.ndarray,
    ) -> None:
        gather_by_take(self.source, indices, begins, ends, out, at)

    def __repr__(self) -> str:
        return f"TakeGatherAdapter({self.source!r})"


class _RangeTakeGatherAdapter(TakeGatherAdapter):
    """:class:`TakeGatherAdapter` of a source that also reads token ranges."""

    def read_tokens(self, start: int, stop: int) -> np.ndarray:
        return cast(np.ndarray, self.source.read_tokens(start, stop))


_BASE_MEMBERS = ("__len__", "__getitem__", "lengths", "fingerprint", "dtype", "take", "prefetch")
_SOURCE_MEMBERS = (*_BASE_MEMBERS, "gather_into")
_MISSING = object()


def _provides(value: Any, members: tuple[str, ...]) -> bool:
    """Whether ``value`` has every one of ``members``, looked up statically.

    ``isinstance`` against a runtime-checkable protocol calls ``hasattr`` on Python
    3.11, which *evaluates* properties: for a sharded corpus ``lengths`` reads every
    offsets file (O(documents)), which a restart must not pay.
    """
    return all(inspect.getattr_static(value, name, _MISSING) is not _MISSING for name in members)


def is_document_source(value: Any) -> bool:
    """Whether ``value`` is used as a :class:`DocumentSource`: it has every member, or
    every member but ``gather_into`` (which :func:`as_documents` then supplies). No
    property is evaluated."""
    return _provides(value, _BASE_MEMBERS)


def as_documents(documents: Any) -> DocumentSource:
    """``documents`` itself when it is a :class:`DocumentSource`, else wrapped once.

    A numpy array is always wrapped (its ``take`` and ``dtype`` mean something else); a
    source with every member but ``gather_into`` is wrapped in
    :class:`TakeGatherAdapter`.

    Raises
    ------
    ArgumentTypeError
        ``documents`` is neither a :class:`DocumentSource` nor a sequence.
    """
    if isinstance(documents, SequenceDocuments):
        return documents
    if not isinstance(documents, np.ndarray) and is_document_source(documents):
        if _provides(documents, ("gather_into",)):
            return cast(DocumentSource, documents)
        if _provides(documents, ("read_tokens",)):
            return _RangeTakeGatherAdapter(documents)
        return TakeGatherAdapter(documents)
    return SequenceDocuments(documents)


def range_reader(documents: DocumentSource) -> RangeReadableSource | None:
    """``documents`` when it offers ``read_tokens``, else ``None``.

    In-memory sequences answer without the protocol check, which would evaluate (and
    so compute) their ``lengths`` and ``fingerprint`` properties.
    """
    if isinstance(documents, SequenceDocuments) or not _provides(documents, ("read_tokens",)):
        return None
    return cast(RangeReadableSource, documents)


def offset_reader(documents: DocumentSource) -> OffsetReadableSource | None:
    """``documents`` when it offers ``token_offsets``, else ``None`` (no property is
    evaluated)."""
    if isinstance(documents, SequenceDocuments) or not _provides(documents, ("token_offsets",)):
        return None
    return cast(OffsetReadableSource, documents)


def offset_runs_reader(documents: DocumentSource) -> OffsetRunsReadableSource | None:
    """``documents`` when it offers ``token_offsets`` and ``token_offset_runs``, else
    ``None`` (no property is evaluated)."""
    if isinstance(documents, SequenceDocuments) or not _provides(
        documents, ("token_offsets", "token_offset_runs")
    ):
        return None
    return cast(OffsetRunsReadableSource, documents)


def supports_prefetch(documents: DocumentSource) -> bool:
    """Whether ``documents.prefetch`` does anything (False for in-memory sequences)."""
    return not isinstance(documents, SequenceDocuments)


def document_lengths(documents: Any) -> np.ndarray:
    """Return the int64 lengths of every document (``documents.lengths`` when offered).

    For a plain sequence this indexes each document once; the arrays are not kept.

    Raises
    ------
    ArgumentTypeError
        ``documents`` is not a sequence, or a document is not one-dimensional.
    """
    return np.asarray(as_documents(documents).lengths, dtype=np.int64)


def documents_fingerprint(documents: Any) -> str:
    """Return a hex digest that identifies the content of ``documents``.

    A :class:`DocumentSource`'s own ``fingerprint`` (a sharded corpus's manifest
    fingerprint, O(1)); for a plain sequence a hash of every document's length and
    int64 token ids, which is O(corpus) and meant for in-memory collections.
    """
    return as_documents(documents).fingerprint


def prefetch_hint(documents: Any, indices: Sequence[int] | np.ndarray) -> None:
    """Tell ``documents`` that ``indices`` will be read next (a no-op for plain sequences)."""
    as_documents(documents).prefetch(indices)
