"""stream_em + document_batches: one step per expert per mini-batch, the weight update,
determinism, resume (every optimizer and the weights in to_dict), validation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mixle.corpus import CorpusWriter, open_corpus
from mixle.errors import ArgumentError, ArgumentTypeError
from mixle.models import CategoricalEmbedding, StreamingTransformer
from mixle.stats import (
    CategoricalDistribution,
    MixtureDistribution,
    document_batches,
    from_dict,
    stream_em,
    to_dict,
)

from .conftest import VOCAB, assert_params_equal, params_snapshot, tiny_leaf


def _mixture(seed: int = 9) -> MixtureDistribution:
    emb = CategoricalEmbedding(VOCAB, 16, seed=seed)
    experts = [tiny_leaf(seed=s, embedding=emb, observation="document") for s in (1, 2)]
    return MixtureDistribution(experts, [0.5, 0.5])


def _documents(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, VOCAB, int(rng.integers(2, 40))) for _ in range(n)]


def _steps(leaf: object) -> int:
    assert isinstance(leaf, StreamingTransformer)
    state = leaf.estimator()._slot.state_dict()
    return 0 if state is None else int(next(iter(state["state"].values()))["step"])


def _assert_same(a: MixtureDistribution, b: MixtureDistribution) -> None:
    assert a.weights.tobytes() == b.weights.tobytes()
    for x, y in zip(a.components, b.components, strict=True):
        assert isinstance(x, StreamingTransformer) and isinstance(y, StreamingTransformer)
        assert_params_equal(params_snapshot(x), params_snapshot(y))


def test_one_optimizer_step_per_expert_and_one_for_the_shared_table_per_batch() -> None:
    docs = _documents(40)
    mix = stream_em(_mixture(), document_batches(docs, 8))
    assert [_steps(c) for c in mix.components] == [5, 5]
    table_state = mix._shared[0].state_dict()
    assert table_state is not None and int(table_state["state"][0]["step"]) == 5
    assert mix.components[0].module.embedding is mix.components[1].module.embedding  # type: ignore[attr-defined]


def test_weights_move_toward_each_batch_estimate_by_weight_rate() -> None:
    docs = _documents(8, seed=1)
    for rate in (1.0, 0.5):
        mix = _mixture()
        posterior = mix.posterior(docs)
        out = stream_em(mix, [docs], weight_rate=rate)
        expected = 0.5 * (1 - rate) + rate * posterior.mean(axis=0)
        np.testing.assert_allclose(out.weights, expected / expected.sum(), rtol=1e-12)
    mix = _mixture()
    posterior = mix.posterior(docs)
    out = stream_em(mix, [docs], weight_rate=1.0, pseudo_count=3.0)
    np.testing.assert_allclose(out.weights, (posterior.sum(axis=0) + 3) / (8 + 6), rtol=1e-12)


def test_stream_em_is_deterministic_and_resumes_bitwise_from_to_dict() -> None:
    docs = _documents(48, seed=2)
    batches = list(document_batches(docs, 8, seed=3))
    straight = stream_em(_mixture(), batches)
    again = stream_em(_mixture(), batches)
    _assert_same(straight, again)
    first = stream_em(_mixture(), batches[:3])
    state = json.loads(json.dumps(to_dict(first)))
    assert len(state["shared_embeddings"]) == 1 and state["shared_embeddings"][0]["optimizer_state"]
    assert all(entry["dict"]["optimizer_state"] for entry in state["components"])
    resumed = stream_em(from_dict(state), batches[3:])
    _assert_same(straight, resumed)


def test_max_steps_empty_batches_and_logging() -> None:
    docs = _documents(30, seed=4)
    lines: list[str] = []
    mix = stream_em(
        _mixture(), [[], *document_batches(docs, 5)], max_steps=4, report_every=2, log=lines.append
    )
    assert [_steps(c) for c in mix.components] == [4, 4]
    assert [line.split(" |")[0] for line in lines] == ["step 2", "step 4"]
    assert all("nll/obs" in line and "weights [" in line for line in lines)
    before = params_snapshot(mix.components[0])  # type: ignore[arg-type]
    stream_em(mix, document_batches(docs, 5), max_steps=0)
    assert_params_equal(before, params_snapshot(mix.components[0]))  # type: ignore[arg-type]


def test_pair_level_mixtures_stream_too() -> None:
    experts = [tiny_leaf(seed=1), tiny_leaf(seed=2)]
    rng = np.random.default_rng(5)
    batches = [
        [(rng.integers(0, VOCAB, 4), int(rng.integers(VOCAB))) for _ in range(6)] for _ in range(3)
    ]
    mix = stream_em(MixtureDistribution(experts, [0.5, 0.5]), batches)
    assert [_steps(c) for c in mix.components] == [3, 3]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"weight_rate": 0.0}, ArgumentError, r"`weight_rate` must be in \(0, 1\]"),
        ({"weight_rate": 1.5}, ArgumentError, "`weight_rate`"),
        ({"weight_rate": True}, ArgumentError, "`weight_rate`"),
        ({"max_steps": -1}, ArgumentError, "`max_steps`"),
        ({"log": "print"}, ArgumentTypeError, "`log`"),
        ({"estimator": "em"}, ArgumentTypeError, "`estimator` must be a MixtureEstimator"),
    ],
)
def test_bad_arguments_raise_clearly(kwargs: dict[str, object], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        stream_em(_mixture(), [], **kwargs)  # type: ignore[arg-type]


def test_estimator_must_fit_the_mixture() -> None:
    mix = _mixture()
    with pytest.raises(ArgumentError, match="mixture's 2 components"):
        stream_em(
            mix,
            [],
            estimator=MixtureDistribution([CategoricalDistribution([1.0])], [1.0]).estimator(),
        )
    with pytest.raises(ArgumentError, match="carries its own pseudo_count"):
        stream_em(mix, [], estimator=mix.estimator(), pseudo_count=1.0)
    with pytest.raises(ArgumentTypeError, match="`mixture` must be a MixtureDistribution"):
        stream_em(mix.components[0], [])  # type: ignore[arg-type]


def test_document_batches_cover_each_document_once_and_resume(tmp_path: Path) -> None:
    docs = _documents(23, seed=6)
    with CorpusWriter(tmp_path / "c", vocab_size=VOCAB, durable=False) as writer:
        writer.add_many(docs)
    corpus = open_corpus(tmp_path / "c")
    batches = list(document_batches(corpus, 5, seed=1, epoch=0))
    assert [len(b) for b in batches] == [5, 5, 5, 5, 3]
    seen = sorted(tuple(d.tolist()) for batch in batches for d in batch)
    assert seen == sorted(tuple(d.tolist()) for d in docs)
    resumed = list(document_batches(corpus, 5, seed=1, epoch=0, start_batch=2))
    assert [[d.tolist() for d in b] for b in resumed] == [
        [d.tolist() for d in b] for b in batches[2:]
    ]
    other = list(document_batches(corpus, 5, seed=1, epoch=1))
    assert [d.tolist() for d in other[0]] != [d.tolist() for d in batches[0]]
    mix = stream_em(_mixture(), document_batches(corpus, 8))  # memory-mapped, read-only documents
    assert [_steps(c) for c in mix.components] == [3, 3]
    with pytest.raises(ArgumentError, match="`batch_size`"):
        next(document_batches(corpus, 0))


def test_mid_epoch_checkpoint_with_max_steps_and_start_batch_resumes_bitwise() -> None:
    docs = _documents(40, seed=8)
    straight = stream_em(_mixture(), document_batches(docs, 8, seed=2, epoch=1))
    partial = stream_em(_mixture(), document_batches(docs, 8, seed=2, epoch=1), max_steps=2)
    state = json.loads(json.dumps(to_dict(partial)))
    resumed = stream_em(from_dict(state), document_batches(docs, 8, seed=2, epoch=1, start_batch=2))
    _assert_same(straight, resumed)
