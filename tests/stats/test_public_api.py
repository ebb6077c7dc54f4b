"""The issue-#16 names are exported from mixle.stats and implement the protocol."""

from __future__ import annotations

import inspect

import mixle.stats as stats
from mixle.models import CategoricalEmbedding, StreamingTransformer

FAMILIES = {
    "Categorical": (
        "Distribution",
        "Sampler",
        "Encoder",
        "Accumulator",
        "AccumulatorFactory",
        "Estimator",
    ),
    "Mixture": ("Distribution", "Sampler", "Accumulator", "AccumulatorFactory", "Estimator"),
    "Composite": (
        "Distribution",
        "Sampler",
        "Encoder",
        "Accumulator",
        "AccumulatorFactory",
        "Estimator",
    ),
}
BASES = {
    "Distribution": stats.SequenceEncodableProbabilityDistribution,
    "Sampler": stats.DistributionSampler,
    "Encoder": stats.DataSequenceEncoder,
    "Accumulator": stats.SequenceEncodableStatisticAccumulator,
    "AccumulatorFactory": stats.StatisticAccumulatorFactory,
    "Estimator": stats.ParameterEstimator,
}


def test_families_are_exported_and_implement_the_protocol() -> None:
    for family, roles in FAMILIES.items():
        for role in roles:
            name = family + role
            assert name in stats.__all__, name
            cls = getattr(stats, name)
            assert issubclass(cls, BASES[role]) and not inspect.isabstract(cls), name
    for name in ("stream_em", "document_batches", "MixtureStatistic", "CompositeEncoding"):
        assert name in stats.__all__


def test_distributions_are_registered() -> None:
    registered = stats.registered_types()
    for name in ("CategoricalDistribution", "MixtureDistribution", "CompositeDistribution"):
        assert registered[name] is getattr(stats, name)


def test_the_leaf_satisfies_the_live_and_tied_protocols() -> None:
    leaf = StreamingTransformer.from_config(
        11, d_model=8, n_layer=1, n_head=2, block=4, embedding=CategoricalEmbedding(11, 8)
    )
    assert isinstance(leaf, stats.EmbeddingTiedDistribution)
    estimator = leaf.estimator()
    assert isinstance(estimator, stats.LiveEstimator)
    assert isinstance(estimator, stats.EmbeddingTiedEstimator)
    assert not isinstance(stats.CategoricalEstimator(2), stats.LiveEstimator)
