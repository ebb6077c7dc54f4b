"""What the data layer needs from a document collection, and nothing about files.

:class:`DocumentSource` declares the whole read surface the iteration code uses:
``len``, ``getitem``, ``lengths``, ``fingerprint``, ``dtype``, ``take`` and
``prefetch``; :class:`RangeReadableSource` adds ``read_tokens`` for collections that
can read a range of their concatenated tokens in one call. The memory-mapped
:class:`mixle.corpus.ShardedDocuments` and its views satisfy them structurally (no
inheritance). Anything else that is a sequence of 1-D token arrays (a Python list, a
tuple, a 2-D numpy array) is adapted once, where it enters the data layer, by
:func:`as_documents`, which wraps it in :class:`SequenceDocuments`; from there on the
code calls the protocol and never asks what it holds.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Sequence
from typing import Any, Protocol, cast, runtime_checkable

import numpy as np

from mixle.errors import ArgumentTypeError

__all__ = [
    "DocumentSource",
    "RangeReadableSource",
    "SequenceDocuments",
    "as_documents",
    "document_lengths",
    "documents_fingerprint",
    "is_document_source",
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
    documents will be read soon, in that order (it must not block on I/O).
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

    def prefetch(self, indices: Sequence[int]) -> None: ...


@runtime_checkable
class RangeReadableSource(DocumentSource, Protocol):
    """A :class:`DocumentSource` that reads token ranges of its concatenation directly.

    ``read_tokens(start, stop)`` returns tokens ``start:stop`` of all documents
    concatenated in order with nothing between them.
    """

    def read_tokens(self, start: int, stop: int) -> np.ndarray: ...


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
    cached); ``dtype`` is ``None`` (no promise), ``take`` indexes one by one and
    ``prefetch`` does nothing (``supports_prefetch`` is False).

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

    def prefetch(self, indices: Sequence[int]) -> None:
        """No-op: the documents are already in memory."""

    def __repr__(self) -> str:
        return f"SequenceDocuments({type(self.items).__name__} of {len(self.items)})"


_SOURCE_MEMBERS = ("__len__", "__getitem__", "lengths", "fingerprint", "dtype", "take", "prefetch")
_MISSING = object()


def _provides(value: Any, members: tuple[str, ...]) -> bool:
    """Whether ``value`` has every one of ``members``, looked up statically.

    ``isinstance`` against a runtime-checkable protocol calls ``hasattr`` on Python
    3.11, which *evaluates* properties: for a sharded corpus ``lengths`` reads every
    offsets file (O(documents)), which a restart must not pay.
    """
    return all(inspect.getattr_static(value, name, _MISSING) is not _MISSING for name in members)


def is_document_source(value: Any) -> bool:
    """Whether ``value`` satisfies :class:`DocumentSource` (no property is evaluated)."""
    return _provides(value, _SOURCE_MEMBERS)


def as_documents(documents: Any) -> DocumentSource:
    """``documents`` itself when it is a :class:`DocumentSource`, else wrapped once.

    A numpy array is always wrapped (its ``take`` and ``dtype`` mean something else).

    Raises
    ------
    ArgumentTypeError
        ``documents`` is neither a :class:`DocumentSource` nor a sequence.
    """
    if isinstance(documents, SequenceDocuments):
        return documents
    if not isinstance(documents, np.ndarray) and is_document_source(documents):
        return cast(DocumentSource, documents)
    return SequenceDocuments(documents)


def range_reader(documents: DocumentSource) -> RangeReadableSource | None:
    """``documents`` when it offers ``read_tokens``, else ``None``.

    In-memory sequences answer without the protocol check, which would evaluate (and
    so compute) their ``lengths`` and ``fingerprint`` properties.
    """
    if isinstance(documents, SequenceDocuments) or not _provides(documents, ("read_tokens",)):
        return None
    return cast(RangeReadableSource, documents)


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


def prefetch_hint(documents: Any, indices: Sequence[int]) -> None:
    """Tell ``documents`` that ``indices`` will be read next (a no-op for plain sequences)."""
    as_documents(documents).prefetch(indices)
