"""``CausalTransformerLM``: the causal pre-norm transformer the streaming leaf trains.

GPT-2-shaped: token embedding (a :class:`~mixle.stats.CategoricalEmbedding`, possibly
shared with other leaves) plus a learned position embedding, ``n_layer`` pre-norm blocks
(``x + attn(ln(x))``, ``x + mlp(ln(x))``) with causal multi-head self-attention through
``torch.nn.functional.scaled_dot_product_attention``, a final LayerNorm and a language
model head that is either tied to the token embedding or its own matrix. No dropout, so
a forward pass is a pure function of weights and inputs.

Initialisation is seeded and runs on CPU before the module moves to its device, so a
given ``seed`` gives bitwise-identical weights on every machine.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from mixle._checks import exact_int, positive_int
from mixle.errors import ArgumentError, ArgumentTypeError, CheckpointError
from mixle.stats.embedding import CategoricalEmbedding
from mixle.stats.registry import register, tensors_from_blob, tensors_to_blob

__all__ = ["CausalTransformerLM", "document_attention"]


def document_attention(sequence_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The attention mask and positions of rows packed with ``sequence_ids``.

    Returns a ``(b, 1, t, t)`` bool mask (True: query ``i`` attends key ``j``, i.e.
    ``j <= i`` in the same sequence) for
    :func:`~torch.nn.functional.scaled_dot_product_attention`, and ``(b, t)`` positions
    counted from each sequence's first token.
    """
    t = sequence_ids.shape[1]
    same = sequence_ids[:, :, None] == sequence_ids[:, None, :]
    causal = torch.ones(t, t, dtype=torch.bool, device=sequence_ids.device).tril()
    slots = torch.arange(t, device=sequence_ids.device).expand_as(sequence_ids)
    starts = torch.ones_like(sequence_ids, dtype=torch.bool)
    starts[:, 1:] = sequence_ids[:, 1:] != sequence_ids[:, :-1]
    first = torch.where(starts, slots, torch.zeros_like(slots)).cummax(dim=1).values
    return (same & causal)[:, None], slots - first


class _CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        shape = (b, t, self.n_head, d // self.n_head)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class _Block(nn.Module):
    def __init__(self, d_model: int, n_head: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = _CausalSelfAttention(d_model, n_head)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), mask)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


