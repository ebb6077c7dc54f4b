"""The mixle estimator protocol: distributions, encoders, accumulators, estimators.

A leaf (e.g. :class:`mixle.models.StreamingTransformer`) implements the abstract bases
of :mod:`mixle.stats.base`; :func:`estimate_partitions` drives any of them through
accumulate -> combine -> estimate; :func:`to_dict`/:func:`from_dict` round-trip any
registered object through JSON-able dicts (tensors as weights-only ``torch.save``
blobs, never pickled modules). :class:`MixtureDistribution` (EM, :func:`stream_em` for
document streams), :class:`CompositeDistribution` (independent tuple fields) and
:class:`CategoricalDistribution` compose leaves; see ``docs/models.md``.
"""

from __future__ import annotations

from mixle.stats.base import (
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
from mixle.stats.categorical import (
    CategoricalAccumulator,
    CategoricalAccumulatorFactory,
    CategoricalDistribution,
    CategoricalEncoder,
    CategoricalEstimator,
    CategoricalSampler,
)
from mixle.stats.composite import (
    CompositeAccumulator,
    CompositeAccumulatorFactory,
    CompositeDistribution,
    CompositeEncoder,
    CompositeEncoding,
    CompositeEstimator,
    CompositeSampler,
)
from mixle.stats.embedding import CategoricalEmbedding
from mixle.stats.mixture import (
    MixtureAccumulator,
    MixtureAccumulatorFactory,
    MixtureDistribution,
    MixtureEstimator,
    MixtureSampler,
    MixtureStatistic,
)
from mixle.stats.registry import (
    from_dict,
    register,
    registered_types,
    tensors_from_blob,
    tensors_to_blob,
    to_dict,
)
from mixle.stats.stream_em import document_batches, stream_em
from mixle.stats.tied import (
    EmbeddingTiedDistribution,
    EmbeddingTiedEstimator,
    LiveEstimator,
    SharedEmbedding,
)

__all__ = [
    "CategoricalAccumulator",
    "CategoricalAccumulatorFactory",
    "CategoricalDistribution",
    "CategoricalEmbedding",
    "CategoricalEncoder",
    "CategoricalEstimator",
    "CategoricalSampler",
    "CompositeAccumulator",
    "CompositeAccumulatorFactory",
    "CompositeDistribution",
    "CompositeEncoder",
    "CompositeEncoding",
    "CompositeEstimator",
    "CompositeSampler",
    "DataSequenceEncoder",
    "DistributionSampler",
    "EmbeddingTiedDistribution",
    "EmbeddingTiedEstimator",
    "LiveEstimator",
    "MixtureAccumulator",
    "MixtureAccumulatorFactory",
    "MixtureDistribution",
    "MixtureEstimator",
    "MixtureSampler",
    "MixtureStatistic",
    "ParameterEstimator",
    "SequenceEncodableProbabilityDistribution",
    "SequenceEncodableStatisticAccumulator",
    "SharedEmbedding",
    "StatisticAccumulatorFactory",
    "as_weights",
    "document_batches",
    "estimate_partitions",
    "from_dict",
    "partitioned_estimate",
    "register",
    "registered_types",
    "stream_em",
    "tensors_from_blob",
    "tensors_to_blob",
    "to_dict",
]
