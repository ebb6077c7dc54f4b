"""MixtureDistribution/MixtureEstimator over categorical components: EM semantics,
posterior, sampler, serialisation, exact folding and bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mixle.errors import ArgumentError, ArgumentTypeError, CheckpointError
from mixle.stats import (
    CategoricalDistribution,
    CategoricalEstimator,
    CompositeDistribution,
    MixtureDistribution,
    MixtureEstimator,
    estimate_partitions,
    from_dict,
    partitioned_estimate,
    to_dict,
)

C0 = [0.7, 0.2, 0.1]
C1 = [0.1, 0.3, 0.6]


def _mixture() -> MixtureDistribution:
    return MixtureDistribution(
        [CategoricalDistribution(C0), CategoricalDistribution(C1)], [0.4, 0.6]
    )


def test_log_density_and_posterior_match_the_definition() -> None:
    mix = _mixture()
    data = [0, 1, 2, 2]
    enc = mix.dist_to_encoder().seq_encode(data)
    for i, x in enumerate(data):
        total = 0.4 * C0[x] + 0.6 * C1[x]
        assert mix.seq_log_density(enc)[i] == pytest.approx(math.log(total), rel=1e-15)
        np.testing.assert_allclose(
            mix.posterior(enc)[i], [0.4 * C0[x] / total, 0.6 * C1[x] / total], rtol=1e-14
        )
    assert mix.log_density(2) == pytest.approx(math.log(0.4 * 0.1 + 0.6 * 0.6))


def test_one_em_iteration_is_the_textbook_e_and_m_step() -> None:
    mix = _mixture()
    data, v = [0, 1, 2, 2, 0], [1.0, 2.0, 1.0, 0.5, 0.25]
    out = partitioned_estimate(mix.estimator(), data, v, prev_estimate=mix)
    r = np.array([[0.4 * C0[x], 0.6 * C1[x]] for x in data])
    r /= r.sum(axis=1, keepdims=True)
    totals = (np.array(v)[:, None] * r).sum(axis=0)
    np.testing.assert_allclose(out.weights, totals / sum(v), rtol=1e-14)
    for k in range(2):
        expected = [sum(v[i] * r[i, k] for i in range(5) if data[i] == j) for j in range(3)]
        component = out.components[k]
        assert isinstance(component, CategoricalDistribution)
        np.testing.assert_allclose(component.probs, np.array(expected) / totals[k], rtol=1e-13)
    smoothed = partitioned_estimate(mix.estimator(pseudo_count=2.0), data, v, prev_estimate=mix)
    np.testing.assert_allclose(smoothed.weights, (totals + 2.0) / (sum(v) + 4.0), rtol=1e-14)


def test_em_increases_the_likelihood_every_iteration() -> None:
    rng = np.random.default_rng(0)
    data = np.concatenate(
        [rng.choice(3, 300, p=[0.8, 0.1, 0.1]), rng.choice(3, 200, p=[0.1, 0.1, 0.8])]
    )
    mix = MixtureDistribution(
        [CategoricalDistribution([0.4, 0.3, 0.3]), CategoricalDistribution([0.3, 0.3, 0.4])],
        [0.5, 0.5],
    )
    previous = -math.inf
    for _ in range(10):
        ll = math.fsum(mix.seq_log_density(data).tolist())
        assert ll >= previous - 1e-9
        previous = ll
        mix = partitioned_estimate(mix.estimator(), list(data), prev_estimate=mix)


def test_initialization_uses_seeded_random_responsibilities() -> None:
    est = MixtureEstimator([CategoricalEstimator(3), CategoricalEstimator(3)])
    enc = est.accumulator_factory().make().acc_to_encoder().seq_encode([0, 1, 2, 1])
    a = estimate_partitions(est, [(enc, None)])
    b = estimate_partitions(est, [(enc, None)])
    np.testing.assert_array_equal(a.weights, b.weights)
    assert a.weights.sum() == pytest.approx(1.0)
    assert not np.array_equal(a.components[0].probs, a.components[1].probs)  # type: ignore[attr-defined]


def test_sampler_draws_a_component_then_from_it() -> None:
    mix = MixtureDistribution(
        [CategoricalDistribution([1.0, 0.0]), CategoricalDistribution([0.0, 1.0])], [0.3, 0.7]
    )
    sampler = mix.sampler(seed=5)
    draws = sampler.sample(10_000)
    np.testing.assert_array_equal(draws, sampler.last_components)  # component k only emits k
    assert abs(draws.mean() - 0.7) < 0.02
    np.testing.assert_array_equal(mix.sampler(seed=5).sample(50), mix.sampler(seed=5).sample(50))
    assert isinstance(mix.sampler(seed=1).sample(), int)


def test_to_dict_round_trips_through_json() -> None:
    mix = _mixture()
    back = from_dict(json.loads(json.dumps(to_dict(mix))))
    assert isinstance(back, MixtureDistribution)
    np.testing.assert_array_equal(back.weights, mix.weights)
    np.testing.assert_array_equal(back.seq_log_density([0, 1, 2]), mix.seq_log_density([0, 1, 2]))
    with pytest.raises(CheckpointError, match="version"):
        from_dict({**mix.to_dict(), "version": 9})
    with pytest.raises(CheckpointError, match="invalid"):
        from_dict({**mix.to_dict(), "weights": [0.5]})


@pytest.mark.parametrize(
    ("weights", "match"),
    [
        ([0.5, 0.6], r"sum to 1. Got \[0.5, 0.6\]"),
        ([1.2, -0.2], "nonnegative. Got -0.2 at position 1"),
        ([1.0], r"one weight per component \(2\)"),
        ([0.5, float("inf")], "position 1"),
    ],
)
def test_bad_weights_raise_clearly(weights: list[float], match: str) -> None:
    with pytest.raises(ArgumentError, match=match):
        MixtureDistribution([CategoricalDistribution(C0), CategoricalDistribution(C1)], weights)


def test_fewer_than_one_component_raises() -> None:
    with pytest.raises(ArgumentError, match="K >= 1"):
        MixtureDistribution([], [])
    with pytest.raises(ArgumentError, match="K >= 1"):
        MixtureEstimator([])
    with pytest.raises(ArgumentTypeError, match="component 1 must be a SequenceEncodable"):
        MixtureDistribution([CategoricalDistribution(C0), "nope"], [0.5, 0.5])  # type: ignore[list-item]
    with pytest.raises(ArgumentTypeError, match="component 0 must be a ParameterEstimator"):
        MixtureEstimator([CategoricalDistribution(C0)])  # type: ignore[list-item]


def test_components_of_different_kinds_are_refused_naming_the_component() -> None:
    with pytest.raises(
        ArgumentError,
        match=r"component 1 \(CategoricalDistribution\) observes CategoricalEncoder\(categories=2\)",
    ):
        MixtureDistribution(
            [CategoricalDistribution(C0), CategoricalDistribution([0.5, 0.5])], [0.5, 0.5]
        )
    composite = CompositeDistribution([CategoricalDistribution(C0)])
    with pytest.raises(ArgumentError, match=r"component 2 .* agree on the observation type"):
        MixtureDistribution(
            [CategoricalDistribution(C0), CategoricalDistribution(C1), composite], [0.2, 0.3, 0.5]
        )
    with pytest.raises(ArgumentError, match=r"component 1 \(CategoricalEstimator\)"):
        MixtureEstimator([CategoricalEstimator(3), CategoricalEstimator(4)])


def test_component_errors_in_the_m_step_name_the_component() -> None:
    mix = MixtureDistribution(
        [CategoricalDistribution([1.0, 0.0]), CategoricalDistribution([0.0, 1.0])], [1.0, 0.0]
    )
    # component 1 has weight 0, so it receives no responsibility and cannot be estimated
    with pytest.raises(
        ArgumentError, match=r"component 1 \(CategoricalEstimator\): .*total weight 0"
    ):
        partitioned_estimate(mix.estimator(), [0, 0], prev_estimate=mix)
    out = partitioned_estimate(
        MixtureEstimator([CategoricalEstimator(2, pseudo_count=1.0)] * 2), [0, 0], prev_estimate=mix
    )
    np.testing.assert_array_equal(out.components[1].probs, [0.5, 0.5])  # type: ignore[attr-defined]


def test_an_observation_impossible_under_every_component_is_named() -> None:
    mix = MixtureDistribution(
        [CategoricalDistribution([1.0, 0.0, 0.0]), CategoricalDistribution([0.0, 1.0, 0.0])],
        [0.5, 0.5],
    )
    assert mix.seq_log_density([2])[0] == -math.inf
    with pytest.raises(ArgumentError, match="observation 1 has log-density -inf"):
        mix.posterior([0, 2])


_DATA = st.lists(st.tuples(st.integers(0, 2), st.floats(0, 100)), min_size=1, max_size=40)


@given(data=_DATA, cut=st.integers(0, 40))
def test_split_and_combine_equals_one_accumulator_bitwise(
    data: list[tuple[int, float]], cut: int
) -> None:
    mix = _mixture()
    ids = np.array([x for x, _ in data], dtype=np.int64)
    w = np.array([v for _, v in data])
    cut = min(cut, len(data))
    factory = mix.estimator().accumulator_factory()
    whole = factory.make()
    whole.seq_update(ids, w, mix)
    left, right = factory.make(), factory.make()
    left.seq_update(ids[:cut], w[:cut], mix)
    right.seq_update(ids[cut:], w[cut:], mix)
    combined = right.combine(left)
    a, b = whole.value(), combined.value()
    assert a.weights.tobytes() == b.weights.tobytes()
    for x, y in zip(a.components, b.components, strict=True):
        assert x.tobytes() == y.tobytes()
    restored = factory.make().from_value(a).value()
    assert restored.weights.tobytes() == a.weights.tobytes()


def test_partitioned_em_is_bitwise_independent_of_the_partition_count() -> None:
    rng = np.random.default_rng(3)
    data = list(rng.integers(0, 3, 97))
    weights = rng.random(97)
    mix = _mixture()
    fits = [
        partitioned_estimate(mix.estimator(), data, weights, num_partitions=p, prev_estimate=mix)
        for p in (1, 4, 97)
    ]
    for fit in fits[1:]:
        assert fit.weights.tobytes() == fits[0].weights.tobytes()
        for c, d in zip(fit.components, fits[0].components, strict=True):
            assert c.probs.tobytes() == d.probs.tobytes()  # type: ignore[attr-defined]
