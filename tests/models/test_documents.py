"""Document observations: log-density = sum of next-token log-probs chunked by block."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mixle.errors import ArgumentError, ArgumentTypeError, TokenIdError
from mixle.models import StreamingTransformer, TokenDocuments
from mixle.stats import estimate_partitions, partitioned_estimate

from .conftest import BLOCK, VOCAB, assert_params_equal, params_snapshot, tiny_leaf


def _docs(lengths: list[int], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, VOCAB, n) for n in lengths]


def _pairs_of(doc: np.ndarray) -> list[tuple[np.ndarray, int]]:
    """Every (context, next token) pair of a document, the context restarting each block."""
    pairs = []
    for t in range(1, doc.shape[0]):
        row_start = ((t - 1) // BLOCK) * BLOCK
        pairs.append((doc[row_start:t], int(doc[t])))
    return pairs


def test_document_log_density_is_the_sum_of_its_pair_log_probs() -> None:
    doc_leaf = tiny_leaf(observation="document")
    pair_leaf = StreamingTransformer(doc_leaf.module)
    docs = _docs([1, 2, BLOCK, BLOCK + 1, 3 * BLOCK + 5])
    scores = doc_leaf.seq_log_density(docs)
    assert scores[0] == 0.0
    for doc, score in zip(docs, scores, strict=True):
        expected = sum(pair_leaf.log_density(pair) for pair in _pairs_of(doc))
        assert score == pytest.approx(expected, rel=1e-5, abs=1e-6)
    assert doc_leaf.log_density(docs[3]) == pytest.approx(scores[3])


def test_document_gradient_equals_the_weighted_pair_gradients() -> None:
    docs = _docs([5, BLOCK + 3, 2 * BLOCK + 1], seed=1)
    weights = np.array([0.5, 2.0, 1.0])
    doc_leaf = tiny_leaf(observation="document")
    doc_leaf.module.double()
    pair_leaf = tiny_leaf()
    pair_leaf.module.double()
    doc_acc = doc_leaf.estimator().accumulator_factory().make()
    doc_acc.seq_update(doc_leaf.dist_to_encoder().seq_encode(docs), weights, None)
    pair_acc = pair_leaf.estimator().accumulator_factory().make()
    for doc, w in zip(docs, weights, strict=True):
        for context, token in _pairs_of(doc):
            enc = pair_leaf.dist_to_encoder().seq_encode([(context, token)])
            pair_acc.seq_update(enc, np.array([w]), None)
    a, b = doc_acc.value(), pair_acc.value()
    assert a.effective_weight == pytest.approx(b.effective_weight)
    assert a.effective_weight == pytest.approx(0.5 * 4 + 2.0 * (BLOCK + 2) + 2 * BLOCK)
    assert a.loss_sum == pytest.approx(b.loss_sum, rel=1e-10)
    for name in a.parameter_names:
        torch.testing.assert_close(
            a.gradient_sums[name], b.gradient_sums[name], rtol=1e-9, atol=1e-12
        )


def test_zero_weight_documents_change_nothing_and_partitions_agree() -> None:
    docs = _docs([7, 12, 30, 4], seed=2)
    results = []
    for parts, weights in ((1, [1.0, 0.0, 1.0, 1.0]), (2, [1.0, 0.0, 1.0, 1.0]), (4, None)):
        leaf = tiny_leaf(observation="document")
        leaf.module.double()
        data = docs if weights is not None else [docs[0], docs[2], docs[3], docs[0][:1]]
        partitioned_estimate(leaf.estimator(), data, weights, num_partitions=parts)
        results.append(params_snapshot(leaf))
    for other in results[1:]:
        assert_params_equal(
            results[0], other, lambda x, y: torch.allclose(x, y, rtol=0, atol=1e-12)
        )


def test_document_encoder_names_bad_documents() -> None:
    encoder = tiny_leaf(observation="document").dist_to_encoder()
    with pytest.raises(ArgumentError, match="document 1 is empty"):
        encoder.seq_encode([[1, 2], []])
    with pytest.raises(TokenIdError, match=rf"document 1 has token id {VOCAB} at position 2"):
        encoder.seq_encode([[1, 2], [0, 1, VOCAB]])
    with pytest.raises(ArgumentError, match="at least one document"):
        encoder.seq_encode([])
    with pytest.raises(ArgumentTypeError, match="document 0 must be a 1-D"):
        encoder.seq_encode([np.zeros((2, 2), dtype=np.int64)])


def test_token_documents_slice_and_take() -> None:
    encoder = tiny_leaf(observation="document").dist_to_encoder()
    docs = _docs([3, 1, 4], seed=3)
    enc = encoder.seq_encode(docs)
    assert isinstance(enc, TokenDocuments) and len(enc) == 3
    np.testing.assert_array_equal(enc[1:3].document(1), docs[2])
    np.testing.assert_array_equal(enc.take(np.array([2, 0])).document(1), docs[0])
    assert len(enc[2:1]) == 0


def test_observation_kinds_cannot_be_mixed_up() -> None:
    with pytest.raises(ArgumentError, match="`observation` must be 'pair'"):
        tiny_leaf(observation="token")
    doc_leaf = tiny_leaf(observation="document")
    pair_enc = (
        tiny_leaf()
        .dist_to_encoder()
        .encode_arrays(np.zeros((1, 2), np.int64), np.zeros(1, np.int64))
    )
    with pytest.raises(ArgumentTypeError, match="this leaf observes documents"):
        doc_leaf.estimator().accumulator_factory().make().seq_update(pair_enc, np.ones(1), None)
    sampler = doc_leaf.sampler(seed=0)
    with pytest.raises(ArgumentError, match="pass `prompt`"):
        sampler.sample(context=[1])
    with pytest.raises(ArgumentError, match="`prompt`/`n_tokens` are for document leaves"):
        tiny_leaf().sampler(seed=0).sample(prompt=[1], n_tokens=3)


def test_document_sampler_generates_documents_reproducibly() -> None:
    leaf = tiny_leaf(observation="document")
    a = leaf.sampler(seed=4).sample(prompt=[3], n_tokens=10)
    assert a.shape == (11,) and a[0] == 3
    np.testing.assert_array_equal(a, leaf.sampler(seed=4).sample(prompt=[3], n_tokens=10))
    many = leaf.sampler(seed=4).sample(3, prompt=[3], n_tokens=5)
    assert len(many) == 3 and all(d.shape == (6,) for d in many)


def test_initialization_path_accumulates_like_update() -> None:
    docs = _docs([9, 17], seed=5)
    a, b = tiny_leaf(observation="document"), tiny_leaf(observation="document")
    enc = a.dist_to_encoder().seq_encode(docs)
    estimate_partitions(a.estimator(), [(enc, None)])
    estimate_partitions(b.estimator(), [(enc, None)], prev_estimate=b)
    assert_params_equal(params_snapshot(a), params_snapshot(b))
