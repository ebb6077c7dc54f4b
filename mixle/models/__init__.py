"""Consumers of the token stream: the streaming transformer language-model leaf.

See :mod:`mixle.models.streaming_transformer_leaf` and ``docs/models.md``.
"""

from __future__ import annotations

from mixle.models._documents import StreamingDocumentEncoder, TokenDocuments
from mixle.models._inputs import TokenPairs
from mixle.models._transformer import CausalTransformerLM
from mixle.models.streaming_transformer_leaf import (
    StreamingGradientState,
    StreamingTokenEncoder,
    StreamingTransformer,
    StreamingTransformerAccumulator,
    StreamingTransformerAccumulatorFactory,
    StreamingTransformerEstimator,
    StreamingTransformerLeaf,
    StreamingTransformerLeafEstimator,
    StreamingTransformerSampler,
    TransformerLMEstimator,
    stream_fit,
)
from mixle.stats.embedding import CategoricalEmbedding

__all__ = [
    "CategoricalEmbedding",
    "CausalTransformerLM",
    "StreamingDocumentEncoder",
    "StreamingGradientState",
    "StreamingTokenEncoder",
    "StreamingTransformer",
    "StreamingTransformerAccumulator",
    "StreamingTransformerAccumulatorFactory",
    "StreamingTransformerEstimator",
    "StreamingTransformerLeaf",
    "StreamingTransformerLeafEstimator",
    "StreamingTransformerSampler",
    "TokenDocuments",
    "TokenPairs",
    "TransformerLMEstimator",
    "stream_fit",
]
