"""The mixle estimator protocol: distributions, encoders, accumulators, estimators.

A leaf (e.g. :class:`mixle.models.StreamingTransformer`) implements the abstract bases
of :mod:`mixle.stats.base`; :func:`estimate_partitions` drives any of them through
accumulate -> combine -> estimate; :func:`to_dict`/:func:`from_dict` round-trip any
registered object through JSON-able dicts (tensors as weights-only ``torch.save``
blobs, never pickled modules).
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
from mixle.stats.embedding import CategoricalEmbedding
from mixle.stats.registry import (
    from_dict,
    register,
    registered_types,
    tensors_from_blob,
    tensors_to_blob,
    to_dict,
)

__all__ = [
    "CategoricalEmbedding",
    "DataSequenceEncoder",
    "DistributionSampler",
    "ParameterEstimator",
    "SequenceEncodableProbabilityDistribution",
    "SequenceEncodableStatisticAccumulator",
    "StatisticAccumulatorFactory",
    "as_weights",
    "estimate_partitions",
    "from_dict",
    "partitioned_estimate",
    "register",
    "registered_types",
    "tensors_from_blob",
    "tensors_to_blob",
    "to_dict",
]
