"""What the data layer needs from a document collection, and nothing about files.

``documents`` is any ``Sequence`` of 1-D integer arrays. Lazy collections (the
memory-mapped :class:`mixle.corpus.ShardedDocuments`, remote corpora) may also offer
the optional capabilities of :class:`DocumentSource`; the helpers here use them when
present and fall back to plain indexing otherwise, so a Python list and a sharded
corpus give identical results.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from mixle.errors import ArgumentTypeError

__all__ = ["DocumentSource", "document_lengths", "documents_fingerprint", "prefetch_hint"]


@runtime_checkable
class DocumentSource(Protocol):
    """Optional capabilities of a lazy document collection.

    Implementations need not inherit from this class. ``lengths`` must be an int64
    array with ``lengths[i] == len(documents[i])``; ``fingerprint`` must change whenever
    any document's content changes; ``prefetch(indices)`` is a hint that the documents
    at ``indices`` will be read soon, in that order (it must not block on I/O).
    """

    @property
    def lengths(self) -> np.ndarray: ...

    @property
    def fingerprint(self) -> str: ...

    def prefetch(self, indices: Sequence[int]) -> None: ...


def _require_sequence(documents: Any) -> None:
    if not isinstance(documents, Sequence) and not hasattr(documents, "__getitem__"):
        raise ArgumentTypeError(
            "`documents` must be a sequence of 1-D token arrays. "
            f"Got {type(documents).__name__} instead."
        )


def document_lengths(documents: Sequence[Any]) -> np.ndarray:
    """Return the int64 lengths of every document (``documents.lengths`` when offered).

    For a plain sequence this indexes each document once; the arrays are not kept.

    Raises
    ------
    ArgumentTypeError
        ``documents`` is not a sequence, or a document is not one-dimensional.
    """
    _require_sequence(documents)
    lengths = getattr(documents, "lengths", None)
    if lengths is not None:
        return np.asarray(lengths, dtype=np.int64)
    out = np.empty(len(documents), dtype=np.int64)
    for index in range(len(documents)):
        shape = np.shape(documents[index])
        if len(shape) != 1:
            raise ArgumentTypeError(
                f"document {index} must be a 1-D array of token ids. Got shape {shape} instead."
            )
        out[index] = shape[0]
    return out


def documents_fingerprint(documents: Sequence[Any]) -> str:
    """Return a hex digest that identifies the content of ``documents``.

    Uses ``documents.fingerprint`` when offered (a sharded corpus's manifest
    fingerprint, O(1)); otherwise hashes every document's length and int64 token ids,
    which is O(corpus) and meant for in-memory collections.
    """
    _require_sequence(documents)
    fingerprint = getattr(documents, "fingerprint", None)
    if isinstance(fingerprint, str):
        return fingerprint
    digest = hashlib.sha256(b"mixle-documents-v1")
    for index in range(len(documents)):
        tokens = np.ascontiguousarray(np.asarray(documents[index]), dtype=np.int64)
        digest.update(np.int64(tokens.shape[0]).tobytes())
        digest.update(tokens.tobytes())
    return digest.hexdigest()


def prefetch_hint(documents: Sequence[Any], indices: Sequence[int]) -> None:
    """Tell ``documents`` that ``indices`` will be read next, if it can use the hint."""
    prefetch = getattr(documents, "prefetch", None)
    if callable(prefetch):
        prefetch(indices)
