"""Batch parsing and pair encoding: properties that need no model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mixle.errors import ArgumentError, ArgumentTypeError, TokenIdError
from mixle.models import StreamingTokenEncoder, TokenPairs
from mixle.models._inputs import as_device, parse_batch

V, B = 11, 6


@given(
    b=st.integers(1, 4),
    width=st.integers(1, B),
    data=st.data(),
)
def test_values_under_masked_targets_and_dead_context_never_reach_the_model(
    b: int, width: int, data: st.DataObject
) -> None:
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    ctx = rng.integers(0, V, (b, width))
    targets = rng.integers(0, V, (b, width))
    mask = rng.random((b, width)) < data.draw(st.floats(0.0, 1.0))
    parsed = parse_batch((ctx, targets, mask), V, B)
    live = np.flip(np.maximum.accumulate(np.flip(mask, 1), 1), 1)
    junk_ctx = np.where(live, ctx, rng.integers(-5, 3 * V, (b, width)))
    junk_targets = np.where(mask, targets, rng.integers(-5, 3 * V, (b, width)))
    again = parse_batch((junk_ctx, junk_targets, mask), V, B)
    np.testing.assert_array_equal(parsed.contexts, again.contexts)
    np.testing.assert_array_equal(parsed.targets, again.targets)
    np.testing.assert_array_equal(parsed.weights, mask.astype(np.float32))
    # live context and observed targets are passed through untouched
    np.testing.assert_array_equal(parsed.contexts[live], ctx[live])
    np.testing.assert_array_equal(parsed.targets[mask], targets[mask])


def test_pairs_batch_gets_unit_weights_and_accepts_token_pairs() -> None:
    ctx, tok = np.arange(12).reshape(3, 4) % V, np.array([1, 2, 3])
    parsed = parse_batch((ctx, tok), V, B)
    assert not parsed.dense
    np.testing.assert_array_equal(parsed.weights, np.ones(3))
    again = parse_batch(TokenPairs(ctx, tok), V, B)
    np.testing.assert_array_equal(again.contexts, parsed.contexts)


@given(
    st.lists(
        st.tuples(st.lists(st.integers(0, V - 1), min_size=3, max_size=3), st.integers(0, V - 1)),
        min_size=1,
        max_size=8,
    )
)
def test_seq_encode_equals_encode_arrays(pairs: list[tuple[list[int], int]]) -> None:
    encoder = StreamingTokenEncoder(V, B)
    a = encoder.seq_encode(pairs)
    b = encoder.encode_arrays(np.array([c for c, _ in pairs]), np.array([t for _, t in pairs]))
    np.testing.assert_array_equal(a.contexts, b.contexts)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    assert len(a) == len(pairs) and len(a[1:]) == len(pairs) - 1


def test_encoder_errors_name_the_pair() -> None:
    encoder = StreamingTokenEncoder(V, B)
    with pytest.raises(TokenIdError, match="context of pair 1"):
        encoder.seq_encode([([1], 2), ([1.5], 2)])
    with pytest.raises(ArgumentTypeError, match="pair 0 must be a"):
        encoder.seq_encode([[1, 2, 3]])
    with pytest.raises(ArgumentError, match="at least one"):
        encoder.seq_encode([])
    with pytest.raises(ArgumentError, match="same number of rows"):
        encoder.encode_arrays(np.zeros((2, 2), dtype=np.int64), np.zeros(3, dtype=np.int64))
    with pytest.raises(TokenIdError, match=r"row 0, position 1"):
        encoder.encode_arrays(np.array([[0, -1]]), np.array([0]))
    unchecked = StreamingTokenEncoder()
    assert len(unchecked.encode_arrays(np.array([[10**6] * 50]), np.array([10**6]))) == 1


def test_device_parsing() -> None:
    assert as_device("cpu") == torch.device("cpu")
    assert as_device(torch.device("cpu")) == torch.device("cpu")
    with pytest.raises(ArgumentError, match="`device` must name"):
        as_device(3.5)
