"""Whole documents as observations of the transformer leaf.

A document is a 1-D array of token ids. Its log-density is the sum of its next-token
log-probabilities: token ``t`` (for ``t >= 1``) is predicted from the tokens before it,
within the model's context window. The document is cut into rows exactly as
:func:`mixle.data.pack_documents` cuts a stream: row ``r`` holds tokens
``[r * block, r * block + block + 1)``, its ``block`` inputs predict the ``block``
tokens one further on, and the context restarts at each row. So a document of ``n``
tokens has ``n - 1`` predicted tokens in ``ceil((n - 1) / block)`` rows, and the first
token is the (unscored) prompt. A one-token document has log-density 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle._checks import as_token_ids, positive_int
from mixle.errors import ArgumentError, TokenIdError
from mixle.models._inputs import TokenBatch
from mixle.stats.base import DataSequenceEncoder

__all__ = ["DocumentRows", "StreamingDocumentEncoder", "TokenDocuments", "document_rows"]


@dataclass(frozen=True, slots=True)
class TokenDocuments:
    """Encoded documents: ``tokens`` (all documents concatenated) and ``offsets`` (n + 1).

    Document ``i`` is ``tokens[offsets[i]:offsets[i + 1]]``; every document holds at
    least one token. Slicing (``docs[a:b]``) gives the documents ``a .. b-1``.
    """

    tokens: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return int(self.offsets.shape[0] - 1)

    def __getitem__(self, index: slice) -> TokenDocuments:
        start, stop, step = index.indices(len(self))
        if step != 1:
            raise ArgumentError(f"documents can only be sliced contiguously. Got step {step}.")
        stop = max(start, stop)
        first, last = int(self.offsets[start]), int(self.offsets[stop])
        return TokenDocuments(self.tokens[first:last], self.offsets[start : stop + 1] - first)

    def take(self, indices: np.ndarray) -> TokenDocuments:
        """Return the documents at ``indices`` (int64, in that order)."""
        lengths = self.lengths[indices]
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        parts = [self.document(int(i)) for i in indices]
        tokens = np.concatenate(parts) if parts else self.tokens[:0]
        return TokenDocuments(tokens.astype(np.int64, copy=False), offsets)

    @property
    def lengths(self) -> np.ndarray:
        """Tokens per document (int64)."""
        return np.diff(self.offsets)

    def document(self, index: int) -> np.ndarray:
        """Return document ``index`` (a view)."""
        return self.tokens[self.offsets[index] : self.offsets[index + 1]]


class StreamingDocumentEncoder(DataSequenceEncoder):
    """Encode whole documents (1-D token id arrays) for the document-observation leaf.

    Parameters
    ----------
    vocab
        Ids must lie in ``[0, vocab)``.
    """

    def __init__(self, vocab: int) -> None:
        self.vocab = positive_int("vocab", vocab)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StreamingDocumentEncoder) and other.vocab == self.vocab

    def __hash__(self) -> int:
        return hash(("StreamingDocumentEncoder", self.vocab))

    def __repr__(self) -> str:
        return f"StreamingDocumentEncoder(vocab={self.vocab})"

    def seq_encode(self, x: Sequence[Any]) -> TokenDocuments:
        """Encode a sequence of documents (or re-validate a :class:`TokenDocuments`).

        Raises
        ------
        ArgumentError
            No documents, or an empty document (its index named).
        TokenIdError
            An id outside ``[0, vocab)`` (document and position named).
        """
        if isinstance(x, TokenDocuments):
            docs = [x.document(i) for i in range(len(x))]
        else:
            docs = [as_token_ids(doc, f"document {i}") for i, doc in enumerate(x)]
        if not docs:
            raise ArgumentError("`x` must hold at least one document. Got none.")
        lengths = np.array([doc.shape[0] for doc in docs], dtype=np.int64)
        if (lengths == 0).any():
            raise ArgumentError(
                f"document {int(np.flatnonzero(lengths == 0)[0])} is empty; a document "
                "needs at least one token."
            )
        tokens = np.concatenate(docs).astype(np.int64, copy=False)
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        bad = (tokens < 0) | (tokens >= self.vocab)
        if bad.any():
            flat = int(np.flatnonzero(bad)[0])
            doc = int(np.searchsorted(offsets, flat, side="right") - 1)
            raise TokenIdError(
                f"document {doc} has token id {int(tokens[flat])} at position "
                f"{flat - int(offsets[doc])}; ids must be in [0, {self.vocab})."
            )
        return TokenDocuments(tokens, offsets)


@dataclass(frozen=True, slots=True)
class DocumentRows:
    """Dense training rows of some documents: ``batch`` plus the document of each row."""

    batch: TokenBatch
    row_document: np.ndarray


def document_rows(docs: TokenDocuments, block: int, weights: np.ndarray) -> DocumentRows:
    """Cut ``docs`` into dense rows of ``block`` positions (see the module docstring).

    Position weights are the document's weight on predicted tokens and 0 on padding
    (padding ids are 0 and sit after the row's last target, so they change nothing).
    """
    lengths = docs.lengths
    targets_per_doc = lengths - 1
    rows_per_doc = -(-targets_per_doc // block)  # ceil; 0 for one-token documents
    row_document = np.repeat(np.arange(len(docs), dtype=np.int64), rows_per_doc)
    first_row = np.concatenate(([0], np.cumsum(rows_per_doc)[:-1]))
    row_in_doc = np.arange(row_document.shape[0], dtype=np.int64) - first_row[row_document]
    offset_in_doc = row_in_doc[:, None] * block + np.arange(block, dtype=np.int64)[None, :]
    live = offset_in_doc + 1 < lengths[row_document][:, None]
    start = docs.offsets[:-1][row_document][:, None] + offset_in_doc
    contexts = np.where(live, docs.tokens[np.where(live, start, 0)], 0)
    targets = np.where(live, docs.tokens[np.where(live, start + 1, 0)], 0)
    position_weights = np.where(live, weights[row_document][:, None], 0.0)
    return DocumentRows(TokenBatch(contexts, targets, position_weights), row_document)