@register("CausalTransformerLM")
class CausalTransformerLM(nn.Module):
    """A causal pre-norm transformer language model over ``vocab`` token ids.

    Parameters
    ----------
    vocab
        Vocabulary size; inputs are int64 ids in ``[0, vocab)``.
    d_model, n_layer, n_head
        Width, depth and attention heads (``d_model`` must be divisible by ``n_head``).
    block
        Longest context (number of positions) the model accepts.
    embedding
        A :class:`CategoricalEmbedding` of shape ``(vocab, d_model)`` to use (and share)
        as the token embedding; ``None`` creates a private one.
    tie_head
        Use the token embedding as the output projection (default) instead of a
        separate ``(vocab, d_model)`` matrix.
    seed
        Initialisation seed (see module docstring). A shared ``embedding`` keeps its
        own weights.
    device
        Where the module lives.

    Raises
    ------
    ArgumentError
        A size is not a positive integer, ``d_model % n_head != 0``, or ``embedding``
        has the wrong shape.
    """

    def __init__(
        self,
        vocab: int,
        *,
        d_model: int = 128,
        n_layer: int = 4,
        n_head: int = 4,
        block: int = 64,
        embedding: CategoricalEmbedding | None = None,
        tie_head: bool = True,
        seed: int = 0,
        device: str | torch.device = "cpu",
    ) -> None:
        super().__init__()
        self.vocab = positive_int("vocab", vocab)
        self.d_model = positive_int("d_model", d_model)
        self.n_layer = positive_int("n_layer", n_layer)
        self.n_head = positive_int("n_head", n_head)
        self.block = positive_int("block", block)
        self.seed = exact_int("seed", seed)
        if not isinstance(tie_head, bool):
            raise ArgumentTypeError(f"`tie_head` must be a bool. Got {tie_head!r} instead.")
        self.tie_head = tie_head
        if self.d_model % self.n_head:
            raise ArgumentError(
                f"`d_model` must be divisible by `n_head`. Got d_model={self.d_model}, "
                f"n_head={self.n_head} instead."
            )
        if embedding is not None:
            if not isinstance(embedding, CategoricalEmbedding):
                raise ArgumentTypeError(
                    f"`embedding` must be a CategoricalEmbedding. Got {type(embedding).__name__} instead."
                )
            if (embedding.vocab, embedding.dim) != (self.vocab, self.d_model):
                raise ArgumentError(
                    f"`embedding` must have shape (vocab, d_model) = ({self.vocab}, {self.d_model}). "
                    f"Got ({embedding.vocab}, {embedding.dim}) instead."
                )
        generator = torch.Generator().manual_seed(self.seed)
        with torch.device("cpu"):
            self.embedding = (
                embedding
                if embedding is not None
                else CategoricalEmbedding(self.vocab, self.d_model, seed=self.seed)
            )
            self.position = nn.Parameter(torch.empty(self.block, self.d_model))
            self.blocks = nn.ModuleList(
                _Block(self.d_model, self.n_head) for _ in range(self.n_layer)
            )
            self.ln_f = nn.LayerNorm(self.d_model)
            self.head = None if tie_head else nn.Linear(self.d_model, self.vocab, bias=False)
        self._init_weights(generator)
        self.to(device)

    def _init_weights(self, generator: torch.Generator) -> None:
        # GPT-2 scheme: N(0, 0.02), residual output projections scaled by 1/sqrt(2 n_layer).
        residual_std = 0.02 / math.sqrt(2 * self.n_layer)
        with torch.no_grad():
            nn.init.normal_(self.position, std=0.02, generator=generator)
            for block in self.blocks:
                assert isinstance(block, _Block)
                for name, linear in (
                    ("qkv", block.attn.qkv),
                    ("proj", block.attn.proj),
                    ("fc", block.fc),
                    ("out", block.out),
                ):
                    std = residual_std if name in ("proj", "out") else 0.02
                    nn.init.normal_(linear.weight, std=std, generator=generator)
                    nn.init.zeros_(linear.bias)
            if self.head is not None:
                nn.init.normal_(self.head.weight, std=0.02, generator=generator)

    def config(self) -> dict[str, Any]:
        """Return the constructor arguments (JSON-able) that rebuild this architecture."""
        return {
            "vocab": self.vocab,
            "d_model": self.d_model,
            "n_layer": self.n_layer,
            "n_head": self.n_head,
            "block": self.block,
            "tie_head": self.tie_head,
            "seed": self.seed,
        }

    def forward(
        self,
        ids: torch.Tensor,
        *,
        last_only: bool = False,
        sequence_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Return next-token logits for ``ids`` of shape ``(b, t)``, ``t <= block``.

        Returns ``(b, t, vocab)`` logits (position ``j`` predicts token ``j + 1``), or
        ``(b, vocab)`` for the last position only when ``last_only`` (cheaper head).
        Ids are not range-checked here; the leaf validates them once at its boundary.

        ``sequence_ids`` (``(b, t)`` integers, nondecreasing along each row: a packed
        row's ``Batch.sequence_ids``) confines attention to each sequence (document
        masking) and restarts the position embedding at each sequence's first token, so
        every sequence's logits are those it would get alone.
        """
        t = ids.shape[1]
        mask = None
        if sequence_ids is None:
            x = self.embedding(ids) + self.position[:t]
        else:
            mask, positions = document_attention(sequence_ids)
            x = self.embedding(ids) + self.position[positions]
        for block in self.blocks:
            x = block(x, mask)
        x = self.ln_f(x[:, -1] if last_only else x)
        weight = self.embedding.weight if self.head is None else self.head.weight
        return F.linear(x, weight)

    def to_dict(self, *, omit_embedding: bool = False) -> dict[str, Any]:
        """Return ``{"type", "version", "config", "weights", "embedding"}``.

        Weights travel as a state-dict blob. With ``omit_embedding=True`` the token
        embedding table is left out (``"embedding": "external"``): whoever stores the
        dict stores the (shared) table once and passes it back to :meth:`from_dict`.
        """
        state = self.state_dict()
        if omit_embedding:
            state.pop("embedding.weight")
        return {
            "type": "CausalTransformerLM",
            "version": 1,
            "config": self.config(),
            "weights": tensors_to_blob(state),
            "embedding": "external" if omit_embedding else "included",
        }

    @classmethod
    def from_dict(
        cls,
        d: dict[str, Any],
        *,
        device: str | torch.device = "cpu",
        embedding: CategoricalEmbedding | None = None,
    ) -> CausalTransformerLM:
        """Rebuild a module written by :meth:`to_dict` on ``device``.

        A dict with its own table gives a private copy of it (sharing is a relation
        between live objects). A dict written with ``omit_embedding=True`` needs
        ``embedding``: the module is built around that very table, so it stays shared.

        Raises
        ------
        CheckpointError
            Another version, a malformed config, weights that do not fit it, or an
            external table without ``embedding`` (or of the wrong shape).
        """
        if d.get("version") != 1 or not isinstance(d.get("config"), dict):
            raise CheckpointError(
                f"CausalTransformerLM dict must have version 1 and a config. Got version {d.get('version')!r}."
            )
        external = d.get("embedding") == "external"
        if external and embedding is None:
            raise CheckpointError(
                "this CausalTransformerLM dict was written without its embedding table "
                "(it is stored once by its mixture); pass `embedding=`."
            )
        try:
            module = cls(**d["config"], embedding=embedding if external else None)
        except (TypeError, ArgumentError) as exc:
            raise CheckpointError(f"CausalTransformerLM config is invalid: {exc}") from exc
        state = tensors_from_blob(d.get("weights"), "CausalTransformerLM weights")
        try:
            # assign=True keeps each saved tensor's dtype (a float64 or bf16 model stays so).
            result = module.load_state_dict(state, strict=not external, assign=True)
        except RuntimeError as exc:
            raise CheckpointError(
                f"CausalTransformerLM weights do not fit the config: {exc}"
            ) from exc
        if external and (result.unexpected_keys or result.missing_keys != ["embedding.weight"]):
            raise CheckpointError(
                "CausalTransformerLM weights do not fit the config: missing "
                f"{result.missing_keys}, unexpected {result.unexpected_keys}."
            )
        return module.to(device)
