"""The rewards ``mixle train`` reports to its :class:`~mixle.data.LengthBandit`.

The reward of a length bucket is the loss decrease per token its tokens bought: after
step ``t`` the decrease of the mean training loss from step ``t - 1`` to step ``t`` is
credited to the buckets of step ``t - 1``'s batch (whose update caused it), each in
proportion to its share of that batch's real target tokens. The counts are summed
over ranks, so every rank reports the same rewards and keeps the same bandit. The
previous step's loss and shares are saved in the checkpoint (:meth:`state_dict`),
so a resumed run reports exactly what an uninterrupted one would.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from mixle.data._batch import Batch
from mixle.data._curriculum_bandit import LengthBandit
from mixle.errors import ArgumentError, StateMismatchError

__all__ = ["LengthRewards"]


class LengthRewards:
    """Credits each step's loss decrease to the length buckets of the step before.

    ``all_reduce_sum`` sums a float64 tensor over ranks in place (identity on one rank).
    ``batch_buckets`` counts a batch's real targets per bucket; by default from its
    document ids (the bucket of each document's length); a
    :class:`~mixle.data.VariableLengthStream` passes its ``bucket_tokens`` (every target
    of a batch is in the bucket of its width).
    """

    def __init__(
        self,
        bandit: LengthBandit,
        all_reduce_sum: Callable[[list[torch.Tensor]], None],
        *,
        batch_buckets: Callable[[Batch], np.ndarray] | None = None,
    ) -> None:
        self.bandit = bandit
        self._all_reduce_sum = all_reduce_sum
        self._batch_buckets = batch_buckets or self._document_buckets
        self._previous: tuple[float, np.ndarray] | None = None

    def _document_buckets(self, batch: Batch) -> np.ndarray:
        if batch.document_ids is None or batch.loss_mask is None:
            raise ArgumentError("LengthRewards needs packed batches with document ids.")
        ids = np.asarray(batch.document_ids)[np.asarray(batch.loss_mask, dtype=bool)]
        ids = ids[ids >= 0]
        return np.bincount(self.bandit.buckets_of(ids), minlength=self.bandit.num_buckets)

    def bucket_tokens(self, batch: Batch) -> np.ndarray:
        """Real target tokens of each bucket in this rank's ``batch``, summed over ranks."""
        total = torch.tensor(self._batch_buckets(batch), dtype=torch.float64)
        self._all_reduce_sum([total])
        return total.numpy()

    def step(self, batch: Batch, loss: float) -> None:
        """Report the rewards the step just taken (mean loss ``loss``) earned."""
        tokens = self.bucket_tokens(batch)
        if not math.isfinite(loss) or tokens.sum() == 0:
            return
        if self._previous is not None:
            previous_loss, shares = self._previous
            for bucket in np.flatnonzero(shares):
                self.bandit.report(int(bucket), (previous_loss - loss) * float(shares[bucket]))
        self._previous = (loss, tokens / tokens.sum())

    def state_dict(self) -> dict[str, Any]:
        """``{"previous_loss", "previous_shares"}`` (``None`` before the first step)."""
        if self._previous is None:
            return {"previous_loss": None, "previous_shares": None}
        loss, shares = self._previous
        return {"previous_loss": loss, "previous_shares": shares.tolist()}

    def load_state_dict(self, state: Any) -> None:
        """Restore :meth:`state_dict`.

        Raises
        ------
        StateMismatchError
            ``state`` is not such a dict, or its shares are not one per bucket.
        """
        if not isinstance(state, dict) or set(state) != {"previous_loss", "previous_shares"}:
            raise StateMismatchError(
                "checkpoint field `length_rewards` must be {previous_loss, previous_shares}. "
                f"Got {state!r}."
            )
        loss, shares = state["previous_loss"], state["previous_shares"]
        if loss is None:
            self._previous = None
            return
        if not isinstance(shares, list) or len(shares) != self.bandit.num_buckets:
            raise StateMismatchError(
                "checkpoint field `length_rewards.previous_shares` must hold "
                f"{self.bandit.num_buckets} numbers (one per bucket). Got {shares!r}."
            )
        self._previous = (float(loss), np.asarray(shares, dtype=np.float64))
