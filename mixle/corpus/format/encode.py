"""Validate documents and pack them into one token array plus lengths, in bulk.

Validation is vectorized over a whole batch of documents (one ``min``/``max`` pass
over the concatenated ids), and the first offending id is traced back to its
document index and position only when something is wrong. That keeps the writer's
per-document cost to a few attribute checks.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from mixle._checks import as_token_ids
from mixle.corpus.format.spec import dtype_for_max_id, dtype_limit
from mixle.errors import TokenIdError

__all__ = [
    "EncodedBatch",
    "as_integer_document",
    "as_integer_ids",
    "check_encoded",
    "encode_documents",
]


def as_integer_document(document: Any, index: int) -> np.ndarray:
    """Return ``document`` as a 1-D signed-or-unsigned integer array (no copy if it is one).

    Integer numpy arrays pass through untouched (range checks happen in bulk later);
    anything else goes through :func:`mixle._checks.as_token_ids`, which rejects
    fractional, non-finite, non-numeric and multi-dimensional input naming
    ``document <index>`` and the position.
    """
    return as_integer_ids(document, f"document {index}")


def as_integer_ids(values: Any, what: str) -> np.ndarray:
    """:func:`as_integer_document` for ids named ``what`` in errors (e.g. ``"`tokens`"``)."""
    if type(values) is np.ndarray and values.ndim == 1:
        dtype = values.dtype
        if dtype.kind == "i" or (dtype.kind == "u" and dtype.itemsize < 8):
            return values
    return as_token_ids(values, what)


class EncodedBatch:
    """A validated run of documents: concatenated ``tokens`` and int64 ``lengths``.

    ``max_id`` is the largest id (``-1`` when there are no tokens).
    """

    __slots__ = ("lengths", "max_id", "tokens")

    def __init__(self, tokens: np.ndarray, lengths: np.ndarray, max_id: int) -> None:
        self.tokens = tokens
        self.lengths = lengths
        self.max_id = max_id


def _locate(lengths: np.ndarray, flat_position: int, first_document: int) -> tuple[int, int]:
    ends = np.cumsum(lengths, dtype=np.int64)
    doc = int(np.searchsorted(ends, flat_position, side="right"))
    start = int(ends[doc - 1]) if doc else 0
    return first_document + doc, flat_position - start


def encode_documents(
    documents: Sequence[np.ndarray],
    *,
    first_document: int,
    limit: int | None,
    buffer: np.ndarray | None = None,
) -> EncodedBatch:
    """Concatenate integer ``documents`` and check every id lies in ``[0, limit)``.

    Parameters
    ----------
    documents
        1-D integer arrays, as returned by :func:`as_integer_document`.
    first_document
        Corpus index of ``documents[0]``, used in error messages.
    limit
        Exclusive upper bound on ids (``vocab_size`` or the dtype's capacity); ``None``
        means "anything that fits int64".
    buffer
        Optional scratch array to concatenate into when its dtype equals the documents'
        common dtype and it is large enough (avoids a fresh allocation per batch).

    Returns
    -------
    EncodedBatch
        Tokens in the documents' common integer dtype (not yet narrowed) and lengths.

    Raises
    ------
    TokenIdError
        An id is negative or ``>= limit``; names the first such id's document index,
        position and value. The exception's ``document`` attribute is that index.
    """
    lengths = np.array(list(map(len, documents)), dtype=np.int64)
    return check_encoded(_concatenated(documents, lengths, buffer), lengths, first_document, limit)


def _concatenated(
    documents: Sequence[np.ndarray], lengths: np.ndarray, buffer: np.ndarray | None
) -> np.ndarray:
    """The ids of ``documents`` concatenated, in their common integer dtype."""
    if len(documents) == 1:
        tokens = documents[0]
    elif not documents:
        tokens = np.empty(0, dtype=np.int64)
    else:
        common = np.result_type(*set(map(operator.attrgetter("dtype"), documents)))
        total = int(lengths.sum())
        if buffer is not None and buffer.dtype == common and buffer.shape[0] >= total:
            tokens = np.concatenate(documents, out=buffer[:total])
        else:
            tokens = np.concatenate(documents).astype(common, copy=False)
    return tokens


def check_encoded(
    tokens: np.ndarray, lengths: np.ndarray, first_document: int, limit: int | None
) -> EncodedBatch:
    """Check the concatenated ids ``tokens`` of documents of ``lengths`` lie in ``[0, limit)``.

    One ``min``/``max`` pass over ``tokens``; the first bad id is traced back to its
    document (counting from ``first_document``) and position only on failure.

    Raises
    ------
    TokenIdError
        As :func:`encode_documents` says.
    """
    if tokens.shape[0] == 0:
        return EncodedBatch(tokens, lengths, -1)
    negative = tokens.dtype.kind == "i" and int(tokens.min()) < 0
    max_id = int(tokens.max())
    too_large = limit is not None and max_id >= limit
    if negative or too_large:
        bad = np.zeros(tokens.shape[0], dtype=bool)
        if negative:
            bad |= tokens < 0
        if too_large:
            bad |= tokens >= limit
        position = int(np.flatnonzero(bad)[0])
        value = int(tokens[position])
        doc, offset = _locate(lengths, position, first_document)
        rule = "token ids must be nonnegative" if value < 0 else f"ids must be below {limit}"
        error = TokenIdError(
            f"document {doc} has token id {value} at position {offset}; {rule}.", document=doc
        )
        raise error
    return EncodedBatch(tokens, lengths, max_id)


def narrow(tokens: np.ndarray, dtype: str, max_id: int) -> np.ndarray:
    """Return ``tokens`` as ``dtype`` after proving ``max_id`` fits (never wraps silently)."""
    if max_id >= dtype_limit(dtype):
        raise TokenIdError(f"token id {max_id} does not fit in {dtype}; this is a bug.")
    return tokens.astype(np.dtype(dtype).newbyteorder("<"), copy=False)


def needed_dtype(max_id: int) -> str:
    """Return the smallest token dtype for ids up to ``max_id`` (``uint16`` for none)."""
    return dtype_for_max_id(max(max_id, 0))
