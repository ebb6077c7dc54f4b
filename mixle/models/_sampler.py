"""``StreamingTransformerSampler``: draws from a transformer leaf, reproducibly per seed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from mixle._checks import as_token_ids, exact_int, nonnegative_int, positive_int
from mixle.errors import ArgumentError
from mixle.models._inputs import as_contexts, positive_float
from mixle.stats._sampling import draw_indices
from mixle.stats.base import DistributionSampler

if TYPE_CHECKING:
    from mixle.models.streaming_transformer_leaf import StreamingTransformer

__all__ = ["StreamingTransformerSampler"]


class StreamingTransformerSampler(DistributionSampler):
    """Sampler facade for a conditional next-token transformer leaf.

    Draws are a pure function of ``seed``, the weights and the calls made: the model's
    probabilities are computed in float64 on CPU and sampled by inverse CDF from a
    ``numpy.random.Generator(seed)``. ``seed=None`` seeds from OS entropy.
    """

    def __init__(self, dist: StreamingTransformer, seed: int | None = None) -> None:
        # Built only by ``StreamingTransformer.sampler``, which passes itself: no type
        # check here (the leaf module imports this one, so it cannot import the leaf).
        self.dist = dist
        self.seed = None if seed is None else exact_int("seed", seed)
        self.rng = np.random.default_rng(self.seed)

    def _probs(self, contexts: np.ndarray, temperature: float) -> np.ndarray:
        logits = self.dist._last_logits(contexts).double().cpu() / temperature
        return torch.softmax(logits, dim=-1).numpy()

    def sample(
        self,
        size: int | None = None,
        *,
        context: Any = None,
        prompt: Any = None,
        n_tokens: int | None = None,
        temperature: float = 1.0,
    ) -> Any:
        """Draw one observation (``size=None``) or ``size`` of them.

        Pair leaves: the next token after ``context`` (1-D) — an ``int``, or ``size``
        i.i.d. ids. Document leaves: a document, ``prompt`` extended by ``n_tokens``
        sampled ids (see :meth:`generate`) — an int64 array, or a list of ``size``.

        Raises
        ------
        ArgumentError
            ``context`` (pairs) or ``prompt``/``n_tokens`` (documents) is missing or
            invalid, or the other kind's arguments are given.
        """
        if self.dist.observation == "document":
            if context is not None or prompt is None or n_tokens is None:
                raise ArgumentError(
                    "a document leaf samples documents: pass `prompt` (1-D ids) and "
                    "`n_tokens`, not `context`."
                )
            if size is None:
                return self.generate(prompt, n_tokens, temperature=temperature)
            count = positive_int("size", size)
            return [self.generate(prompt, n_tokens, temperature=temperature) for _ in range(count)]
        if prompt is not None or n_tokens is not None:
            raise ArgumentError(
                "a pair leaf samples next tokens: pass `context`; `prompt`/`n_tokens` are "
                "for document leaves (or use generate())."
            )
        if context is None:
            raise ArgumentError("`context` is required: the transformer leaf is conditional.")
        contexts, _ = as_contexts(
            np.asarray(context).reshape(1, -1), self.dist.vocab, self.dist.block
        )
        n = 1 if size is None else positive_int("size", size)
        draws = draw_indices(
            self._probs(contexts, positive_float("temperature", temperature))[0], n, self.rng
        )
        return int(draws[0]) if size is None else draws

    def generate(self, prompt: Any, n_tokens: int, *, temperature: float = 1.0) -> np.ndarray:
        """Extend ``prompt`` (1-D, at least one id) by ``n_tokens`` sampled ids.

        The context is the last ``block`` ids. Returns prompt + continuation, int64.
        """
        ids = as_token_ids(prompt, "`prompt`")
        if ids.shape[0] == 0:
            raise ArgumentError("`prompt` must hold at least one token id. Got none.")
        # Every prompt id is validated, not just the last `block` the model will see.
        as_contexts(ids.reshape(-1, 1), self.dist.vocab, self.dist.block)
        temp = positive_float("temperature", temperature)
        full = ids.tolist()
        for _ in range(nonnegative_int("n_tokens", n_tokens)):
            window = np.asarray(full[-self.dist.block :], dtype=np.int64)[None]
            full.append(int(draw_indices(self._probs(window, temp)[0], 1, self.rng)[0]))
        return np.asarray(full, dtype=np.int64)
