"""Input handling for the streaming transformer leaf: encoding, batches, validation.

Everything that enters the leaf — ``(context, token)`` pairs, streamed micro-batches
of either shape, devices, learning rates — is validated here, once, at the boundary,
with messages that name the row and position of a bad token id.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from mixle._checks import as_token_ids, positive_int
from mixle.data._batch import Batch
from mixle.errors import ArgumentError, ArgumentTypeError, TokenIdError
from mixle.stats.base import DataSequenceEncoder

__all__ = [
    "StreamingTokenEncoder",
    "TokenBatch",
    "TokenPairs",
    "as_contexts",
    "as_device",
    "as_observation",
    "parse_batch",
    "positive_float",
]


def positive_float(name: str, value: Any) -> float:
    """Return ``value`` as a float, requiring a finite real number > 0 (bools rejected)."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.number):
        raise ArgumentTypeError(
            f"`{name}` must be a positive number. Got {value!r} ({type(value).__name__}) instead."
        )
    result = float(value)
    if not (math.isfinite(result) and result > 0):
        raise ArgumentError(f"`{name}` must be a finite positive number. Got {result!r} instead.")
    return result


OBSERVATIONS = ("pair", "document")


def as_observation(value: Any) -> str:
    """Validate the leaf's observation kind: ``"pair"`` or ``"document"``."""
    if value not in OBSERVATIONS:
        raise ArgumentError(
            f"`observation` must be 'pair' ((context, token) pairs) or 'document' (whole "
            f"token arrays). Got {value!r} instead."
        )
    return str(value)


def as_device(device: Any) -> torch.device:
    """Parse ``device``; a CUDA device must exist on this machine.

    Raises
    ------
    ArgumentError
        ``device`` is not a device spec, or names a CUDA device that is not available.
    """
    try:
        result = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ArgumentError(f"`device` must name a torch device. Got {device!r} instead.") from exc
    if result.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ArgumentError(f"`device` is {device!r} but CUDA is not available here.")
        if result.index is not None and result.index >= count:
            raise ArgumentError(
                f"`device` is {device!r} but only {count} CUDA device(s) are available."
            )
    return result


def _as_int_array(value: Any, what: str, ndim: int) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    array = np.asarray(value)
    if array.ndim != ndim:
        raise ArgumentTypeError(f"{what} must be {ndim}-D. Got shape {array.shape} instead.")
    if array.dtype.kind == "i" or (array.dtype.kind == "u" and array.dtype.itemsize < 8):
        array = array.astype(np.int64, copy=False)
    elif array.dtype.kind == "b":
        raise ArgumentTypeError(f"{what} must hold integer token ids. Got dtype bool instead.")
    else:
        array = as_token_ids(array.reshape(-1), what).reshape(array.shape)
    # torch.from_numpy needs non-negative strides and warns on read-only memory (mmap-backed
    # batches are read-only): hand torch a private contiguous copy only in those cases.
    if not array.flags.writeable or not array.flags.c_contiguous:
        array = np.array(array, dtype=np.int64, order="C")
    return array


def _check_range(ids: np.ndarray, vocab: int, what: str, live: np.ndarray | None = None) -> None:
    bad = (ids < 0) | (ids >= vocab)
    if live is not None:
        bad &= live
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        place = f"row {where[0]}, position {where[1]}" if len(where) == 2 else f"row {where[0]}"
        raise TokenIdError(
            f"{what} has token id {int(ids[where])} at {place}; ids must be in [0, {vocab})."
        )


def _check_context_width(width: int, block: int | None, what: str) -> None:
    if width < 1 or (block is not None and width > block):
        limit = f"1..{block}" if block is not None else "at least 1"
        raise ArgumentError(f"{what} must have {limit} positions. Got {width} instead.")


def as_contexts(value: Any, vocab: int, block: int) -> tuple[np.ndarray, bool]:
    """Validate one context (1-D) or a batch of them (2-D); return ``(contexts, was_single)``.

    Raises
    ------
    ArgumentError, TokenIdError
        Not 1-D or 2-D, width outside ``1..block``, or an id outside ``[0, vocab)``.
    """
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    array = np.asarray(value)
    single = array.ndim == 1
    if array.ndim not in (1, 2):
        raise ArgumentTypeError(
            f"contexts must be 1-D (one context) or 2-D (n, L). Got shape {array.shape} instead."
        )
    contexts = _as_int_array(array[None] if single else array, "contexts", 2)
    _check_context_width(contexts.shape[1], block, "each context")
    _check_range(contexts, vocab, "contexts")
    return contexts, single


