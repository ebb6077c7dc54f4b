"""The seed ``stream_token_source`` over an in-memory token array."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mixle.data.stream_token_source import stream_token_source
from mixle.errors import ArgumentError, ArgumentTypeError, TokenIdError


def _collect(batches: object) -> list[tuple[np.ndarray, np.ndarray]]:
    return list(batches)  # type: ignore[call-overload]


def _windows(tokens: np.ndarray, block: int) -> list[tuple[tuple[int, ...], int]]:
    return [
        (tuple(int(t) for t in tokens[i : i + block]), int(tokens[i + block]))
        for i in range(len(tokens) - block)
    ]


def _flatten(batches: list[tuple[np.ndarray, np.ndarray]]) -> list[tuple[tuple[int, ...], int]]:
    return [
        (tuple(int(t) for t in ctx), int(nxt))
        for context, target in batches
        for ctx, nxt in zip(context, target, strict=True)
    ]


def test_unshuffled_batches_are_consecutive_windows() -> None:
    tokens = np.arange(100, 111)
    batches = _collect(stream_token_source(tokens, 3, 4, shuffle=False))
    assert [(c.shape, t.shape) for c, t in batches] == [((4, 3), (4,)), ((4, 3), (4,))]
    assert batches[0][0].tolist() == [
        [100, 101, 102],
        [101, 102, 103],
        [102, 103, 104],
        [103, 104, 105],
    ]
    assert batches[0][1].tolist() == [103, 104, 105, 106]
    assert batches[1][1].tolist() == [107, 108, 109, 110]


@given(
    tokens=st.lists(st.integers(-(2**63), 2**63 - 1), min_size=0, max_size=60),
    block=st.integers(1, 8),
    batch_size=st.integers(1, 9),
    epochs=st.integers(0, 3),
    shuffle=st.booleans(),
    seed=st.integers(0, 2**32),
)
def test_every_epoch_yields_each_window_exactly_once(
    tokens: list[int], block: int, batch_size: int, epochs: int, shuffle: bool, seed: int
) -> None:
    array = np.array(tokens, dtype=np.int64)
    batches = _collect(
        stream_token_source(array, block, batch_size, epochs=epochs, shuffle=shuffle, seed=seed)
    )
    expected = _windows(array, block)
    per_epoch = -(-len(expected) // batch_size)
    assert len(batches) == per_epoch * epochs
    for context, target in batches:
        assert context.dtype == np.int64 and target.dtype == np.int64
        assert context.ndim == 2 and context.shape[1] == block
        assert target.shape == (context.shape[0],)
        assert 1 <= context.shape[0] <= batch_size
    for epoch in range(epochs):
        got = _flatten(batches[epoch * per_epoch : (epoch + 1) * per_epoch])
        assert Counter(got) == Counter(expected)
        if not shuffle:
            assert got == expected


def test_same_seed_same_batches_and_epochs_differ() -> None:
    tokens = np.arange(500)
    first = _collect(stream_token_source(tokens, 4, 500, epochs=2, seed=7))
    again = _collect(stream_token_source(tokens, 4, 500, epochs=2, seed=7))
    other = _collect(stream_token_source(tokens, 4, 500, epochs=2, seed=8))
    for (a, b), (c, d) in zip(first, again, strict=True):
        assert np.array_equal(a, c) and np.array_equal(b, d)
    assert not np.array_equal(first[0][1], first[1][1])
    assert not np.array_equal(first[0][1], other[0][1])


def test_batches_are_identical_across_processes() -> None:
    code = (
        "import sys, numpy as np\n"
        "from mixle.data.stream_token_source import stream_token_source\n"
        "for c, t in stream_token_source(np.arange(300) * 7, 5, 16, epochs=2, seed=11):\n"
        "    sys.stdout.buffer.write(c.tobytes() + t.tobytes())\n"
    )
    runs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, check=True).stdout
        for _ in range(2)
    ]
    local = b"".join(
        c.tobytes() + t.tobytes()
        for c, t in stream_token_source(np.arange(300) * 7, 5, 16, epochs=2, seed=11)
    )
    assert runs[0] == runs[1] == local


def test_epochs_zero_yields_nothing() -> None:
    assert _collect(stream_token_source(np.arange(50), 4, 3, epochs=0)) == []


def test_too_short_array_yields_nothing() -> None:
    assert _collect(stream_token_source(np.arange(4), 4, 3)) == []
    assert _collect(stream_token_source([], 1, 1)) == []


def test_ids_above_float32_precision_survive_unchanged() -> None:
    big = 2**24 + 1  # float32(2**24 + 1) == 2**24: a float cast would merge these ids.
    tokens = np.array([big, 2**24, big + 2, 2**62 + 1, big], dtype=np.int64)
    ((context, target),) = _collect(stream_token_source(tokens, 4, 8, shuffle=False))
    assert context.tolist() == [[big, 2**24, big + 2, 2**62 + 1]]
    assert target.tolist() == [big]


def test_integral_floats_and_narrow_ints_are_accepted_as_int64() -> None:
    for tokens in (np.arange(6, dtype=np.float64), np.arange(6, dtype=np.uint16), list(range(6))):
        ((context, target),) = _collect(stream_token_source(tokens, 5, 4, shuffle=False))
        assert context.dtype == np.int64 and context.tolist() == [[0, 1, 2, 3, 4]]
        assert target.tolist() == [5]


def test_batches_are_independent_copies() -> None:
    tokens = np.arange(20, dtype=np.int64)
    context, target = next(stream_token_source(tokens, 3, 2, shuffle=False))
    context[:] = -1
    target[:] = -1
    assert tokens.tolist() == list(range(20))


@pytest.mark.parametrize(
    ("values", "fragment"),
    [
        (np.array([1.0, np.nan, 3.0]), "position 1"),
        (np.array([1.0, 2.0, np.inf]), "position 2"),
        (np.array([1.0, -np.inf]), "position 1"),
        (np.array([0.0, 1.5]), "position 1"),
        (np.array([0, 2**63], dtype=np.uint64), "position 1"),
        (np.array([0.0, float(2**63)]), "position 1"),
        ([0, 2**63], "position 1"),
        ([0, 1, True], "position 2"),
    ],
)
def test_invalid_token_ids_raise_at_call_time(values: object, fragment: str) -> None:
    with pytest.raises(TokenIdError, match=fragment) as info:
        stream_token_source(values, 1, 1)
    assert "token_ids" in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "values",
    [np.array([True, False, True]), np.zeros((3, 2), dtype=np.int64), np.array(["a", "b"])],
)
def test_non_numeric_or_non_1d_token_ids_raise_type_errors(values: np.ndarray) -> None:
    with pytest.raises(ArgumentTypeError, match="token_ids"):
        stream_token_source(values, 1, 1)


@pytest.mark.parametrize("name", ["block", "batch_size"])
@pytest.mark.parametrize("value", [0, -1, -(2**40)])
def test_non_positive_sizes_raise_at_call_time(name: str, value: int) -> None:
    kwargs = {"block": 2, "batch_size": 2, name: value}
    with pytest.raises(ArgumentError, match=f"`{name}` must be a positive integer. Got {value}"):
        stream_token_source(np.arange(10), **kwargs)


@pytest.mark.parametrize("name", ["block", "batch_size", "epochs", "seed"])
@pytest.mark.parametrize("value", [True, 2.0, 1.5, float("nan"), "3", None])
def test_non_integer_arguments_raise_type_errors(name: str, value: object) -> None:
    kwargs: dict[str, object] = {"block": 2, "batch_size": 2, name: value}
    with pytest.raises(ArgumentTypeError, match=f"`{name}` must be an integer"):
        stream_token_source(np.arange(10), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["epochs", "seed"])
def test_negative_epochs_and_seed_raise(name: str) -> None:
    with pytest.raises(ArgumentError, match=f"`{name}` must be a nonnegative integer. Got -1"):
        stream_token_source(np.arange(10), 2, 2, **{name: -1})


def test_shuffle_must_be_a_bool() -> None:
    with pytest.raises(ArgumentTypeError, match="`shuffle` must be a bool"):
        stream_token_source(np.arange(10), 2, 2, shuffle=1)  # type: ignore[arg-type]


def test_validation_happens_before_iteration() -> None:
    # A generator function would only fail on the first next(); this must fail on the call.
    with pytest.raises(ArgumentError):
        stream_token_source(np.arange(10), 2, 0)
    iterator = stream_token_source(np.arange(10), 2, 2)
    assert iter(iterator) is iterator
