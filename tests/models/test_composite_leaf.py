"""``(label, document)`` composites: the label field's distribution is recovered, alone
and per expert inside a mixture fit by stream_em."""

from __future__ import annotations

import json
from types import ModuleType

import numpy as np
import pytest

from mixle.models import StreamingTransformer, TransformerLMEstimator
from mixle.stats import (
    CategoricalDistribution,
    CategoricalEstimator,
    CompositeDistribution,
    CompositeEstimator,
    MixtureDistribution,
    MixtureEstimator,
    from_dict,
    partitioned_estimate,
    stream_em,
    to_dict,
)

from .conftest import VOCAB, params_snapshot


def _labelled(
    seed: int, n: int, probs: list[float], docs: list[np.ndarray]
) -> list[tuple[int, np.ndarray]]:
    labels = np.random.default_rng(seed).choice(len(probs), n, p=probs)
    return [(int(label), doc) for label, doc in zip(labels, docs, strict=True)]


def test_composite_label_and_document_recovers_the_label_distribution() -> None:
    rng = np.random.default_rng(0)
    labels = ["prose"] * 10 + ["code"] * 6 + ["legal"] * 4
    data = [(label, rng.integers(0, VOCAB, int(rng.integers(2, 30)))) for label in labels]
    steps = []
    for parts in (1, 4):
        est = CompositeEstimator(
            [
                CategoricalEstimator(),  # labels learned from the data
                TransformerLMEstimator(
                    VOCAB, d_model=16, n_layer=1, n_head=2, block=8, observation="document"
                ),
            ]
        )
        before = params_snapshot(est.estimators[1].current())  # type: ignore[attr-defined]
        out = partitioned_estimate(est, data, num_partitions=parts)
        label_field, document_field = out.components
        assert isinstance(label_field, CategoricalDistribution)
        assert label_field.categories == ("code", "legal", "prose")
        np.testing.assert_array_equal(label_field.probs, [0.3, 0.2, 0.5])
        assert isinstance(document_field, StreamingTransformer)
        steps.append(params_snapshot(document_field))
        assert any(not np.array_equal(before[n], steps[-1][n]) for n in before)  # one step taken
        expected = label_field.seq_log_density(
            [x for x, _ in data]
        ) + document_field.seq_log_density([d for _, d in data])
        np.testing.assert_allclose(out.seq_log_density(data), expected, rtol=1e-12)
    for name in steps[0]:
        np.testing.assert_allclose(steps[0][name], steps[1][name], rtol=0, atol=1e-6)
    restored = from_dict(json.loads(json.dumps(to_dict(out))))
    assert isinstance(restored, CompositeDistribution)
    np.testing.assert_allclose(
        restored.seq_log_density(data[:3]), out.seq_log_density(data[:3]), rtol=1e-12
    )


def test_mixture_of_label_document_composites_recovers_each_sources_labels(
    bench: ModuleType,
) -> None:
    rng = np.random.default_rng(5)
    n = 120
    vocab = 16
    a = _labelled(
        1, n, [0.7, 0.2, 0.1], bench.markov_documents(bench.markov_chain(vocab, 1), n, 48, rng)
    )
    b = _labelled(
        2, n, [0.1, 0.2, 0.7], bench.markov_documents(bench.markov_chain(vocab, 2), n, 48, rng)
    )
    order = rng.permutation(2 * n)
    data = [(a + b)[int(i)] for i in order]

    def component(seed: int) -> CompositeDistribution:
        leaf = StreamingTransformer.from_config(
            vocab,
            d_model=16,
            n_layer=1,
            n_head=2,
            block=16,
            seed=seed,
            lr=1e-2,
            observation="document",
        )
        return CompositeDistribution([CategoricalDistribution([1 / 3] * 3), leaf])

    mix = MixtureDistribution([component(1), component(2)], [0.5, 0.5])
    # the label fields are smoothed (a batch may lack a label); the leaves train in place
    estimator = MixtureEstimator(
        [
            CompositeEstimator(
                [CategoricalEstimator(3, pseudo_count=1.0), c.components[1].estimator()]
            )  # type: ignore[attr-defined]
            for c in mix.components
        ]
    )
    for _ in range(3):
        mix = stream_em(
            mix, [data[i : i + 16] for i in range(0, len(data), 16)], estimator=estimator
        )
    # one full-data EM iteration (the partition driver) re-estimates the labels from all data
    mix = partitioned_estimate(estimator, data, num_partitions=3, prev_estimate=mix)
    assigned = mix.posterior(data).argmax(axis=1)
    source = (order >= n).astype(int)
    flip = float(np.mean(assigned == source)) < 0.5
    purity = float(np.mean((assigned != source) if flip else (assigned == source)))
    assert purity >= 0.95
    for k, labelled in ((0, a), (1, b)):
        expert = mix.components[1 - k if flip else k]
        assert isinstance(expert, CompositeDistribution)
        label_field = expert.components[0]
        assert isinstance(label_field, CategoricalDistribution)
        counts = np.bincount([x for x, _ in labelled], minlength=3)
        np.testing.assert_allclose(label_field.probs, (counts + 1.0) / (n + 3.0), atol=0.03)


@pytest.mark.parametrize(
    "bad", [[(0,)], [(3, np.array([1, 2]))], [(0, np.array([], dtype=np.int64))]]
)
def test_malformed_label_document_observations_are_named(bad: list[tuple[object, ...]]) -> None:
    comp = CompositeDistribution(
        [
            CategoricalDistribution([0.5, 0.3, 0.2]),
            StreamingTransformer.from_config(
                VOCAB, d_model=16, n_layer=1, n_head=2, block=8, observation="document"
            ),
        ]
    )
    with pytest.raises(
        ValueError,
        match=r"observation 0|field 0 \(CategoricalEncoder\)|field 1 \(StreamingDocumentEncoder\): document 0 is empty",
    ):
        comp.seq_log_density(bad)
