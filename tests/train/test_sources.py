"""Batch sources: rank sharding of TokenStream windows, resume at every step, ids, holdout."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from mixle.data import Batch
from mixle.errors import ArgumentError, StateMismatchError
from mixle.train import WindowBatches, batch_digest, split_holdout
from mixle.train._sources import GlobalWindowBatches, PackedBatches, eval_batches


def _documents(seed: int, count: int, longest: int = 40) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 50, int(rng.integers(1, longest))) for _ in range(count)]


def _windows(docs: list[np.ndarray], rank: int, world: int, batch: int = 3) -> WindowBatches:
    return WindowBatches(
        docs, rank=rank, world_size=world, block=5, batch_size=batch, seed=1, boundary_id=None
    )


@given(seed=st.integers(0, 10**6), count=st.integers(2, 25), world=st.integers(1, 4))
def test_window_ranks_take_disjoint_batches_with_equal_counts(
    seed: int, count: int, world: int
) -> None:
    docs = _documents(seed, count)
    sources = [_windows(docs, r, world) for r in range(world)]
    per_epoch = {s.steps_in_epoch(0) for s in sources}
    assert len(per_epoch) == 1
    steps = per_epoch.pop()
    stream = sources[0].stream
    for rank, source in enumerate(sources):
        batches = [b for _, (b, _) in zip(range(steps), source, strict=False)]
        for index, batch in enumerate(batches):
            expected = stream.batch(0, index * world + rank)
            assert np.array_equal(batch.context, expected[0])
            assert np.array_equal(batch.targets, expected[1])


@given(seed=st.integers(0, 10**6), count=st.integers(2, 8))
def test_window_state_restores_at_every_step(seed: int, count: int) -> None:
    docs = _documents(seed, count, longest=20)
    source = _windows(docs, 1, 2, batch=4)
    per_epoch = source.steps_in_epoch(0)
    assume(per_epoch > 0)
    total = 2 * per_epoch + 1  # crosses an epoch boundary
    states, seen = [], []
    iterator = iter(source)
    for _ in range(total):
        states.append(source.state_dict())
        batch, batch_id = next(iterator)
        seen.append((batch_id, batch_digest(batch)))
    for position, state in enumerate(states):
        fresh = _windows(docs, 1, 2, batch=4)
        fresh.load_state_dict(state)
        rest = [
            (i, batch_digest(b)) for _, (b, i) in zip(range(total - position), fresh, strict=False)
        ]
        assert rest == seen[position:]


def test_window_state_from_other_rank_is_refused() -> None:
    docs = _documents(0, 10)
    state = _windows(docs, 0, 2).state_dict()
    with pytest.raises(StateMismatchError, match="rank in checkpoint: 0 / in stream: 1"):
        _windows(docs, 1, 2).load_state_dict(state)


def test_window_ids_are_epoch_and_step() -> None:
    source = _windows(_documents(3, 10), 0, 1)
    per_epoch = source.steps_in_epoch(0)
    ids = [i for _, (_, i) in zip(range(per_epoch + 2), source, strict=False)]
    assert ids == [(0, k) for k in range(per_epoch)] + [(1, 0), (1, 1)]


def test_packed_ids_follow_the_corpus_cursor() -> None:
    docs = _documents(5, 30)
    source = PackedBatches(
        docs, rank=0, world_size=1, block=4, batch_size=2, seed=0, boundary_id=None
    )
    per_epoch = source.steps_in_epoch(0)
    ids = [i for _, (_, i) in zip(range(per_epoch + 1), source, strict=False)]
    assert ids == [(0, k) for k in range(per_epoch)] + [(1, 0)]
    assert source.cursor == (1, 1)


def test_split_holdout_takes_the_last_documents() -> None:
    docs = _documents(0, 10)
    train, held = split_holdout(docs, 3)
    assert len(train) == 7 and all(h is d for h, d in zip(held, docs[7:], strict=True))
    assert split_holdout(docs, 0)[1] == []
    with pytest.raises(ArgumentError, match="must leave training documents"):
        split_holdout(docs, 10)


def test_batch_digest_depends_on_content_and_shape() -> None:
    a = np.arange(12).reshape(3, 4)
    t = np.arange(3)
    assert batch_digest(Batch(a, t)) == batch_digest(Batch(a.copy(), t))
    assert batch_digest(Batch(a, t)) != batch_digest(Batch(a.reshape(4, 3), t))
    b = a.copy()
    b[2, 3] += 1
    assert batch_digest(Batch(a, t)) != batch_digest(Batch(b, t))
    assert batch_digest(Batch(a, t)) != batch_digest(Batch(a, t, source_ids=t))


@pytest.mark.parametrize("objective", ["packed", "windows"])
def test_eval_batches_are_fixed_and_limited(objective: str) -> None:
    docs = _documents(1, 20)
    kwargs = {"block": 4, "batch_size": 2, "limit": 3, "seed": 0, "boundary_id": None}
    first = eval_batches(objective, docs, **kwargs)  # type: ignore[arg-type]
    again = eval_batches(objective, docs, **kwargs)  # type: ignore[arg-type]
    assert len(first) == 3
    assert [batch_digest(b) for b in first] == [batch_digest(b) for b in again]
    assert eval_batches(objective, [], **kwargs) == []  # type: ignore[arg-type]


SHAPE: dict[str, Any] = {"block": 5, "batch_size": 2, "seed": 1, "boundary_id": None}
RANKS = {"rank": 0, "world_size": 1}
BUILDERS: dict[str, Callable[..., object]] = {
    "packed": PackedBatches,
    "windows": WindowBatches,
    "global": GlobalWindowBatches,
    "eval": lambda docs, **kw: eval_batches(
        "windows", docs, limit=1, **{k: v for k, v in kw.items() if k not in RANKS}
    ),
}


@pytest.mark.parametrize("build", sorted(BUILDERS))
def test_a_misspelt_or_missing_argument_raises_type_error(build: str) -> None:
    docs = _documents(0, 6)
    BUILDERS[build](docs, **RANKS, **SHAPE)  # the right names work
    misspelt = {**{k: v for k, v in SHAPE.items() if k != "batch_size"}, "batchsize": 2}
    with pytest.raises(TypeError, match="batchsize"):
        BUILDERS[build](docs, **RANKS, **misspelt)
    with pytest.raises(TypeError, match="seed"):
        BUILDERS[build](docs, **RANKS, **{k: v for k, v in SHAPE.items() if k != "seed"})
