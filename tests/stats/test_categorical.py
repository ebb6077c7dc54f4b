"""CategoricalDistribution: scoring, estimation, sampling, exact folding, validation."""

from __future__ import annotations

import itertools
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
    from_dict,
    partitioned_estimate,
    to_dict,
)


def test_log_density_is_the_log_of_the_probability() -> None:
    dist = CategoricalDistribution([0.5, 0.25, 0.25, 0.0])
    assert dist.log_density(1) == math.log(0.25)
    assert dist.log_density(3) == -math.inf
    np.testing.assert_array_equal(
        dist.seq_log_density(dist.dist_to_encoder().seq_encode([0, 2, 0])),
        np.log([0.5, 0.25, 0.5]),
    )


def test_estimate_is_the_weighted_relative_frequency_with_pseudo_count() -> None:
    data, weights = [0, 1, 1, 2, 2, 2], [1.0, 0.5, 0.5, 1.0, 1.0, 0.0]
    mle = partitioned_estimate(CategoricalEstimator(4), data, weights)
    np.testing.assert_array_equal(mle.probs, [0.25, 0.25, 0.5, 0.0])
    smoothed = partitioned_estimate(CategoricalEstimator(4, pseudo_count=1.0), data, weights)
    np.testing.assert_allclose(smoothed.probs, np.array([2, 2, 3, 1]) / 8)


def test_sampler_is_seeded_and_follows_the_probabilities() -> None:
    dist = CategoricalDistribution([0.1, 0.6, 0.3])
    a = dist.sampler(seed=4).sample(20_000)
    b = dist.sampler(seed=4).sample(20_000)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.bincount(a, minlength=3) / a.size, dist.probs, atol=0.015)
    assert isinstance(dist.sampler(seed=1).sample(), int)


def test_to_dict_round_trips_through_json() -> None:
    dist = CategoricalDistribution([0.2, 0.8])
    back = from_dict(json.loads(json.dumps(to_dict(dist))))
    assert isinstance(back, CategoricalDistribution)
    np.testing.assert_array_equal(back.probs, dist.probs)
    with pytest.raises(CheckpointError, match="version"):
        from_dict({**dist.to_dict(), "version": 2})
    with pytest.raises(CheckpointError, match="invalid"):
        from_dict({**dist.to_dict(), "probs": [0.5, 0.7]})


@pytest.mark.parametrize(
    ("probs", "error", "match"),
    [
        ([], ArgumentError, r"K >= 1"),
        ([0.5, 0.6], ArgumentError, r"sum to 1"),
        ([1.5, -0.5], ArgumentError, "nonnegative. Got -0.5 at position 1"),
        ([[0.5, 0.5]], ArgumentTypeError, "1-D"),
        ([0.5, float("nan")], ArgumentError, "position 1"),
    ],
)
def test_bad_probabilities_raise_clearly(probs: list[float], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        CategoricalDistribution(probs)


def test_out_of_range_categories_are_named() -> None:
    dist = CategoricalDistribution([0.5, 0.5])
    with pytest.raises(ArgumentError, match=r"position 2 must be in \[0, 2\). Got 2"):
        dist.seq_log_density([0, 1, 2])
    with pytest.raises(ArgumentError, match="position 0"):
        dist.log_density(1.5)
    with pytest.raises(ArgumentError, match="pseudo_count"):
        CategoricalEstimator(2, pseudo_count=-1.0)
    with pytest.raises(ArgumentError, match="total weight 0"):
        partitioned_estimate(CategoricalEstimator(2), [0, 1], [0.0, 0.0])


@given(
    data=st.lists(
        st.tuples(st.integers(0, 4), st.floats(0, 1e6, allow_subnormal=True)),
        min_size=1,
        max_size=60,
    ),
    cuts=st.lists(st.integers(0, 60), max_size=5),
)
def test_split_and_combine_equals_one_accumulator_bitwise(
    data: list[tuple[int, float]], cuts: list[int]
) -> None:
    ids = np.array([x for x, _ in data], dtype=np.int64)
    weights = np.array([w for _, w in data])
    factory = CategoricalEstimator(5).accumulator_factory()
    whole = factory.make()
    whole.seq_update(ids, weights, None)
    bounds = sorted({0, len(data), *(min(c, len(data)) for c in cuts)})
    parts = []
    for lo, hi in itertools.pairwise(bounds):
        acc = factory.make()
        acc.seq_update(ids[lo:hi], weights[lo:hi], None)
        parts.append(acc)
    total = parts[0]
    for acc in reversed(parts[1:]):  # any order: the sums are exact
        total.combine(acc)
    assert whole.value().tobytes() == total.value().tobytes()
    # ... and each count is the correctly rounded exact sum.
    for k in range(5):
        assert whole.value()[k] == math.fsum(weights[ids == k].tolist())


def test_string_labels_score_sample_estimate_and_round_trip() -> None:
    dist = CategoricalDistribution({"python": 0.25, "prose": 0.75})
    assert dist.categories == ("python", "prose")
    assert dist.log_density("prose") == math.log(0.75) and dist.prob("python") == 0.25
    draws = dist.sampler(seed=2).sample(4000)
    assert set(draws) == {"python", "prose"} and abs(draws.count("prose") / 4000 - 0.75) < 0.03
    assert dist.sampler(seed=2).sample() in ("python", "prose")
    back = from_dict(json.loads(json.dumps(to_dict(dist))))
    assert back.categories == dist.categories
    np.testing.assert_array_equal(back.probs, dist.probs)
    with pytest.raises(
        ArgumentError, match=r"position 1 must be one of \['python', 'prose'\]. Got 'poetry'"
    ):
        dist.seq_log_density(["prose", "poetry"])
    fitted = partitioned_estimate(dist.estimator(pseudo_count=1.0), ["prose", "prose", "prose"])
    assert fitted.prob("python") == pytest.approx(0.2)


def test_an_estimator_without_categories_learns_them_from_the_data() -> None:
    data = ["b", 3, "a", 3, "b", 1]
    for parts in (1, 2, 6):
        fitted = partitioned_estimate(CategoricalEstimator(), data, num_partitions=parts)
        assert fitted.categories == (1, 3, "a", "b")  # integers, then strings, ascending
        np.testing.assert_array_equal(fitted.probs, np.array([1, 2, 1, 2]) / 6)
    with pytest.raises(ArgumentError, match="category at position 1"):
        partitioned_estimate(CategoricalEstimator(), ["a", 1.5])
    with pytest.raises(ArgumentError, match="distinct"):
        CategoricalEstimator(["a", "a"])
    with pytest.raises(ArgumentTypeError, match="`categories`"):
        CategoricalEstimator("ab")


@given(
    data=st.lists(
        st.tuples(st.sampled_from(["x", "y", 7, 0]), st.floats(0, 1e3)), min_size=1, max_size=40
    ),
    cut=st.integers(0, 40),
)
def test_learned_label_accumulators_combine_exactly(
    data: list[tuple[object, float]], cut: int
) -> None:
    labels, weights = [x for x, _ in data], np.array([w for _, w in data])
    cut = min(cut, len(data))
    factory = CategoricalEstimator().accumulator_factory()
    whole, left, right = factory.make(), factory.make(), factory.make()
    whole.seq_update(labels, weights, None)
    left.seq_update(labels[:cut], weights[:cut], None)
    right.seq_update(labels[cut:], weights[cut:], None)
    combined = right.combine(left).value()
    assert combined == whole.value()  # same labels, bitwise-equal exact counts
    assert factory.make().from_value(combined).value() == combined
