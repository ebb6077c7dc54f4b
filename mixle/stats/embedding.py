"""``CategoricalEmbedding``: one embedding table for a categorical variable, shareable.

Several leaves that model the same vocabulary (the experts of a mixture, say) can hold
the *same* ``CategoricalEmbedding`` object. Sharing is by reference: the table is one
``torch.nn.Parameter`` that every holder's module contains, so a step taken by any
holder's optimizer moves it for all of them — and, because it is a parameter of each
holder, it changes each holder's revision digest, which is what makes stale gradient
states of the other holders fail loudly instead of being applied to moved weights.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from mixle._checks import exact_int, positive_int
from mixle.errors import CheckpointError
from mixle.stats.registry import register, require_version, tensors_from_blob, tensors_to_blob

__all__ = ["CategoricalEmbedding"]


@register("CategoricalEmbedding")
class CategoricalEmbedding(nn.Module):
    """A ``(vocab, dim)`` embedding table with seeded initialisation.

    Parameters
    ----------
    vocab
        Number of categories (token ids ``0 .. vocab - 1``).
    dim
        Embedding width.
    seed
        Seed of the initialisation (normal, std 0.02); equal seeds give bitwise-equal
        tables on every machine (initialisation runs on CPU).
    device, dtype
        Where the table lives and its dtype (default ``float32``).

    Raises
    ------
    ArgumentError
        ``vocab`` or ``dim`` is not a positive integer, ``seed`` is not an integer.
    """

    weight: nn.Parameter

    def __init__(
        self,
        vocab: int,
        dim: int,
        *,
        seed: int = 0,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.vocab = positive_int("vocab", vocab)
        self.dim = positive_int("dim", dim)
        generator = torch.Generator().manual_seed(exact_int("seed", seed))
        table = torch.empty(self.vocab, self.dim, dtype=dtype)
        nn.init.normal_(table, mean=0.0, std=0.02, generator=generator)
        self.weight = nn.Parameter(table.to(device))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Return the rows of ``ids`` (any shape of int64 ids in ``[0, vocab)``)."""
        return nn.functional.embedding(ids, self.weight)

    def extra_repr(self) -> str:
        return f"vocab={self.vocab}, dim={self.dim}"

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"type", "version", "vocab", "dim", "weights"}`` (weights as a blob)."""
        return {
            "type": "CategoricalEmbedding",
            "version": 1,
            "vocab": self.vocab,
            "dim": self.dim,
            "weights": tensors_to_blob({"weight": self.weight}),
        }

    @classmethod
    def from_dict(
        cls, d: dict[str, Any], *, device: str | torch.device = "cpu"
    ) -> CategoricalEmbedding:
        """Rebuild a table written by :meth:`to_dict` (a new, unshared object).

        Raises
        ------
        CheckpointError
            The dict has another version, or its weights do not match ``vocab``/``dim``.
        """
        require_version(d, "CategoricalEmbedding dict")
        state = tensors_from_blob(d.get("weights"), "CategoricalEmbedding weights")
        weight = state.get("weight")
        out = cls(d["vocab"], d["dim"], device="cpu")
        if not isinstance(weight, torch.Tensor) or tuple(weight.shape) != (out.vocab, out.dim):
            raise CheckpointError(
                f"CategoricalEmbedding weights must have shape ({out.vocab}, {out.dim})."
            )
        with torch.no_grad():
            out.weight = nn.Parameter(weight.clone())
        return out.to(device)
