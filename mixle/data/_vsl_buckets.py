"""Variable-sequence-length buckets: every document cut into power-of-two pieces.

The buckets are the powers of two ``min_length, 2 * min_length, ..., block``
(:func:`bucket_lengths`). A row of bucket ``L`` holds one *piece* of one document:
``L`` consecutive targets, i.e. tokens ``[start, start + L + 1)`` of the document
(``context = tokens[start : start + L]``, ``targets = tokens[start + 1 : start + L + 1]``),
so consecutive pieces of a document overlap by one token, as consecutive packed rows
do, and every target of the document is in exactly one piece.

How a document of ``n`` tokens (``T = n - 1`` targets; none when ``n < 2``) is cut, in
document order:

1. ``T // block`` pieces of ``block`` targets (the longest bucket);
2. the remainder ``R = T % block`` in binary, longest first: one piece of ``L`` targets
   for every bucket length ``L`` whose bit is set in ``R`` (OLMo-core's power-of-two
   decomposition);
3. the last ``R % min_length`` targets (the bits below the smallest bucket), if any:
   with ``remainder="pad"`` (the default) one piece in the smallest bucket holding them
   and padded to ``min_length`` (loss masked), so no target is lost — at most
   ``min_length - 1`` padded positions per document; with ``remainder="drop"`` they are
   not trained on (OLMo-core drops them).

A document shorter than ``min_length + 1`` tokens is thus one padded piece (``"pad"``)
or nothing (``"drop"``).

:class:`BucketPieces` keeps, per bucket, the documents that have pieces there (int64
document indices; the longest bucket also the cumulative piece counts), built once with
vectorised numpy over ``lengths`` — O(documents) time and memory, the only
O(documents) work of the stream. A piece is then found from its ordinal in its bucket
in O(log documents) (:meth:`BucketPieces.pieces`), and its start follows from the
document's length in closed form; the inverse, a document's pieces with their
ordinals (:meth:`BucketPieces.of_document`), is as cheap: O(log documents) per bucket.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mixle._checks import one_of, positive_int
from mixle.errors import ArgumentError

__all__ = ["REMAINDERS", "BucketPieces", "DocumentPieces", "PieceRows", "bucket_lengths"]

REMAINDERS = ("pad", "drop")


def _power_of_two(name: str, value: int) -> int:
    value = positive_int(name, value)
    if value & (value - 1):
        raise ArgumentError(f"`{name}` must be a power of two. Got {value} instead.")
    return value


def bucket_lengths(min_length: int, block: int) -> tuple[int, ...]:
    """``(min_length, 2 * min_length, ..., block)``: the bucket lengths, shortest first.

    Raises
    ------
    ArgumentError
        ``min_length`` or ``block`` is not a positive power of two, or ``min_length``
        exceeds ``block`` (the schedule would name no bucket).
    """
    min_length = _power_of_two("min_length", min_length)
    block = _power_of_two("block", block)
    if min_length > block:
        raise ArgumentError(
            f"`min_length` ({min_length}) must not exceed `block` ({block}): the bucket "
            "schedule would name no bucket."
        )
    return tuple(min_length << k for k in range((block // min_length).bit_length()))


@dataclass(frozen=True, slots=True)
class PieceRows:
    """Pieces of one bucket: per row the document, its first token and its real targets."""

    documents: np.ndarray
    starts: np.ndarray
    targets: np.ndarray


@dataclass(frozen=True, slots=True)
class DocumentPieces:
    """One document's pieces, in document order: per piece its bucket, its ordinal among
    the bucket's pieces (as :meth:`BucketPieces.pieces` counts them), its first token
    and its real targets (int64 arrays of one length)."""

    buckets: np.ndarray
    ordinals: np.ndarray
    starts: np.ndarray
    targets: np.ndarray


class BucketPieces:
    """The pieces of every document in every bucket (module docstring).

    Parameters
    ----------
    lengths
        Every document's token count, int64, in corpus order.
    min_length, block
        Powers of two, ``min_length <= block`` (:func:`bucket_lengths`).
    remainder
        ``"pad"`` or ``"drop"``: what becomes of the targets below ``min_length``.
    """

    def __init__(
        self, lengths: np.ndarray, *, min_length: int, block: int, remainder: str = "pad"
    ) -> None:
        self.lengths_of_buckets = bucket_lengths(min_length, block)
        self.min_length, self.block = min_length, block
        self.remainder = one_of("remainder", remainder, REMAINDERS)
        self._lengths = np.asarray(lengths, dtype=np.int64)
        targets = np.maximum(self._lengths - 1, 0)
        full = targets // block
        rest = targets % block
        self._full_documents = np.flatnonzero(full)
        self._full_ends = np.cumsum(full[self._full_documents])
        # Bucket k < K - 1 holds one piece of every document whose remainder has bit L_k.
        self._bit_documents = [
            np.flatnonzero(rest & length) for length in self.lengths_of_buckets[:-1]
        ]
        tail = rest & (min_length - 1)
        self._tail_documents = np.flatnonzero(tail) if self.remainder == "pad" else _EMPTY
        self.counts = tuple(self._count(k) for k in range(self.num_buckets))

    @property
    def num_buckets(self) -> int:
        return len(self.lengths_of_buckets)

    def bucket_name(self, bucket: int) -> str:
        """``"bucket 2 (length 256)"``: a bucket as messages name it."""
        return f"bucket {bucket} (length {self.lengths_of_buckets[bucket]})"

    def _regular(self, bucket: int) -> int:
        """Pieces of ``bucket`` that are not padded tails."""
        if bucket == self.num_buckets - 1:
            return int(self._full_ends[-1]) if self._full_ends.size else 0
        return len(self._bit_documents[bucket])

    def _count(self, bucket: int) -> int:
        return self._regular(bucket) + (len(self._tail_documents) if bucket == 0 else 0)

    def pieces(self, bucket: int, ordinals: np.ndarray) -> PieceRows:
        """The pieces at ``ordinals`` (each in ``[0, counts[bucket])``) of ``bucket``.

        Ordinals count the bucket's pieces in corpus order: the regular pieces by
        document (and, in the longest bucket, by position inside it), then, in the
        smallest bucket, the padded tails.
        """
        ordinals = np.asarray(ordinals, dtype=np.int64)
        length = self.lengths_of_buckets[bucket]
        regular = self._regular(bucket)
        is_tail = ordinals >= regular
        documents = np.empty(ordinals.shape, dtype=np.int64)
        starts = np.empty(ordinals.shape, dtype=np.int64)
        targets = np.full(ordinals.shape, length, dtype=np.int64)
        head = ordinals[~is_tail]
        if bucket == self.num_buckets - 1:
            slot = np.searchsorted(self._full_ends, head, side="right")
            before = np.where(slot > 0, self._full_ends[np.maximum(slot - 1, 0)], 0)
            documents[~is_tail] = self._full_documents[slot]
            starts[~is_tail] = (head - before) * self.block
        else:
            docs = self._bit_documents[bucket][head]
            documents[~is_tail] = docs
            starts[~is_tail] = self._prefix(docs, 2 * length)
        if is_tail.any():
            docs = self._tail_documents[ordinals[is_tail] - regular]
            documents[is_tail] = docs
            starts[is_tail] = self._prefix(docs, self.min_length)
            targets[is_tail] = (self._lengths[docs] - 1) % self.min_length
        return PieceRows(documents, starts, targets)

    def of_document(self, document: int) -> DocumentPieces:
        """The pieces of ``document`` (a valid index), in document order: the inverse of
        :meth:`pieces`, O(log documents) per bucket plus one entry per piece."""
        targets = max(int(self._lengths[document]) - 1, 0)
        found: list[tuple[int, np.ndarray, np.ndarray, int]] = []
        full = targets // self.block
        if full:
            slot = int(np.searchsorted(self._full_documents, document))
            before = int(self._full_ends[slot - 1]) if slot else 0
            inside = np.arange(full, dtype=np.int64)
            found.append((self.num_buckets - 1, before + inside, inside * self.block, self.block))
        rest = targets % self.block
        for bucket in reversed(range(self.num_buckets - 1)):  # longest first, as cut
            length = self.lengths_of_buckets[bucket]
            if rest & length:
                ordinal = int(np.searchsorted(self._bit_documents[bucket], document))
                start = targets - targets % (2 * length)
                found.append((bucket, np.array([ordinal]), np.array([start]), length))
        tail = rest & (self.min_length - 1)
        if tail and self.remainder == "pad":
            ordinal = self._regular(0) + int(np.searchsorted(self._tail_documents, document))
            found.append((0, np.array([ordinal]), np.array([targets - tail]), tail))
        if not found:
            return DocumentPieces(_EMPTY, _EMPTY, _EMPTY, _EMPTY)
        return DocumentPieces(
            np.concatenate([np.full(len(o), b, dtype=np.int64) for b, o, _, _ in found]),
            np.concatenate([o for _, o, _, _ in found]).astype(np.int64),
            np.concatenate([s for _, _, s, _ in found]).astype(np.int64),
            np.concatenate([np.full(len(o), t, dtype=np.int64) for _, o, _, t in found]),
        )

    def _prefix(self, documents: np.ndarray, granule: int) -> np.ndarray:
        """Targets of ``documents`` before their pieces shorter than ``granule``: the full
        pieces plus the remainder's bits of ``granule`` and above."""
        targets = self._lengths[documents] - 1
        return targets - targets % granule


_EMPTY = np.zeros(0, dtype=np.int64)
