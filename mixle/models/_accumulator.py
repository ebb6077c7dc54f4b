"""Foldable weighted-gradient accumulation for the streaming transformer leaf.

See :mod:`mixle.models.streaming_transformer_leaf` for the model-level story; this
module holds the pieces a data-parallel worker needs: the :class:`StreamingGradientState`
it produces and the accumulator (and factory) that computes it at a pinned revision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from mixle.errors import ArgumentError, ArgumentTypeError, CheckpointError, RevisionMismatchError
from mixle.models._documents import StreamingDocumentEncoder, TokenDocuments, document_rows
from mixle.models._inputs import (
    StreamingTokenEncoder,
    TokenBatch,
    TokenPairs,
    as_device,
    as_observation,
    parse_batch,
    positive_float,
)
from mixle.models._revision import revision_digest, revision_token
from mixle.models._transformer import CausalTransformerLM
from mixle.stats.base import (
    SequenceEncodableStatisticAccumulator,
    StatisticAccumulatorFactory,
    as_weights,
)
from mixle.stats.embedding import CategoricalEmbedding
from mixle.stats.registry import register, require_version, tensors_from_blob, tensors_to_blob

__all__ = [
    "StreamingGradientState",
    "StreamingTransformerAccumulator",
    "StreamingTransformerAccumulatorFactory",
    "check_module",
    "model_logits",
    "module_embedding",
    "trainable_parameters",
]


_TRAIN_ROWS = 256  # document rows per forward/backward pass (bounds activation memory)


def trainable_parameters(module: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """Return ``(name, parameter)`` for every parameter that requires grad, in order."""
    return [(name, p) for name, p in module.named_parameters() if p.requires_grad]


def module_embedding(module: nn.Module) -> CategoricalEmbedding | None:
    """Return the token embedding of a :class:`CausalTransformerLM` (``None`` otherwise)."""
    return module.embedding if isinstance(module, CausalTransformerLM) else None


def check_module(module: Any) -> tuple[nn.Module, int, int]:
    """Return ``(module, vocab, block)``; the module must carry integer ``vocab``/``block``."""
    if not isinstance(module, nn.Module):
        raise ArgumentTypeError(
            f"`module` must be a torch.nn.Module. Got {type(module).__name__} instead."
        )
    for attr in ("vocab", "block"):
        if not isinstance(getattr(module, attr, None), int):
            raise ArgumentTypeError(
                f"`module` must have an integer `{attr}` attribute (see CausalTransformerLM)."
            )
    return module, int(getattr(module, "vocab")), int(getattr(module, "block"))  # noqa: B009


def model_logits(
    module: nn.Module,
    ids: torch.Tensor,
    last_only: bool,
    sequence_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Return ``(b, t, vocab)`` logits, or ``(b, vocab)`` for the last position only;
    with ``sequence_ids`` (a :class:`CausalTransformerLM` only) attention stays inside
    each packed sequence.

    Raises
    ------
    ArgumentTypeError
        ``sequence_ids`` for a module that cannot mask documents.
    """
    if isinstance(module, CausalTransformerLM):
        return module(ids, last_only=last_only, sequence_ids=sequence_ids)
    if sequence_ids is not None:
        raise ArgumentTypeError(
            f"document masking needs a CausalTransformerLM. Got {type(module).__name__}."
        )
    logits = module(ids)
    return logits[:, -1] if last_only else logits


