"""Live estimators and embeddings shared across them: the contracts a mixture relies on.

Most estimators are pure: ``estimate`` turns a statistic into a new distribution. A
*live* estimator (the transformer leaf) instead owns a model and a persistent
optimizer; ``estimate`` takes one optimizer step on that model. A mixture treats such
components specially, through the protocols declared here (implementations need not
inherit):

* :class:`LiveEstimator` — ``current()`` returns the live distribution unchanged (a
  component that received no weight keeps its model), ``check(suff_stat)`` raises if the
  statistic is stale (so a mixture validates every component before stepping any).
* :class:`EmbeddingTiedEstimator` — the live model holds a
  :class:`~mixle.stats.CategoricalEmbedding` that other components may hold too. The
  mixture steps every component *except* the shared table, then steps the table once
  with the gradient of all of them (:class:`SharedEmbedding`).
* :class:`EmbeddingTiedDistribution` — serialises without the table, so a mixture stores
  a shared table once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import torch

from mixle.errors import CheckpointError
from mixle.stats.base import SequenceEncodableProbabilityDistribution
from mixle.stats.embedding import CategoricalEmbedding
from mixle.stats.registry import tensors_from_blob

__all__ = [
    "EmbeddingTiedDistribution",
    "EmbeddingTiedEstimator",
    "LiveEstimator",
    "OptimizerSlot",
    "SharedEmbedding",
]


class OptimizerSlot:
    """The persistent AdamW of one training run, shared by the objects that step it.

    Created lazily over the parameters first passed to :meth:`get`; a saved state dict
    (from :meth:`state_dict`) is loaded on creation. The learning rate given to
    :meth:`get` always wins over the one recorded in a loaded state.
    """

    def __init__(self, state: dict[str, Any] | None = None) -> None:
        self._optimizer: torch.optim.AdamW | None = None
        self._pending = state

    def get(self, parameters: Sequence[torch.nn.Parameter], lr: float) -> torch.optim.AdamW:
        """Return the optimizer (creating it over ``parameters`` the first time).

        Raises
        ------
        CheckpointError
            The pending saved state does not fit ``parameters``.
        """
        if self._optimizer is None:
            optimizer = torch.optim.AdamW(list(parameters), lr=lr)
            if self._pending is not None:
                try:
                    optimizer.load_state_dict(self._pending)
                except (ValueError, KeyError, RuntimeError) as exc:
                    raise CheckpointError(
                        f"optimizer state does not fit the module's parameters: {exc}"
                    ) from exc
                self._pending = None
            self._optimizer = optimizer
        for group in self._optimizer.param_groups:
            group["lr"] = lr
        return self._optimizer

    def state_dict(self) -> dict[str, Any] | None:
        """Return the optimizer's state dict (or the pending loaded one, or ``None``)."""
        if self._optimizer is not None:
            return self._optimizer.state_dict()
        return self._pending


@runtime_checkable
class LiveEstimator(Protocol):
    """An estimator that owns a live model and takes optimizer steps on it."""

    def current(self) -> SequenceEncodableProbabilityDistribution:
        """Return the live distribution as it is now, without a step."""

    def check(self, suff_stat: Any) -> None:
        """Raise (e.g. ``RevisionMismatchError``) if ``estimate(suff_stat)`` would refuse it."""


@runtime_checkable
class EmbeddingTiedEstimator(LiveEstimator, Protocol):
    """A live estimator whose model holds a :class:`CategoricalEmbedding`."""

    lr: float

    @property
    def embedding(self) -> CategoricalEmbedding | None:
        """The token embedding the model holds (``None``: none that can be shared)."""

    def embedding_gradient(self, suff_stat: Any) -> tuple[torch.Tensor, float]:
        """Return ``(gradient numerator of the embedding table, effective weight)``."""

    def estimate(
        self, nobs: float | None, suff_stat: Any, *, hold: CategoricalEmbedding | None = None
    ) -> SequenceEncodableProbabilityDistribution:
        """Take one step on every parameter except ``hold``'s table."""


@runtime_checkable
class EmbeddingTiedDistribution(Protocol):
    """A distribution whose model holds a :class:`CategoricalEmbedding`.

    ``to_dict(omit_embedding=True)`` leaves the table's weights out; the class's
    ``from_dict(d, embedding=table)`` then builds the model around ``table`` (shared).
    """

    lr: float

    @property
    def embedding(self) -> CategoricalEmbedding | None:
        """The token embedding the model holds."""

    def to_dict(self, *, omit_embedding: bool = False) -> dict[str, Any]:
        """Serialise, optionally without the embedding table's weights."""


class SharedEmbedding:
    """One embedding table shared by several mixture components, and its own optimizer.

    Each step applies AdamW once with the weighted mean gradient over everything that
    reached the table: ``sum_k G_k / sum_k W_k`` where ``G_k`` is component ``k``'s
    gradient numerator for the table and ``W_k`` its effective weight.

    Parameters
    ----------
    embedding
        The shared table.
    lr
        Its AdamW learning rate (torch's other defaults).
    optimizer_state
        A saved AdamW state dict or its blob string.
    """

    def __init__(
        self,
        embedding: CategoricalEmbedding,
        lr: float,
        optimizer_state: dict[str, Any] | str | None = None,
    ) -> None:
        self.embedding = embedding
        self.lr = lr
        if isinstance(optimizer_state, str):
            optimizer_state = tensors_from_blob(optimizer_state, "shared embedding optimizer state")
        self._slot = OptimizerSlot(optimizer_state)
        if optimizer_state is not None:
            self._slot.get([embedding.weight], lr)  # validate eagerly

    def step(self, contributions: Sequence[tuple[torch.Tensor, float]]) -> None:
        """Step the table once with ``sum(numerators) / sum(weights)`` (no-op at weight 0)."""
        total_weight = sum(weight for _, weight in contributions)
        if not contributions or total_weight <= 0:
            return
        weight = self.embedding.weight
        grad = torch.zeros_like(weight)
        for numerator, _ in contributions:
            grad.add_(numerator.to(weight.device, weight.dtype))
        weight.grad = grad.div_(total_weight)
        self._slot.get([weight], self.lr).step()
        weight.grad = None

    def state_dict(self) -> dict[str, Any] | None:
        """Return the table's AdamW state (``None`` before the first step)."""
        return self._slot.state_dict()
