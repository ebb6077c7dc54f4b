"""The generic driver over a toy leaf (weighted categorical counts) and its arguments."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mixle.errors import ArgumentError, ArgumentTypeError
from mixle.stats import (
    DataSequenceEncoder,
    DistributionSampler,
    ParameterEstimator,
    SequenceEncodableProbabilityDistribution,
    SequenceEncodableStatisticAccumulator,
    StatisticAccumulatorFactory,
    as_weights,
    estimate_partitions,
    partitioned_estimate,
)

K = 4


class _Encoder(DataSequenceEncoder):
    def seq_encode(self, x: Sequence[Any]) -> np.ndarray:
        return np.asarray(x, dtype=np.int64)


class _Sampler(DistributionSampler):
    def __init__(self, probs: np.ndarray, seed: int | None) -> None:
        self.probs, self.rng = probs, np.random.default_rng(seed)

    def sample(self, size: int | None = None) -> Any:
        return self.rng.choice(K, size=size, p=self.probs)


class _Categorical(SequenceEncodableProbabilityDistribution):
    def __init__(self, probs: np.ndarray) -> None:
        self.probs = probs

    def log_density(self, x: Any) -> float:
        return float(np.log(self.probs[x]))

    def seq_log_density(self, enc: Any) -> np.ndarray:
        return np.log(self.probs[enc])

    def sampler(self, seed: int | None = None) -> _Sampler:
        return _Sampler(self.probs, seed)

    def estimator(self, pseudo_count: float | None = None) -> _Estimator:
        return _Estimator()

    def dist_to_encoder(self) -> _Encoder:
        return _Encoder()

    def to_dict(self) -> dict[str, Any]:
        return {"type": "toy", "probs": self.probs.tolist()}


class _Accumulator(SequenceEncodableStatisticAccumulator):
    def __init__(self) -> None:
        self.counts = np.zeros(K)

    def update(self, x: Any, weight: float, estimate: Any) -> None:
        self.counts[x] += weight

    def seq_update(self, enc: Any, weights: np.ndarray, estimate: Any) -> None:
        np.add.at(self.counts, enc, weights)

    def initialize(self, x: Any, weight: float, rng: np.random.Generator) -> None:
        self.update(x, weight, None)

    def seq_initialize(self, enc: Any, weights: np.ndarray, rng: np.random.Generator) -> None:
        self.seq_update(enc, weights, None)

    def combine(self, other: Any) -> _Accumulator:
        self.counts += other.counts
        return self

    def value(self) -> np.ndarray:
        return self.counts.copy()

    def from_value(self, v: Any) -> _Accumulator:
        self.counts = np.array(v)
        return self

    def acc_to_encoder(self) -> _Encoder:
        return _Encoder()


class _Factory(StatisticAccumulatorFactory):
    def make(self) -> _Accumulator:
        return _Accumulator()


class _Estimator(ParameterEstimator):
    def accumulator_factory(self) -> _Factory:
        return _Factory()

    def estimate(self, nobs: float | None, suff_stat: Any) -> _Categorical:
        return _Categorical(suff_stat / suff_stat.sum())


@given(
    data=st.lists(st.integers(0, K - 1), min_size=1, max_size=30),
    parts=st.integers(1, 30),
    seed=st.integers(0, 2**32 - 1),
)
def test_partitioned_estimate_does_not_depend_on_partition_count(
    data: list[int], parts: int, seed: int
) -> None:
    weights = np.random.default_rng(seed).uniform(0.1, 2.0, len(data))
    parts = min(parts, len(data))
    one = partitioned_estimate(_Estimator(), data, weights)
    many = partitioned_estimate(_Estimator(), data, weights, num_partitions=parts)
    assert isinstance(one, _Categorical) and isinstance(many, _Categorical)
    np.testing.assert_allclose(one.probs, many.probs, rtol=1e-12)
    expected = np.bincount(data, weights=weights, minlength=K)
    np.testing.assert_allclose(one.probs, expected / expected.sum(), rtol=1e-12)


def test_estimate_partitions_passes_prev_estimate_and_counts_nobs() -> None:
    seen: list[Any] = []

    class _Recording(_Estimator):
        def estimate(self, nobs: float | None, suff_stat: Any) -> _Categorical:
            seen.append(nobs)
            return super().estimate(nobs, suff_stat)

    prev = _Categorical(np.full(K, 1 / K))
    enc = np.array([0, 1, 1])
    dist = estimate_partitions(
        _Recording(), [(enc, None), (enc, np.array([2.0, 0, 0]))], prev_estimate=prev
    )
    assert seen == [5.0]
    assert isinstance(dist, _Categorical)
    np.testing.assert_allclose(dist.probs, [3 / 5, 2 / 5, 0, 0])


def test_empty_partitions_raise() -> None:
    with pytest.raises(ArgumentError, match="at least one"):
        estimate_partitions(_Estimator(), [])


def test_more_partitions_than_observations_raise() -> None:
    with pytest.raises(ArgumentError, match="`num_partitions` must be at most"):
        partitioned_estimate(_Estimator(), [0, 1], num_partitions=3)
    with pytest.raises(ArgumentError, match="`num_partitions` must be a positive"):
        partitioned_estimate(_Estimator(), [0, 1], num_partitions=0)


def test_as_weights_validates_length_sign_and_finiteness() -> None:
    np.testing.assert_array_equal(as_weights(None, 3), np.ones(3))
    with pytest.raises(ArgumentError, match=r"one weight per observation \(3\). Got 2"):
        as_weights([1.0, 2.0], 3)
    with pytest.raises(ArgumentError, match="position 1"):
        as_weights([1.0, -1.0], 2)
    with pytest.raises(ArgumentError, match="position 0"):
        as_weights([np.nan], 1)
    with pytest.raises(ArgumentTypeError, match="1-D"):
        as_weights([[1.0]], 1)
    with pytest.raises(ArgumentTypeError):
        as_weights(["a"], 1)
