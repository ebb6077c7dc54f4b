"""Distributions built from parts (composites, mixtures): combining part by part, loading
values part by part, and errors that name the part they come from."""

from __future__ import annotations

import numpy as np
import pytest

from mixle.errors import ArgumentTypeError
from mixle.stats import (
    CategoricalEstimator,
    CompositeAccumulator,
    CompositeEstimator,
    MixtureAccumulator,
    MixtureEstimator,
)


def _composite(k: int) -> CompositeAccumulator:
    return (
        CompositeEstimator([CategoricalEstimator(2), CategoricalEstimator(k)])
        .accumulator_factory()
        .make()
    )


def _mixture(second_k: int) -> MixtureAccumulator:
    """A two-component mixture accumulator whose component 1 counts ``second_k`` categories."""
    made = MixtureEstimator([CategoricalEstimator(2)] * 2).accumulator_factory().make()
    made.components[1] = CategoricalEstimator(second_k).accumulator_factory().make()
    return made


def test_a_failing_field_combine_names_the_field_and_keeps_the_error_class() -> None:
    with pytest.raises(
        ArgumentTypeError, match=r"^field 1 \(CategoricalAccumulator\): can only combine"
    ):
        _composite(3).combine(_composite(4))


def test_a_failing_component_combine_names_the_component() -> None:
    with pytest.raises(
        ArgumentTypeError, match=r"^component 1 \(CategoricalAccumulator\): can only combine"
    ):
        _mixture(3).combine(_mixture(2))


def test_combining_and_loading_values_go_part_by_part() -> None:
    first, second = _composite(3), _composite(3)
    first.seq_update([(0, 2), (1, 2)], np.array([1.0, 2.0]), None)
    second.seq_update([(1, 0)], np.array([4.0]), None)
    combined = first.combine(second).value()
    np.testing.assert_array_equal(combined[0], [1.0, 6.0])
    np.testing.assert_array_equal(combined[1], [4.0, 0.0, 3.0])
    loaded = _composite(3).from_value(combined).value()
    for got, want in zip(loaded, combined, strict=True):
        np.testing.assert_array_equal(got, want)
