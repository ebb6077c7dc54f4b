"""Pinned serialised forms and seeded draws of the categorical, composite and mixture
families: checkpoints written by one version of mixle are read by the next, so
``to_dict`` output must stay byte-identical (as JSON), and a seeded sampler must keep
drawing the same values. A change here is a format change: bump the dict's version."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from mixle.errors import CheckpointError
from mixle.stats import (
    CategoricalDistribution,
    CompositeDistribution,
    MixtureDistribution,
    SequenceEncodableProbabilityDistribution,
    from_dict,
)

Family = Callable[[], SequenceEncodableProbabilityDistribution]

RANGED = (
    '{"type": "CategoricalDistribution", "version": 1, "probs": [0.25, 0.75], "categories": null}'
)
LABELLED = (
    '{"type": "CategoricalDistribution", "version": 1, "probs": [0.4, 0.6, 0.0], '
    '"categories": ["python", "prose", 3]}'
)
HALVES = (
    '{"type": "CategoricalDistribution", "version": 1, "probs": [0.5, 0.5], "categories": null}'
)
COMPOSITE = (
    f'{{"type": "CompositeDistribution", "version": 1, "components": [{RANGED}, {LABELLED}]}}'
)
OTHER_COMPOSITE = (
    f'{{"type": "CompositeDistribution", "version": 1, "components": [{HALVES}, {LABELLED}]}}'
)
MIXTURE = (
    '{"type": "MixtureDistribution", "version": 1, "weights": [0.1, 0.9], '
    f'"shared_embeddings": [], "components": [{{"dict": {COMPOSITE}, "embedding": null}}, '
    f'{{"dict": {OTHER_COMPOSITE}, "embedding": null}}]}}'
)


def _ranged() -> CategoricalDistribution:
    return CategoricalDistribution([0.25, 0.75])


def _labelled() -> CategoricalDistribution:
    return CategoricalDistribution({"python": 0.4, "prose": 0.6, 3: 0.0})


def _composite() -> CompositeDistribution:
    return CompositeDistribution([_ranged(), _labelled()])


def _mixture() -> MixtureDistribution:
    other = CompositeDistribution([CategoricalDistribution([0.5, 0.5]), _labelled()])
    return MixtureDistribution([_composite(), other], [0.1, 0.9])


@pytest.mark.parametrize(
    ("build", "pinned"),
    [(_ranged, RANGED), (_labelled, LABELLED), (_composite, COMPOSITE), (_mixture, MIXTURE)],
)
def test_to_dict_is_pinned_and_round_trips(build: Family, pinned: str) -> None:
    written = json.dumps(build().to_dict())
    assert written == pinned
    assert json.dumps(from_dict(json.loads(pinned)).to_dict()) == pinned


@pytest.mark.parametrize(
    ("build", "name"),
    [
        (_labelled, "CategoricalDistribution"),
        (_composite, "CompositeDistribution"),
        (_mixture, "MixtureDistribution"),
    ],
)
def test_another_version_is_refused_with_both_versions_named(build: Family, name: str) -> None:
    with pytest.raises(CheckpointError) as caught:
        from_dict({**build().to_dict(), "version": 2})
    assert str(caught.value) == f"{name} dict version must be 1. Got 2 instead."


def test_seeded_draws_are_pinned() -> None:
    assert _ranged().sampler(3).sample(6).tolist() == [0, 0, 1, 1, 0, 1]
    assert _labelled().sampler(4).sample(5) == ["prose", "prose", "prose", "python", "prose"]
    assert _composite().sampler(5).sample(4) == [
        (1, "prose"),
        (1, "python"),
        (1, "python"),
        (1, "python"),
    ]
    sampler = _mixture().sampler(6)
    assert sampler.sample(4) == [(0, "prose"), (0, "python"), (0, "prose"), (1, "python")]
    assert sampler.last_components.tolist() == [1, 1, 1, 1]
    two = MixtureDistribution([_ranged(), CategoricalDistribution([0.9, 0.1])], [0.3, 0.7])
    assert two.sampler(7).sample(6).tolist() == [0, 1, 0, 0, 1, 0]
