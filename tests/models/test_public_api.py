"""Every name of the seed exists, is exported, and implements the protocol."""

from __future__ import annotations

import inspect

import mixle.models
import mixle.models.streaming_transformer_leaf as leaf_module
from mixle.stats import (
    DataSequenceEncoder,
    DistributionSampler,
    ParameterEstimator,
    SequenceEncodableProbabilityDistribution,
    SequenceEncodableStatisticAccumulator,
    StatisticAccumulatorFactory,
)

SEED_NAMES = {
    "StreamingGradientState",
    "StreamingTransformer",
    "StreamingTransformerSampler",
    "StreamingTokenEncoder",
    "StreamingTransformerAccumulator",
    "StreamingTransformerAccumulatorFactory",
    "StreamingTransformerEstimator",
    "TransformerLMEstimator",
    "stream_fit",
    "StreamingTransformerLeaf",
    "StreamingTransformerLeafEstimator",
}


def test_seed_names_are_in_the_module_and_the_package_all() -> None:
    assert set(leaf_module.__all__) >= SEED_NAMES
    assert set(mixle.models.__all__) >= SEED_NAMES
    for name in SEED_NAMES:
        assert getattr(mixle.models, name) is getattr(leaf_module, name)


def test_classes_implement_the_protocol() -> None:
    m = leaf_module
    pairs = [
        (m.StreamingTransformer, SequenceEncodableProbabilityDistribution),
        (m.StreamingTransformerSampler, DistributionSampler),
        (m.StreamingTokenEncoder, DataSequenceEncoder),
        (m.StreamingTransformerAccumulator, SequenceEncodableStatisticAccumulator),
        (m.StreamingTransformerAccumulatorFactory, StatisticAccumulatorFactory),
        (m.StreamingTransformerEstimator, ParameterEstimator),
        (m.TransformerLMEstimator, m.StreamingTransformerEstimator),
    ]
    for cls, base in pairs:
        assert issubclass(cls, base), cls
        assert not inspect.isabstract(cls), cls


def test_seed_signatures() -> None:
    m = leaf_module
    assert list(inspect.signature(m.StreamingGradientState).parameters) == [
        "base_sha256",
        "parameter_names",
        "gradient_sums",
        "loss_sum",
        "effective_weight",
        "rows",
        "batches",
    ]
    config = inspect.signature(m.StreamingTransformer.from_config).parameters
    for name in ("vocab", "d_model", "n_layer", "n_head", "block", "embedding", "device"):
        assert name in config
    fit = inspect.signature(m.stream_fit).parameters
    assert list(fit)[:2] == ["module", "token_source"]
    for name in ("lr", "device", "report_every", "log"):
        assert fit[name].kind is inspect.Parameter.KEYWORD_ONLY
