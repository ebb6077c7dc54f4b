"""LengthBandit: the EXP3 sequence_selector over length buckets, and its state in a stream."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.data import LengthBandit, StreamingCorpus, global_document_order
from mixle.errors import ArgumentError, StateMismatchError

LENGTHS = (5, 20, 300)


def _documents(count: int = 120) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(1, 100, size=int(n)) for n in rng.choice(LENGTHS, size=count)]


def _bandit(documents: list[np.ndarray], **options: object) -> LengthBandit:
    return LengthBandit([len(d) for d in documents], edges=[10, 100], seed=1, **options)


def _stream(documents: list[np.ndarray], bandit: LengthBandit) -> StreamingCorpus:
    return StreamingCorpus(
        documents, rank=0, world_size=1, block=16, batch_size=4, sequence_selector=bandit
    )


def _rewarded_batches(corpus: StreamingCorpus, bandit: LengthBandit, steps: int) -> list[bytes]:
    """``steps`` batches; after each, a reward per bucket from the batch's contents."""
    out = []
    for _, batch in zip(range(steps), corpus, strict=False):
        tokens = np.asarray(batch[0])
        out.append(tokens.tobytes())
        for bucket in range(bandit.num_buckets):
            bandit.report(bucket, float((tokens.sum() * (bucket + 1)) % 7) / 7)
    return out


def test_rations_disfavoured_buckets_and_keeps_the_favoured_one_whole() -> None:
    documents = _documents()
    bandit = _bandit(documents)
    base = global_document_order(len(documents), seed=0, epoch=0)
    assert np.array_equal(bandit(base, 0, 0), base)  # uniform weights: everything kept
    for _ in range(3):
        bandit.report(0, 1.0)
        bandit.report(2, 0.0)
    order = bandit(global_document_order(len(documents), seed=0, epoch=1), 0, 1)
    probabilities = bandit.probabilities(1)
    assert probabilities.argmax() == 0 and abs(probabilities.sum() - 1) < 1e-12
    kept = np.bincount(bandit.buckets_of(order), minlength=3)
    sizes = np.array(bandit.bucket_sizes)
    assert kept[0] == sizes[0]  # the favoured bucket is kept whole
    assert 0 < kept[2] < sizes[2]  # the long bucket is rationed, never starved
    assert len(set(order.tolist())) == len(order)  # no document repeated


def test_an_epoch_planned_again_gives_the_same_order() -> None:
    documents = _documents()
    bandit = _bandit(documents)
    base = global_document_order(len(documents), seed=0, epoch=0)
    first = bandit(base, 0, 0)
    bandit.report(1, 1.0)  # counts from the next epoch on
    assert np.array_equal(bandit(base, 0, 0), first)


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 60))
def test_stream_resumes_bitwise_at_any_batch(stop: int) -> None:
    documents = _documents(12)  # about 20 batches an epoch: 60 steps cross epochs
    uninterrupted_bandit = _bandit(documents)
    uninterrupted = _rewarded_batches(
        _stream(documents, uninterrupted_bandit), uninterrupted_bandit, 60
    )
    bandit = _bandit(documents)
    corpus = _stream(documents, bandit)
    head = _rewarded_batches(corpus, bandit, stop)
    state = json.loads(json.dumps(corpus.state_dict()))
    resumed_bandit = _bandit(documents)
    resumed_corpus = _stream(documents, resumed_bandit)
    resumed_corpus.load_state_dict(state)
    tail = _rewarded_batches(resumed_corpus, resumed_bandit, 60 - stop)
    assert head + tail == uninterrupted
    assert resumed_bandit.state_dict() == uninterrupted_bandit.state_dict()
    assert len(uninterrupted_bandit.state_dict()["planned"]) >= 3


def test_the_weights_change_which_documents_an_epoch_packs() -> None:
    documents = _documents()
    plain, rewarded = _bandit(documents), _bandit(documents)
    base = global_document_order(len(documents), seed=0, epoch=1)
    plain(base, 0, 0), rewarded(base, 0, 0)
    rewarded.report(2, 1.0)
    assert not np.array_equal(plain(base, 0, 1), rewarded(base, 0, 1))


@pytest.mark.parametrize("reward", [float("nan"), float("inf")])
def test_non_finite_reward_names_the_bucket(reward: float) -> None:
    with pytest.raises(ArgumentError, match=r"bucket 2 \(lengths \[100, inf\)\).*finite"):
        _bandit(_documents()).report(2, reward)


def test_unknown_bucket_is_refused() -> None:
    with pytest.raises(ArgumentError, match=r"unknown bucket 3.*buckets 0\.\.2"):
        _bandit(_documents()).report(3, 0.5)


def test_an_empty_bucket_is_refused_by_name() -> None:
    with pytest.raises(ArgumentError, match=r"bucket 1 \(lengths \[10, 15\)\) has no documents"):
        LengthBandit([5, 20, 300], edges=[10, 15])


@pytest.mark.parametrize(
    ("edges", "message"), [([], "at least one"), ([10, 10], "strictly increasing")]
)
def test_bad_edges_are_refused(edges: list[int], message: str) -> None:
    with pytest.raises(ArgumentError, match=message):
        LengthBandit([5, 20], edges=edges)


def test_state_from_another_curriculum_names_the_field() -> None:
    documents = _documents()
    state = _bandit(documents).state_dict()
    with pytest.raises(StateMismatchError, match=r"another curriculum: exploration \(saved 0.1"):
        _bandit(documents, exploration=0.2).load_state_dict(state)
    with pytest.raises(StateMismatchError, match="edges"):
        LengthBandit([len(d) for d in documents], edges=[10, 200], seed=1).load_state_dict(state)


def test_bad_state_values_name_the_field() -> None:
    documents = _documents()
    state = _bandit(documents).state_dict()
    state["log_weights"] = [0.0, float("nan"), 0.0]
    with pytest.raises(StateMismatchError, match=r"`log_weights` is not finite for bucket 1"):
        _bandit(documents).load_state_dict(state)
    state["log_weights"] = [0.0]
    with pytest.raises(StateMismatchError, match="`log_weights` must be a list of 3"):
        _bandit(documents).load_state_dict(state)


def test_a_stream_state_without_the_selector_is_refused() -> None:
    documents = _documents()
    bandit = _bandit(documents)
    state = _stream(documents, bandit).state_dict()
    del state["selector"]
    with pytest.raises(StateMismatchError, match="lacks the field `selector`"):
        _stream(documents, _bandit(documents)).load_state_dict(state)