@dataclass(frozen=True, slots=True)
class TokenPairs:
    """Encoded ``(context, next token)`` pairs: ``contexts (n, L)`` and ``tokens (n,)``, int64."""

    contexts: np.ndarray
    tokens: np.ndarray

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    def __getitem__(self, index: slice) -> TokenPairs:
        return TokenPairs(self.contexts[index], self.tokens[index])


@dataclass(frozen=True, slots=True)
class TokenBatch:
    """A validated training batch: ``weights`` has the shape of ``targets``.

    ``targets`` is ``(b,)`` (one next token per context, predicted from the last
    position) or ``(b, L)`` (dense teacher forcing, every position predicts the next).
    Masked-out targets and dead context positions are already zeroed, so the values
    a caller put there cannot influence anything.
    """

    contexts: np.ndarray
    targets: np.ndarray
    weights: np.ndarray
    #: ``(b, L)`` int64 sequence index of each context token in its row (packed rows
    #: read with attention boundaries): attention stays inside each sequence.
    sequence_ids: np.ndarray | None = None

    @property
    def dense(self) -> bool:
        return self.targets.ndim == 2


class StreamingTokenEncoder(DataSequenceEncoder):
    """Encode ``(context, token)`` pairs for scoring and training the transformer leaf.

    Parameters
    ----------
    vocab, block
        When given, ids must lie in ``[0, vocab)`` and contexts hold at most ``block``
        positions; ``None`` skips that check (the leaf checks again at its boundary).
    """

    def __init__(self, vocab: int | None = None, block: int | None = None) -> None:
        self.vocab = None if vocab is None else positive_int("vocab", vocab)
        self.block = None if block is None else positive_int("block", block)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StreamingTokenEncoder) and (other.vocab, other.block) == (
            self.vocab,
            self.block,
        )

    def __hash__(self) -> int:
        return hash(("StreamingTokenEncoder", self.vocab, self.block))

    def __repr__(self) -> str:
        return f"StreamingTokenEncoder(vocab={self.vocab}, block={self.block})"

    def seq_encode(self, x: Sequence[Any]) -> TokenPairs:
        """Encode a sequence of ``(context, token)`` pairs; all contexts share one length.

        Raises
        ------
        ArgumentError, TokenIdError
            A pair is malformed, contexts differ in length, or an id is out of range
            (the message names the pair).
        """
        if isinstance(x, TokenPairs):
            return self.encode_arrays(x.contexts, x.tokens)
        pairs = list(x)
        if not pairs:
            raise ArgumentError("`x` must hold at least one (context, token) pair. Got none.")
        contexts: list[np.ndarray] = []
        tokens = np.empty(len(pairs), dtype=np.int64)
        for i, pair in enumerate(pairs):
            if not isinstance(pair, tuple | list) or len(pair) != 2:
                raise ArgumentTypeError(f"pair {i} must be a (context, token) pair. Got {pair!r}.")
            context = as_token_ids(pair[0], f"context of pair {i}")
            if contexts and context.shape != contexts[0].shape:
                raise ArgumentError(
                    f"every context must have the same length; pair 0 has {contexts[0].shape[0]}, "
                    f"pair {i} has {context.shape[0]}."
                )
            contexts.append(context)
            tokens[i] = as_token_ids([pair[1]], f"token of pair {i}")[0]
        return self.encode_arrays(np.stack(contexts), tokens)

    def encode_arrays(self, contexts: Any, tokens: Any) -> TokenPairs:
        """Encode ``contexts (n, L)`` and ``tokens (n,)`` arrays without a Python loop."""
        ctx = _as_int_array(contexts, "`contexts`", 2)
        tok = _as_int_array(tokens, "`tokens`", 1)
        if ctx.shape[0] != tok.shape[0]:
            raise ArgumentError(
                f"`contexts` and `tokens` must have the same number of rows. "
                f"Got {ctx.shape[0]} and {tok.shape[0]} instead."
            )
        _check_context_width(ctx.shape[1], self.block, "each context")
        if self.vocab is not None:
            _check_range(ctx, self.vocab, "`contexts`")
            _check_range(tok, self.vocab, "`tokens`")
        return TokenPairs(ctx, tok)


