"""CompositeDistribution/CompositeEstimator over categorical fields."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from mixle.errors import ArgumentError, ArgumentTypeError
from mixle.stats import (
    CategoricalDistribution,
    CategoricalEstimator,
    CompositeDistribution,
    CompositeEstimator,
    MixtureDistribution,
    from_dict,
    partitioned_estimate,
    to_dict,
)


def _composite() -> CompositeDistribution:
    return CompositeDistribution(
        [CategoricalDistribution([0.25, 0.75]), CategoricalDistribution([0.5, 0.3, 0.2])]
    )


def test_log_density_is_the_sum_over_fields() -> None:
    comp = _composite()
    assert comp.log_density((1, 2)) == pytest.approx(math.log(0.75) + math.log(0.2))
    np.testing.assert_allclose(
        comp.seq_log_density([(0, 0), (1, 1)]),
        [math.log(0.25 * 0.5), math.log(0.75 * 0.3)],
    )


def test_each_field_is_estimated_from_its_own_column() -> None:
    data = [(0, 2), (1, 2), (1, 0), (1, 1)]
    est = CompositeEstimator([CategoricalEstimator(2), CategoricalEstimator(3)])
    for parts in (1, 2, 4):
        out = partitioned_estimate(est, data, [1.0, 1.0, 2.0, 0.0], num_partitions=parts)
        first, second = out.components
        np.testing.assert_array_equal(first.probs, [0.25, 0.75])  # type: ignore[attr-defined]
        np.testing.assert_array_equal(second.probs, [0.5, 0.0, 0.5])  # type: ignore[attr-defined]


def test_sampler_draws_tuples_reproducibly() -> None:
    comp = _composite()
    draws = comp.sampler(seed=3).sample(4000)
    assert draws == comp.sampler(seed=3).sample(4000)
    labels = np.array([d[0] for d in draws])
    assert abs(labels.mean() - 0.75) < 0.03
    assert isinstance(comp.sampler(seed=1).sample(), tuple)
    with pytest.raises(ArgumentError, match="one mapping per field"):
        comp.sampler(seed=1).sample(field_kwargs=[{}])


def test_to_dict_round_trips_and_mixtures_of_composites_work() -> None:
    comp = _composite()
    back = from_dict(json.loads(json.dumps(to_dict(comp))))
    np.testing.assert_array_equal(back.seq_log_density([(1, 2)]), comp.seq_log_density([(1, 2)]))
    other = CompositeDistribution(
        [CategoricalDistribution([0.9, 0.1]), CategoricalDistribution([0.1, 0.1, 0.8])]
    )
    mix = MixtureDistribution([comp, other], [0.5, 0.5])
    post = mix.posterior(mix.dist_to_encoder().seq_encode([(0, 2)]))
    expected = np.array([0.25 * 0.2, 0.9 * 0.8])
    np.testing.assert_allclose(post[0], expected / expected.sum())


def test_malformed_observations_name_the_observation_or_field() -> None:
    comp = _composite()
    with pytest.raises(ArgumentError, match="observation 1 must be a tuple of 2 fields"):
        comp.seq_log_density([(0, 1), (0,)])
    with pytest.raises(
        ArgumentError, match=r"field 1 \(CategoricalEncoder\): category at position 0"
    ):
        comp.seq_log_density([(0, 7)])
    with pytest.raises(ArgumentError, match="at least one field"):
        CompositeDistribution([])
    with pytest.raises(ArgumentTypeError, match="field 0 must be a ParameterEstimator"):
        CompositeEstimator([1])  # type: ignore[list-item]
