"""Attention boundaries as torch kernels take them: a padding-free HF batch, a FlexAttention mask.

:func:`padding_free_collate` turns packed rows (the items of
:class:`mixle.hf.GlobalRowDataset` with ``document_ids=True``, or a
:class:`~mixle.data.Batch`) into the padding-free batch ``transformers`` models take
(the layout of its ``DataCollatorWithFlattening``): the ``b`` rows flattened into one
sequence of ``b * block`` tokens, with

- ``input_ids`` ``(1, N)``: the rows' contexts;
- ``shift_labels`` ``(1, N)``: the targets, ``-100`` where ``loss_mask`` is off — the
  causal-LM loss of ``transformers`` takes it as already shifted, so every target of
  every row counts once;
- ``labels`` ``(1, N)``: the same targets in the unshifted convention (token ``t`` is
  the label of position ``t - 1``; ``-100`` at each row's first token and where the
  pair is masked), for losses that ignore ``shift_labels`` (a row's last target is then
  lost); models compute a loss only when ``labels`` is given;
- ``position_ids`` ``(1, N)``: positions restarting at every sequence of every row,
  from which ``transformers`` derives a packed-sequence mask for ``sdpa``/``eager``
  attention;
- ``cu_seq_lens_q``/``cu_seq_lens_k`` (int32, the sequences' cumulative lengths over the
  ``N`` tokens, padding runs included as sequences) and ``max_length_q``/``max_length_k``:
  the flash-attention keyword arguments (``attn_implementation="flash_attention_2"``;
  linear-attention and convolution layers read these, not the positions).

A sequence is a run of one document's tokens with consecutive positions inside a row
(:func:`~mixle.data._attention.attention_boundaries`); a sequence never spans rows.

:func:`flex_document_mask` builds the FlexAttention ``BlockMask`` of causal attention
inside each sequence, for ``torch.nn.attention.flex_attention.flex_attention``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from mixle.data._attention import attention_boundaries
from mixle.data._batch import Batch
from mixle.errors import ArgumentError

__all__ = ["IGNORE_INDEX", "flex_document_mask", "padding_free_collate"]

#: The label ``transformers`` losses skip.
IGNORE_INDEX = -100


def _stack(rows: Sequence[Mapping[str, torch.Tensor]] | Batch[Any]) -> dict[str, np.ndarray]:
    """``context, targets, loss_mask, document_ids, position_ids`` as ``(b, block)`` numpy."""
    names = ("context", "targets", "loss_mask", "document_ids", "position_ids")
    if isinstance(rows, Batch):
        fields = rows.to_dict()
        missing = [name for name in names if name not in fields]
        stacked = {name: np.asarray(fields[name]) for name in names if name in fields}
    else:
        if not rows:
            raise ArgumentError("`rows` must hold at least one row. Got an empty list.")
        missing = [name for name in names if name not in rows[0]]
        stacked = {
            name: torch.stack([row[name] for row in rows]).numpy()
            for name in names
            if name in rows[0]
        }
    if missing:
        raise ArgumentError(
            f"padding_free_collate needs packed rows with {', '.join(missing)}: build the "
            "corpus with document_ids=True (or attention_boundaries=True)."
        )
    return stacked


def padding_free_collate(
    rows: Sequence[Mapping[str, torch.Tensor]] | Batch[Any],
) -> dict[str, torch.Tensor | int]:
    """The padding-free ``transformers`` batch of packed ``rows`` (module docstring).

    Raises
    ------
    ArgumentError
        No rows, or rows without ``document_ids``/``position_ids``.
    """
    stacked = _stack(rows)
    context, targets = stacked["context"], stacked["targets"]
    mask = stacked["loss_mask"].astype(bool)
    count, block = context.shape
    _, max_seqlen, sequence_ids = attention_boundaries(
        stacked["document_ids"], stacked["position_ids"]
    )
    shift_labels = np.where(mask, targets, IGNORE_INDEX)
    labels = np.full((count, block), IGNORE_INDEX, dtype=np.int64)
    labels[:, 1:] = np.where(mask[:, :-1], context[:, 1:], IGNORE_INDEX)
    starts = np.zeros((count, block), dtype=np.bool_)
    starts[:, 0] = True
    starts[:, 1:] = sequence_ids[:, 1:] != sequence_ids[:, :-1]
    slots = np.broadcast_to(np.arange(block), (count, block))
    first = np.maximum.accumulate(np.where(starts, slots, 0), axis=1)
    row_starts = np.nonzero(starts.reshape(-1))[0]
    cu_seq_lens = np.append(row_starts, count * block).astype(np.int32)
    longest = int(max_seqlen.max())

    def flat(array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array, dtype=np.int64).reshape(1, -1))

    cu = torch.from_numpy(cu_seq_lens)
    return {
        "input_ids": flat(context),
        "labels": flat(labels),
        "shift_labels": flat(shift_labels),
        "position_ids": flat(slots - first),
        "cu_seq_lens_q": cu,
        "cu_seq_lens_k": cu,
        "max_length_q": longest,
        "max_length_k": longest,
    }


def flex_document_mask(sequence_ids: torch.Tensor, *, device: str | torch.device = "cpu") -> Any:
    """The FlexAttention ``BlockMask`` of causal attention inside each sequence.

    ``sequence_ids`` is ``(b, t)`` (a packed batch's ``Batch.sequence_ids`` as a
    tensor). Pass the result as ``block_mask`` to
    ``torch.nn.attention.flex_attention.flex_attention``.
    """
    from torch.nn.attention.flex_attention import create_block_mask

    ids = torch.as_tensor(sequence_ids, device=device)
    if ids.ndim != 2:
        raise ArgumentError(f"`sequence_ids` must be (b, t). Got shape {tuple(ids.shape)}.")

    def document_causal(b: Any, h: Any, q: Any, kv: Any) -> Any:
        return (ids[b, q] == ids[b, kv]) & (q >= kv)

    count, length = ids.shape
    return create_block_mask(
        document_causal, B=count, H=None, Q_LEN=length, KV_LEN=length, device=device
    )
