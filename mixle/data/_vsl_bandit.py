"""The ``"bandit"`` order of a variable-length stream: a :class:`LengthBandit` picks each bucket.

Instead of a closed-form curriculum, the bucket of every global batch is drawn from the
probabilities of a :class:`~mixle.data.LengthBandit` over the stream's buckets (one
bandit bucket per length bucket: edges at the bucket lengths), restricted to the buckets
that still have batches left in the epoch, so an epoch still holds every batch of every
bucket exactly once; the bandit decides *when* each bucket's batches come, rationing a
bucket its rewards disfavour towards the end of the epoch. The rewards the trainer
reports are folded into the weights every ``window`` batches (the bandit's "epochs" are
these windows: window ``w`` covers global batches ``[w * window, (w + 1) * window)``
counted across epochs), so the exploration floor (``exploration / K``) keeps every
bucket observed and the mean rewards need no importance weighting (as in
:mod:`~mixle.data._curriculum_bandit`).

Deterministic: the draw of batch ``i`` of epoch ``e`` is the inverse CDF of the
available buckets' probabilities at a uniform keyed by ``(seed, corpus, e, i)``, so the
order is a pure function of the rewards reported before each window. Not closed-form:
a batch is found only at the stream's cursor (no random access; resume restores the
state). The state is the batches each bucket gave in the current epoch (K integers)
and the bandit's state (its weights, pending rewards and each window's probabilities,
K floats per window).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from mixle._checks import positive_int
from mixle.data._curriculum_bandit import LengthBandit
from mixle.errors import ArgumentError, StateMismatchError

__all__ = ["BanditOrder"]

_DRAW_TAG = 0x56534C42  # "VSLB": keys the bucket draws


class BanditOrder:
    """Draws the bucket of each batch with a :class:`LengthBandit` (module docstring).

    Parameters
    ----------
    bucket_lengths, batches
        The stream's bucket lengths (shortest first) and batches per bucket per epoch.
    key
        ``(seed, corpus word)``: keys the draws; ``seed`` also seeds the bandit.
    window
        Batches between two foldings of the rewards into the weights.
    exploration, learning_rate
        As for :class:`LengthBandit`.
    """

    def __init__(
        self,
        bucket_lengths: tuple[int, ...],
        batches: tuple[int, ...],
        *,
        key: tuple[int, int],
        window: int = 64,
        exploration: float = 0.1,
        learning_rate: float = 1.0,
    ) -> None:
        if len(bucket_lengths) < 2:
            raise ArgumentError(
                f"the bandit order needs at least two buckets. Got {list(bucket_lengths)} "
                "(lower min_length)."
            )
        self.bandit = LengthBandit(
            np.asarray(bucket_lengths, dtype=np.int64),
            edges=bucket_lengths[1:],
            seed=key[0],
            exploration=exploration,
            learning_rate=learning_rate,
        )
        self.batches = np.asarray(batches, dtype=np.int64)
        self.total = int(self.batches.sum())
        self.key = key
        self.window = positive_int("bandit_window", window)
        self.consumed = np.zeros(len(batches), dtype=np.int64)

    def peek(self, epoch: int, index: int) -> tuple[int, int]:
        """``(bucket, ordinal)`` of batch ``index`` of ``epoch``, the next one to draw.

        Raises
        ------
        ArgumentError
            ``index`` is not the number of batches drawn so far in the epoch.
        """
        drawn = int(self.consumed.sum())
        if index != drawn:
            raise ArgumentError(
                f"a bandit-ordered stream is read at its cursor only: batch {index} of "
                f"epoch {epoch} asked, {drawn} drawn so far."
            )
        probabilities = self.bandit.probabilities((epoch * self.total + index) // self.window)
        weights = np.where(self.consumed < self.batches, probabilities, 0.0)
        sequence = np.random.SeedSequence([*self.key, epoch, index, _DRAW_TAG])
        uniform = np.random.Generator(np.random.PCG64(sequence)).random()
        edges = np.cumsum(weights)
        bucket = int(np.searchsorted(edges, uniform * edges[-1], side="right"))
        bucket = min(bucket, int(np.flatnonzero(weights)[-1]))  # float edge: the last one
        return bucket, int(self.consumed[bucket])

    def draw(self, epoch: int, index: int) -> tuple[int, int]:
        """:meth:`peek`, then count the batch as given (the epoch restarts after its last)."""
        bucket, ordinal = self.peek(epoch, index)
        self.consumed[bucket] += 1
        if int(self.consumed.sum()) == self.total:
            self.consumed[:] = 0
        return bucket, ordinal

    def state_dict(self) -> dict[str, Any]:
        """``{"consumed": [...], "selector": LengthBandit state}`` (JSON-able)."""
        return {"consumed": self.consumed.tolist(), "selector": self.bandit.state_dict()}

    def load_state_dict(self, state: Any, index: int) -> None:
        """Restore :meth:`state_dict` for a cursor at batch ``index`` of its epoch.

        Raises
        ------
        StateMismatchError
            Not such a dict, ``consumed`` is not one count per bucket within the bucket's
            batches summing to ``index`` (field named), or the bandit state is refused.
        """
        if not isinstance(state, Mapping) or set(state) != {"consumed", "selector"}:
            raise StateMismatchError(
                "VariableLengthStream state field `bandit` must be {consumed, selector}. "
                f"Got {state!r}."
            )
        consumed = state["consumed"]
        if (
            not isinstance(consumed, list)
            or len(consumed) != len(self.batches)
            or not all(isinstance(n, int) and not isinstance(n, bool) for n in consumed)
            or any(not 0 <= n <= cap for n, cap in zip(consumed, self.batches, strict=True))
            or sum(consumed) != index
        ):
            raise StateMismatchError(
                f"VariableLengthStream state field `bandit.consumed` must hold "
                f"{len(self.batches)} counts within {self.batches.tolist()} summing to the "
                f"cursor's batch {index}. Got {consumed!r}."
            )
        self.bandit.load_state_dict(state["selector"])
        self.consumed = np.asarray(consumed, dtype=np.int64)
