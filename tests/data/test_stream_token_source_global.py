"""TokenStream(rank=, world_size=): global batches of windows and the elastic cursor."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.data import TokenStream
from mixle.errors import StateMismatchError

Batch = tuple[np.ndarray, np.ndarray]


def _job(
    documents: list[np.ndarray],
    world: int,
    batch: int,
    *,
    state: dict[str, Any] | None = None,
    limit: int | None = None,
    **kw: Any,
) -> tuple[list[list[Batch]], dict[str, Any]]:
    streams = [
        TokenStream(documents, 3, batch, rank=r, world_size=world, **kw) for r in range(world)
    ]
    for stream in streams:
        if state is not None:
            stream.load_state_dict(state)
    iterators = [iter(stream) for stream in streams]
    steps: list[list[Batch]] = []
    while limit is None or len(steps) < limit:
        parts = [next(iterator, None) for iterator in iterators]
        if parts[0] is None:
            assert all(part is None for part in parts)  # every rank stops together
            break
        steps.append([part for part in parts if part is not None])
    states = [stream.state_dict() for stream in streams]
    assert all(s == states[0] for s in states)
    return steps, states[0]


def _windows(steps: list[list[Batch]]) -> Counter[tuple[tuple[int, ...], int]]:
    return Counter(
        (tuple(row), int(target))
        for step in steps
        for context, targets in step
        for row, target in zip(context.tolist(), targets.tolist(), strict=True)
    )


documents_strategy = st.lists(
    st.lists(st.integers(0, 99), max_size=20).map(lambda xs: np.array(xs, dtype=np.int64)),
    max_size=8,
)


@settings(max_examples=30, deadline=None)
@given(documents_strategy, st.integers(1, 8), st.booleans(), st.integers(0, 5))
def test_concatenated_step_is_the_same_for_every_factorisation(
    documents: list[np.ndarray], total: int, shuffle: bool, seed: int
) -> None:
    reference = list(TokenStream(documents, 3, total, shuffle=shuffle, seed=seed))
    for world in (w for w in range(1, total + 1) if total % w == 0):
        steps, _ = _job(documents, world, total // world, shuffle=shuffle, seed=seed)
        assert len(steps) == len(reference)
        for step, (context, target) in zip(steps, reference, strict=True):
            np.testing.assert_array_equal(np.concatenate([p[0] for p in step]), context)
            np.testing.assert_array_equal(np.concatenate([p[1] for p in step]), target)


@settings(max_examples=30, deadline=None)
@given(
    documents_strategy,
    st.tuples(st.integers(1, 3), st.integers(1, 4)),
    st.tuples(st.integers(1, 3), st.integers(1, 4)),
    st.integers(0, 10),
)
def test_elastic_resume_visits_every_window_of_each_epoch_once(
    documents: list[np.ndarray], before: tuple[int, int], after: tuple[int, int], stop: int
) -> None:
    kw = {"epochs": 2, "seed": 1}
    full, _ = _job(documents, 1, 1, **kw)
    head, state = _job(documents, *before, limit=stop, **kw)
    tail, _ = _job(documents, *after, state=state, **kw)
    assert _windows(head) + _windows(tail) == _windows(full)


def test_state_is_small_and_names_no_shape() -> None:
    stream = TokenStream([np.arange(50)], 4, 3, rank=1, world_size=2)
    state = stream.state_dict()
    assert state["version"] == 2 and "batch_size" not in state["stream"]
    assert len(json.dumps(state)) <= 1024


def test_bad_states_are_refused_and_nothing_moves() -> None:
    documents = [np.arange(60)]
    stream = TokenStream(documents, 4, 3, rank=0, world_size=2)
    next(iter(stream))
    state = stream.state_dict()
    for bad, fragment in (
        ({**state, "position": 10_000}, "position 10000 of epoch 0, which has only 56 windows"),
        ({**state, "position": -2}, "`position` must be a nonnegative integer"),
        (
            {**state, "stream": {**state["stream"], "seed": 9}},
            "seed in checkpoint: 9 / in stream: 0",
        ),
    ):
        with pytest.raises(StateMismatchError, match=fragment):
            stream.load_state_dict(bad)
        assert stream.state_dict() == state
    legacy = TokenStream(documents, 4, 3)
    with pytest.raises(StateMismatchError, match="version-2 state"):
        legacy.load_state_dict(state)
    with pytest.raises(StateMismatchError, match="version-1 state"):
        stream.load_state_dict(legacy.state_dict())
