"""Streaming, sharded, packed, deterministic token-corpus pipeline.

Over a pre-tokenized corpus (any sequence of 1-D integer token arrays, one per
document — a list in RAM or a lazy memory-mapped collection), this module provides:

- :func:`global_document_order` — the epoch's order of all documents, a pure function
  of ``(num_documents, seed, epoch)``, with an optional ``sequence_selector`` curriculum
  hook;
- :func:`shard_documents_for_rank` — rank ``r`` of ``W`` takes ``order[r::W]``
  (disjoint, complete);
- :func:`pack_documents` / :class:`PackedCorpus` — concatenate-and-chunk packing into
  rows of ``block + 1`` tokens at stride ``block`` with a ``loss_mask`` that is False only
  on the padding of the final row;
- :class:`StreamingCorpus` — one rank's epochs as batches, streamed in
  O(batch_size x block) memory, resumable from a two-integer cursor.

Every argument and every token id is validated where it enters (see
:mod:`mixle._checks`); ids stay int64 end to end. See ``docs/streaming.md``.
"""

from __future__ import annotations

from mixle.data._order import SequenceSelector, global_document_order, shard_documents_for_rank
from mixle.data._packing import PackedCorpus, pack_documents
from mixle.data._streaming import StreamingCorpus, current_rank_and_world_size

__all__ = [
    "PackedCorpus",
    "SequenceSelector",
    "StreamingCorpus",
    "current_rank_and_world_size",
    "global_document_order",
    "pack_documents",
    "shard_documents_for_rank",
]