@register("StreamingGradientState")
@dataclass(frozen=True, slots=True)
class StreamingGradientState:
    """Foldable weighted-gradient state computed at one exact model revision.

    Attributes
    ----------
    base_sha256
        Hex SHA-256 of the parameters the gradients were computed at.
    parameter_names
        Names of the trainable parameters, in ``named_parameters`` order.
    gradient_sums
        ``name -> sum_i w_i * grad(loss_i)``: the weighted gradient numerator.
    loss_sum
        ``sum_i w_i * loss_i`` (next-token negative log-likelihood, nats).
    effective_weight
        ``sum_i w_i``; the mean gradient is ``gradient_sums / effective_weight``.
    rows, batches
        Context rows and ``seq_update`` calls folded in.
    """

    base_sha256: str
    parameter_names: tuple[str, ...]
    gradient_sums: dict[str, torch.Tensor]
    loss_sum: float
    effective_weight: float
    rows: int
    batches: int

    @property
    def mean_loss(self) -> float:
        """Return the weighted mean loss ``loss_sum / effective_weight`` (NaN if no weight)."""
        if self.effective_weight == 0:
            return math.nan
        return self.loss_sum / self.effective_weight

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-able dict; the gradient sums travel as a weights-only blob."""
        return {
            "type": "StreamingGradientState",
            "version": 1,
            "base_sha256": self.base_sha256,
            "parameter_names": list(self.parameter_names),
            "gradient_sums": tensors_to_blob(self.gradient_sums),
            "loss_sum": self.loss_sum,
            "effective_weight": self.effective_weight,
            "rows": self.rows,
            "batches": self.batches,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StreamingGradientState:
        """Rebuild a state written by :meth:`to_dict` (tensors on CPU)."""
        require_version(d, "StreamingGradientState")
        sums = tensors_from_blob(d["gradient_sums"], "gradient sums")
        names = tuple(d["parameter_names"])
        if set(sums) != set(names):
            raise CheckpointError("gradient sums do not match the listed parameter names.")
        return cls(
            str(d["base_sha256"]),
            names,
            sums,
            float(d["loss_sum"]),
            float(d["effective_weight"]),
            int(d["rows"]),
            int(d["batches"]),
        )


class StreamingTransformerAccumulator(SequenceEncodableStatisticAccumulator):
    """Accumulate foldable weighted gradients at one exact model revision.

    The accumulator pins the module's revision when it is made; any later change to
    the parameters makes ``seq_update`` raise instead of mixing gradients of two models.
    Gradients are taken with ``torch.autograd.grad``, so neither the parameters nor
    their ``.grad`` fields are touched.

    Parameters
    ----------
    module
        The live module (a :class:`CausalTransformerLM` or any module with integer
        ``vocab``/``block`` attributes returning ``(b, t, vocab)`` logits).
    lr
        Learning rate of the estimator this accumulator feeds (kept with the
        accumulator so a worker can report which run it belongs to).
    device
        Where inputs are moved and gradients are summed; the module must live there.
    observation
        ``"pair"`` (``seq_update`` takes :class:`TokenPairs`) or ``"document"`` (it takes
        :class:`~mixle.models._documents.TokenDocuments`, one weight per document; see
        :mod:`mixle.models._documents`).
    """

    def __init__(
        self,
        module: nn.Module,
        lr: float = 3.0e-3,
        device: Any = "cpu",
        observation: str = "pair",
    ) -> None:
        self.module, self.vocab, self.block = check_module(module)
        self.lr = positive_float("lr", lr)
        self.device = as_device(device)
        self.observation = as_observation(observation)
        params = trainable_parameters(module)
        self._names = tuple(name for name, _ in params)
        self._params = [p for _, p in params]
        self._token = revision_token(module)
        self._digest: str | None = None
        self._sums: list[torch.Tensor] | None = None
        self._loss_sum: torch.Tensor | float = 0.0
        self._weight = 0.0
        self._rows = 0
        self._batches = 0

    @property
    def base_sha256(self) -> str:
        """The pinned revision digest (computed on first use, cached per revision)."""
        if self._digest is None:
            self.check_pinned()
            self._digest = revision_digest(self.module)
        return self._digest

    @property
    def parameters(self) -> list[nn.Parameter]:
        """The trainable parameters gradients are taken for, in ``parameter_names`` order."""
        return list(self._params)

    @property
    def effective_weight(self) -> float:
        return self._weight

    def check_pinned(self) -> None:
        """Raise :class:`RevisionMismatchError` if the module moved since the pin."""
        if revision_token(self.module) != self._token:
            pinned = self._digest or "(not yet hashed)"
            raise RevisionMismatchError(
                f"the module's parameters changed after this accumulator pinned revision "
                f"{pinned}; make a fresh accumulator from the estimator's factory."
            )

    def accumulate(self, batch: TokenBatch) -> None:
        """Fold a validated :class:`TokenBatch` (see :func:`parse_batch`)."""
        self.check_pinned()
        ids = torch.from_numpy(batch.contexts).to(self.device, non_blocking=True)
        targets = torch.from_numpy(batch.targets).to(self.device, non_blocking=True)
        sequence_ids = (
            None
            if batch.sequence_ids is None
            else torch.from_numpy(batch.sequence_ids).to(self.device, non_blocking=True)
        )
        logits = model_logits(
            self.module, ids, last_only=not batch.dense, sequence_ids=sequence_ids
        )
        vocab = logits.shape[-1]
        nll = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1), reduction="none")
        weights = torch.from_numpy(batch.weights.reshape(-1)).to(self.device, non_blocking=True)
        loss = (nll * weights.to(nll.dtype)).sum()
        grads = torch.autograd.grad(loss, self._params, allow_unused=True)
        fresh = [
            torch.zeros_like(p) if g is None else g
            for g, p in zip(grads, self._params, strict=True)
        ]
        if self._sums is None:
            self._sums = fresh
        else:
            torch._foreach_add_(self._sums, fresh)
        self._loss_sum = self._loss_sum + loss.detach().double()
        self._weight += float(batch.weights.sum(dtype=np.float64))
        self._rows += int(batch.contexts.shape[0])
        self._batches += 1

    def seq_update(self, enc: Any, weights: Any, estimate: Any) -> None:
        """Accumulate one weighted gradient numerator without mutating the shared model.

        ``enc`` comes from :meth:`acc_to_encoder`: a :class:`TokenPairs` (one weight per
        pair) or, for document observations, a ``TokenDocuments`` (one weight per
        document, applied to each of its predicted tokens; documents of weight 0 are
        skipped). ``estimate`` is unused: gradients are taken at the pinned live module.

        Raises
        ------
        RevisionMismatchError
            The module changed since this accumulator was made.
        ArgumentError, TokenIdError
            Bad weights, context width or token ids, or the other observation kind.
        """
        if self.observation == "document":
            if not isinstance(enc, TokenDocuments):
                raise ArgumentTypeError(
                    "`enc` must come from StreamingDocumentEncoder.seq_encode (this leaf "
                    f"observes documents). Got {type(enc).__name__}."
                )
            self._accumulate_documents(enc, as_weights(weights, len(enc)))
            return
        if not isinstance(enc, TokenPairs):
            raise ArgumentTypeError(
                f"`enc` must come from StreamingTokenEncoder.seq_encode. Got {type(enc).__name__}."
            )
        w = as_weights(weights, len(enc))
        batch = parse_batch((enc.contexts, enc.tokens), self.vocab, self.block)
        self.accumulate(TokenBatch(batch.contexts, batch.targets, w))

    def _accumulate_documents(self, docs: TokenDocuments, weights: np.ndarray) -> None:
        self.check_pinned()
        keep = np.flatnonzero(weights > 0)
        if keep.shape[0] < len(docs):
            docs, weights = docs.take(keep), weights[keep]
        rows = document_rows(docs, self.block, weights).batch
        for start in range(0, rows.contexts.shape[0], _TRAIN_ROWS):
            part = slice(start, start + _TRAIN_ROWS)
            self.accumulate(TokenBatch(rows.contexts[part], rows.targets[part], rows.weights[part]))

    def update(self, x: Any, weight: float, estimate: Any) -> None:
        """Accumulate one weighted ``(context, token)`` gradient."""
        enc = self.acc_to_encoder().seq_encode([x])
        self.seq_update(enc, np.array([weight], dtype=np.float64), estimate)

    def initialize(self, x: Any, weight: float, rng: np.random.Generator) -> None:
        """Initialize through the same gradient accumulation path (``rng`` unused)."""
        self.update(x, weight, None)

    def seq_initialize(self, enc: Any, weights: Any, rng: np.random.Generator) -> None:
        """Initialize a batch through the same gradient accumulation path (``rng`` unused)."""
        self.seq_update(enc, weights, None)

    def _sums_or_zeros(self) -> list[torch.Tensor]:
        if self._sums is None:
            self._sums = [torch.zeros_like(p) for p in self._params]
        return self._sums

    def combine(self, other: Any) -> StreamingTransformerAccumulator:
        """Sum worker gradients only when they were computed at the identical base revision.

        ``other`` is another accumulator or a :class:`StreamingGradientState`.

        Raises
        ------
        RevisionMismatchError
            Different revision digests or parameter names (both sides named).
        """
        state = other.value() if isinstance(other, StreamingTransformerAccumulator) else other
        if not isinstance(state, StreamingGradientState):
            raise ArgumentTypeError(
                f"can only combine with a StreamingTransformerAccumulator or StreamingGradientState. "
                f"Got {type(other).__name__}."
            )
        self._check_compatible(state)
        torch._foreach_add_(
            self._sums_or_zeros(), [state.gradient_sums[n].to(self.device) for n in self._names]
        )
        self._loss_sum = self._loss_sum + state.loss_sum
        self._weight += state.effective_weight
        self._rows += state.rows
        self._batches += state.batches
        return self

    def _check_compatible(self, state: StreamingGradientState) -> None:
        if state.base_sha256 != self.base_sha256:
            raise RevisionMismatchError(
                f"gradient states were computed at different model revisions: "
                f"{self.base_sha256} (this accumulator) vs {state.base_sha256} (other)."
            )
        if tuple(state.parameter_names) != self._names:
            raise RevisionMismatchError(
                f"gradient states at revision {self.base_sha256} cover different parameters: "
                f"{list(self._names)} vs {list(state.parameter_names)}."
            )

    def value(self) -> StreamingGradientState:
        """Return model-sized gradients and weighted telemetry (copies), never the corpus."""
        sums = self._sums_or_zeros()
        return StreamingGradientState(
            base_sha256=self.base_sha256,
            parameter_names=self._names,
            gradient_sums={n: s.detach().clone() for n, s in zip(self._names, sums, strict=True)},
            loss_sum=float(self._loss_sum),
            effective_weight=self._weight,
            rows=self._rows,
            batches=self._batches,
        )

    def from_value(self, v: Any) -> StreamingTransformerAccumulator:
        """Restore a complete foldable gradient state (it must match the pinned revision)."""
        if not isinstance(v, StreamingGradientState):
            raise ArgumentTypeError(
                f"`v` must be a StreamingGradientState. Got {type(v).__name__}."
            )
        self._check_compatible(v)
        self._sums = [v.gradient_sums[n].detach().to(self.device).clone() for n in self._names]
        self._loss_sum = v.loss_sum
        self._weight = v.effective_weight
        self._rows = v.rows
        self._batches = v.batches
        return self

    def acc_to_encoder(self) -> StreamingTokenEncoder | StreamingDocumentEncoder:
        """Return the encoder expected by this accumulator (pairs or documents)."""
        if self.observation == "document":
            return StreamingDocumentEncoder(self.vocab)
        return StreamingTokenEncoder(self.vocab, self.block)

    def loss_tensor(self) -> Any:
        """Return the weighted loss sum without synchronising the device (tensor or float)."""
        return self._loss_sum

    def mean_gradients(self) -> list[torch.Tensor]:
        """Return ``gradient_sums / effective_weight`` in parameter order (fresh tensors)."""
        if self._weight <= 0:
            raise ArgumentError(
                "cannot take a step from zero total weight: every observation had weight 0."
            )
        return list(torch._foreach_div(self._sums_or_zeros(), self._weight))


class StreamingTransformerAccumulatorFactory(StatisticAccumulatorFactory):
    """Factory for streaming transformer accumulators sharing a live module.

    Every accumulator it makes pins the module's revision *at the time of* ``make()``:
    make workers' accumulators after the previous ``estimate`` has been applied.
    """

    def __init__(
        self,
        module: nn.Module,
        lr: float = 3.0e-3,
        device: Any = "cpu",
        observation: str = "pair",
    ) -> None:
        self.module, _, _ = check_module(module)
        self.lr = positive_float("lr", lr)
        self.device = as_device(device)
        self.observation = as_observation(observation)

    def make(self) -> StreamingTransformerAccumulator:
        """Create a fresh accumulator around the shared live module."""
        return StreamingTransformerAccumulator(self.module, self.lr, self.device, self.observation)