def parse_batch(batch: Any, vocab: int, block: int) -> TokenBatch:
    """Validate one streamed micro-batch of either supported shape.

    * ``(context (b, L), next_tokens (b,))`` — from ``stream_token_source``/``TokenStream``;
      every row has weight 1.
    * ``(context (b, L), targets (b, L), loss_mask (b, L))`` — from ``StreamingCorpus``;
      position weights are the mask. Masked targets are replaced by 0 and context
      positions after a row's last unmasked target (which can influence no unmasked
      prediction, attention being causal) are replaced by 0, so pad ids — even ones
      outside the vocabulary — change nothing.

    A :class:`TokenPairs` is accepted as the first shape, and a
    :class:`mixle.data.Batch` as either, read by field name (no ``loss_mask``: the
    first); a packed ``Batch`` with ``sequence_ids`` (attention boundaries) keeps them,
    so the model confines attention to each document. This is the one place that knows batch layouts; extend it for new ones
    (e.g. per-position document ids).

    Raises
    ------
    ArgumentTypeError
        The batch is not one of the shapes above.
    ArgumentError, TokenIdError
        Shapes disagree, ``L`` is not in ``1..block``, or a live id is outside
        ``[0, vocab)`` (row and position named).
    """
    sequence_ids = None
    if isinstance(batch, TokenPairs):
        batch = (batch.contexts, batch.tokens)
    elif isinstance(batch, Batch):
        if batch.sequence_ids is not None and batch.loss_mask is not None:
            sequence_ids = np.ascontiguousarray(batch.sequence_ids, dtype=np.int64)
        batch = (
            (batch.context, batch.targets)
            if batch.loss_mask is None
            else (batch.context, batch.targets, batch.loss_mask)
        )
    if not isinstance(batch, tuple | list) or len(batch) not in (2, 3):
        raise ArgumentTypeError(
            "a batch must be (context, next_tokens) or (context, targets, loss_mask). "
            f"Got {type(batch).__name__} of length {len(batch) if isinstance(batch, tuple | list) else '-'}."
        )
    contexts = _as_int_array(batch[0], "batch context", 2)
    b, width = contexts.shape
    _check_context_width(width, block, "batch context")
    if len(batch) == 2:
        targets = _as_int_array(batch[1], "batch next_tokens", 1)
        if targets.shape[0] != b:
            raise ArgumentError(
                f"batch next_tokens must have one id per context row ({b}). Got {targets.shape[0]} instead."
            )
        _check_range(contexts, vocab, "batch context")
        _check_range(targets, vocab, "batch next_tokens")
        return TokenBatch(contexts, targets, np.ones(b, dtype=np.float32))
    targets = _as_int_array(batch[1], "batch targets", 2)
    mask = (
        batch[2].detach().cpu().numpy()
        if isinstance(batch[2], torch.Tensor)
        else np.asarray(batch[2])
    )
    for name, array in (("targets", targets), ("loss_mask", mask)):
        if array.shape != contexts.shape:
            raise ArgumentError(
                f"batch {name} must have the context's shape {contexts.shape}. Got {array.shape} instead."
            )
    if mask.dtype.kind not in "biuf":
        raise ArgumentTypeError(f"batch loss_mask must be boolean. Got dtype {mask.dtype} instead.")
    observed = mask.astype(bool)
    # live[i, j]: some target at or after j is observed, so context j can matter.
    live = np.flip(np.maximum.accumulate(np.flip(observed, axis=1), axis=1), axis=1)
    _check_range(contexts, vocab, "batch context", live)
    _check_range(targets, vocab, "batch targets", observed)
    contexts = np.where(live, contexts, 0)
    targets = np.where(observed, targets, 0)
    if sequence_ids is not None and sequence_ids.shape != contexts.shape:
        raise ArgumentError(
            f"batch sequence_ids must have the context's shape {contexts.shape}. "
            f"Got {sequence_ids.shape} instead."
        )
    return TokenBatch(contexts, targets, observed.astype(np.float32), sequence_ids)
