"""LengthRewards: the loss decrease of a step is credited to the previous batch's buckets."""

from __future__ import annotations

import numpy as np
import pytest

from mixle.data import LengthBandit
from mixle.data._batch import Batch
from mixle.errors import StateMismatchError
from mixle.train._length_rewards import LengthRewards


def _batch(document_ids: list[int]) -> Batch:
    ids = np.array([document_ids])
    return Batch(
        context=np.zeros_like(ids),
        targets=np.zeros_like(ids),
        loss_mask=ids >= 0,
        document_ids=ids,
        position_ids=np.zeros_like(ids),
    )


def _rewards() -> LengthRewards:
    bandit = LengthBandit([5, 50, 500], edges=[10, 100])
    return LengthRewards(bandit, lambda tensors: None)


def test_the_decrease_is_credited_by_token_share_of_the_previous_batch() -> None:
    rewards = _rewards()
    rewards.step(_batch([0, 0, 0, 2, -1]), 3.0)  # bucket 0: 3/4, bucket 2: 1/4; pad ignored
    rewards.step(_batch([1, 1]), 2.0)  # a decrease of 1.0
    state = rewards.bandit.state_dict()
    assert state["reward_sum"] == [0.75, 0.0, 0.25]
    assert state["reward_count"] == [1, 0, 1]
    assert rewards.state_dict() == {"previous_loss": 2.0, "previous_shares": [0.0, 1.0, 0.0]}


def test_state_round_trips_and_bad_state_is_named() -> None:
    rewards = _rewards()
    rewards.step(_batch([0, 1]), 3.0)
    restored = _rewards()
    restored.load_state_dict(rewards.state_dict())
    assert restored.state_dict() == rewards.state_dict()
    with pytest.raises(StateMismatchError, match="`length_rewards` must be"):
        restored.load_state_dict(None)
    with pytest.raises(StateMismatchError, match="previous_shares` must hold 3"):
        restored.load_state_dict({"previous_loss": 1.0, "previous_shares": [1.0]})
