"""Attention boundaries of packed rows: ``cu_seqlens`` for varlen kernels, sequence ids.

A packed row holds several documents (or pieces of them); attention confined to each
needs their boundaries in the forms kernels take. They are computed from the rows'
per-token ``document_ids`` and ``position_ids``, so they hold for either packing: a
*sequence* of a row is a maximal run of input tokens of one document with consecutive
positions (a document that continues from the row before starts a sequence at slot 0);
the padding at a row's end is one sequence of its own (its targets are masked).

- ``cu_seqlens``: ``(b, block + 1)`` int32 per row: the sequences' start slots, then
  ``block``, padded with ``block`` (empty sequences) to the fixed length ``block + 1``
  (a row has at most ``block`` sequences), so a default collate stacks rows; the
  layout of Megatron's padded ``cu_seqlens`` and flash-attention's varlen kernels.
- ``max_seqlen``: ``(b,)`` int32, the longest sequence of each row.
- ``sequence_ids``: ``(b, block)`` int64, the index of each token's sequence in its row.

The position ids restarting at every document are the batch's ``position_ids``.
"""

from __future__ import annotations

import numpy as np

from mixle.data._batch import Batch
from mixle.errors import ArgumentError

__all__ = ["AttentionBoundaries", "attention_boundaries", "with_attention_boundaries"]

AttentionBoundaries = tuple[np.ndarray, np.ndarray, np.ndarray]
"""``(cu_seqlens, max_seqlen, sequence_ids)``, see the module docstring."""


def attention_boundaries(document_ids: np.ndarray, position_ids: np.ndarray) -> AttentionBoundaries:
    """The boundaries of rows whose tokens have ``document_ids`` and ``position_ids``
    (``(b, block)`` int64, ``-1`` marking padding), vectorised: O(b x block).

    Raises
    ------
    ArgumentError
        The two arrays are not of one 2-D shape.
    """
    documents = np.asarray(document_ids)
    positions = np.asarray(position_ids)
    if documents.ndim != 2 or documents.shape != positions.shape:
        raise ArgumentError(
            "`document_ids` and `position_ids` must be 2-D arrays of one shape. "
            f"Got {documents.shape} and {positions.shape} instead."
        )
    count, block = documents.shape
    starts = np.ones((count, block), dtype=np.bool_)
    if block > 1:
        same = documents[:, 1:] == documents[:, :-1]
        follows = (positions[:, 1:] == positions[:, :-1] + 1) | (documents[:, 1:] < 0)
        starts[:, 1:] = ~(same & follows)
    sequence_ids = np.cumsum(starts, axis=1, dtype=np.int64) - 1
    cu_seqlens = np.full((count, block + 1), block, dtype=np.int32)
    rows, slots = np.nonzero(starts)
    cu_seqlens[rows, sequence_ids[rows, slots]] = slots
    lengths = np.diff(cu_seqlens, axis=1)
    max_seqlen = lengths.max(axis=1).astype(np.int32) if block else np.zeros(count, np.int32)
    return cu_seqlens, max_seqlen, sequence_ids


def with_attention_boundaries(batch: Batch[np.ndarray]) -> Batch[np.ndarray]:
    """``batch`` with ``cu_seqlens``, ``max_seqlen`` and ``sequence_ids`` filled in.

    Raises
    ------
    ArgumentError
        The batch has no ``document_ids`` and ``position_ids`` (windows, or rows read
        without them).
    """
    if batch.document_ids is None or batch.position_ids is None:
        raise ArgumentError(
            "attention boundaries need packed rows with document_ids and position_ids "
            "(`attention_boundaries=True` on a StreamingCorpus provides them)."
        )
    cu_seqlens, max_seqlen, sequence_ids = attention_boundaries(
        batch.document_ids, batch.position_ids
    )
    return batch.replace(cu_seqlens=cu_seqlens, max_seqlen=max_seqlen, sequence_ids=sequence_ids)
