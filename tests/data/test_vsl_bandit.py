"""VariableLengthStream(curriculum="bandit"): a LengthBandit picks each batch's bucket."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mixle.data import Batch, VariableLengthStream
from mixle.errors import ArgumentError, StateMismatchError

OPTIONS = {"block": 64, "min_length": 8, "tokens_per_batch": 256, "curriculum": "bandit"}


def _documents(count: int = 300) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    lengths = np.exp(rng.normal(4, 1.2, size=count)).astype(int) + 1
    return [rng.integers(1, 100, size=int(n)) for n in lengths]


def _stream(documents: list[np.ndarray], **options: object) -> VariableLengthStream:
    return VariableLengthStream(documents, **{**OPTIONS, "bandit_window": 8, **options})  # type: ignore[arg-type]


def _rewarded(stream: VariableLengthStream, steps: int) -> list[Batch]:
    """``steps`` batches, rewarding the shortest bucket after each (as a trainer would)."""
    out = []
    batches = stream.batches()
    assert stream.bandit is not None
    for _ in range(steps):
        batch = next(batches)
        bucket = int(np.argmax(stream.bucket_tokens(batch)))
        stream.bandit.report(bucket, 1.0 if bucket == 0 else 0.0)
        out.append(batch)
    return out


def _bucket(stream: VariableLengthStream, batch: Batch) -> int:
    return stream.bucket_lengths.index(batch.context.shape[1])


def test_every_batch_once_per_epoch_and_the_rewarded_bucket_comes_first() -> None:
    stream = _stream(_documents())
    size = stream.epoch_size(0)
    buckets = [_bucket(stream, b) for b in _rewarded(stream, 2 * size)]
    for epoch in range(2):
        counts = np.bincount(buckets[epoch * size : (epoch + 1) * size], minlength=4)
        assert tuple(counts) == stream.batches_per_bucket
    second = np.asarray(buckets[size:])
    natural = VariableLengthStream(_documents(), **{**OPTIONS, "curriculum": "natural"})
    natural_order = np.asarray([natural.bucket_of(1, i) for i in range(size)])
    # Rewarded, bucket 0 is drawn earlier in the epoch than the natural shuffle draws it.
    assert np.flatnonzero(second == 0).mean() < np.flatnonzero(natural_order == 0).mean()


def test_resume_with_rewards_is_bitwise_and_elastic() -> None:
    documents = _documents()
    reference = _rewarded(_stream(documents), 60)
    first = _stream(documents)
    _rewarded(first, 23)
    state = json.loads(json.dumps(first.state_dict()))
    world = 2
    ranks = [_stream(documents, rank=r, world_size=world) for r in range(world)]
    for stream in ranks:
        stream.load_state_dict(state)
    parts = [_rewarded(stream, 37) for stream in ranks]
    for step, want in enumerate(reference[23:]):
        for name in ("context", "targets", "loss_mask", "document_ids"):
            joined = np.concatenate([getattr(part[step], name) for part in parts])
            assert np.array_equal(joined, getattr(want, name)), (step, name)


def test_random_access_and_bad_states_are_refused() -> None:
    documents = _documents(120)
    stream = _stream(documents)
    assert stream.read(0, 0).context.shape[1] in stream.bucket_lengths
    with pytest.raises(ArgumentError, match=r"read at its cursor \(0, 0\) only"):
        stream.read(0, 3)
    state = stream.state_dict()
    without = {k: v for k, v in state.items() if k != "bandit"}
    with pytest.raises(StateMismatchError, match="lacks the field `bandit`"):
        _stream(documents).load_state_dict(without)
    broken = {**state, "bandit": {**state["bandit"], "consumed": [1, 0, 0, 0]}}
    with pytest.raises(StateMismatchError, match=r"`bandit.consumed` must hold 4 counts"):
        _stream(documents).load_state_dict(broken)
    natural = VariableLengthStream(documents, **{**OPTIONS, "curriculum": "natural"})
    with pytest.raises(StateMismatchError, match="curriculum in checkpoint: 'natural'"):
        stream.load_state_dict(natural.state_dict())
    assert stream.cursor == (0, 0)


def test_reward_for_an_unknown_bucket_or_nan_is_named() -> None:
    stream = _stream(_documents(80))
    assert stream.bandit is not None
    with pytest.raises(ArgumentError, match="unknown bucket 7"):
        stream.bandit.report(7, 1.0)
    with pytest.raises(ArgumentError, match=r"bucket 1 \(lengths \[16, 32\)\) must be finite"):
        stream.bandit.report(1, float("nan"))
