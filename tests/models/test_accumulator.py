"""Gradient accumulation at a pinned revision: purity, pinning, combine, foldability."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.errors import ArgumentError, ArgumentTypeError, RevisionMismatchError, TokenIdError
from mixle.models import StreamingGradientState, StreamingTransformerAccumulator
from mixle.stats import from_dict, to_dict

from .conftest import BLOCK, VOCAB, params_snapshot, random_pairs, tiny_leaf


def _independent_sha256(module: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, p in module.named_parameters():
        flat = p.detach().reshape(-1).contiguous()
        digest.update(f"{name}|{flat.dtype}|{tuple(p.shape)}|".encode())
        digest.update(flat.numpy().tobytes())
    return digest.hexdigest()


def test_seq_update_leaves_parameters_and_grads_bitwise_unchanged() -> None:
    leaf = tiny_leaf()
    before = params_snapshot(leaf)
    acc = leaf.estimator().accumulator_factory().make()
    ctx, tok = random_pairs(16)
    acc.seq_update(leaf.dist_to_encoder().encode_arrays(ctx, tok), np.ones(16), None)
    for name, p in leaf.module.named_parameters():
        assert torch.equal(p, before[name]), name
        assert p.grad is None, name
    state = acc.value()
    assert any(float(g.abs().sum()) > 0 for g in state.gradient_sums.values())


def test_state_pins_the_sha256_of_the_parameters() -> None:
    leaf = tiny_leaf(seed=3)
    acc = leaf.estimator().accumulator_factory().make()
    ctx, tok = random_pairs(4)
    acc.seq_update(leaf.dist_to_encoder().encode_arrays(ctx, tok), np.ones(4), None)
    state = acc.value()
    assert state.base_sha256 == _independent_sha256(leaf.module) == leaf.revision
    assert state.parameter_names == tuple(n for n, _ in leaf.module.named_parameters())
    assert tiny_leaf(seed=4).revision != state.base_sha256


def test_gradient_sums_are_weighted_numerators_of_the_mean_loss() -> None:
    leaf = tiny_leaf()
    ctx, tok = random_pairs(6, seed=1)
    weights = np.array([0.5, 2.0, 0.0, 1.0, 3.0, 1.5])
    acc = leaf.estimator().accumulator_factory().make()
    acc.seq_update(leaf.dist_to_encoder().encode_arrays(ctx, tok), weights, None)
    state = acc.value()
    logits = leaf.module(torch.from_numpy(ctx))[:, -1]
    nll = torch.nn.functional.cross_entropy(logits, torch.from_numpy(tok), reduction="none")
    w = torch.tensor(weights, dtype=torch.float32)
    (nll * w).sum().backward()
    for name, p in leaf.module.named_parameters():
        assert p.grad is not None
        torch.testing.assert_close(state.gradient_sums[name], p.grad, rtol=1e-5, atol=1e-7)
    assert state.effective_weight == pytest.approx(weights.sum())
    assert state.mean_loss == pytest.approx(
        float((nll * w).sum().detach()) / weights.sum(), rel=1e-5
    )
    assert (state.rows, state.batches) == (6, 1)


def test_update_and_initialize_equal_seq_update_of_one_pair() -> None:
    leaf = tiny_leaf()
    ctx, tok = random_pairs(1, seed=2)
    factory = leaf.estimator().accumulator_factory()
    a, b, c = factory.make(), factory.make(), factory.make()
    a.update((ctx[0], int(tok[0])), 2.0, None)
    b.seq_update(leaf.dist_to_encoder().encode_arrays(ctx, tok), np.array([2.0]), None)
    c.initialize((ctx[0], int(tok[0])), 2.0, np.random.default_rng(0))
    for name in a.value().gradient_sums:
        assert torch.equal(a.value().gradient_sums[name], b.value().gradient_sums[name])
        assert torch.equal(c.value().gradient_sums[name], b.value().gradient_sums[name])


@settings(max_examples=15)
@given(n=st.integers(2, 12), cut=st.integers(1, 11), seed=st.integers(0, 1000))
def test_split_and_combine_equals_one_accumulator(n: int, cut: int, seed: int) -> None:
    cut = min(cut, n - 1)
    ctx, tok = random_pairs(n, seed=seed)
    weights = np.random.default_rng(seed).uniform(0.0, 2.0, n)
    # float64: AdamW's first step is ~lr*sign(g), so float32 rounding noise on gradients
    # that are zero in exact arithmetic (attention key biases) could flip a sign.
    whole_leaf, split_leaf = tiny_leaf(), tiny_leaf()
    whole_leaf.module.double()
    split_leaf.module.double()
    enc = whole_leaf.dist_to_encoder().encode_arrays(ctx, tok)

    whole_est = whole_leaf.estimator()
    whole = whole_est.accumulator_factory().make()
    whole.seq_update(enc, weights, None)

    split_est = split_leaf.estimator()
    factory = split_est.accumulator_factory()
    left, right = factory.make(), factory.make()
    left.seq_update(enc[:cut], weights[:cut], None)
    right.seq_update(enc[cut:], weights[cut:], None)
    combined = left.combine(right).value()

    expected = whole.value()
    assert combined.base_sha256 == expected.base_sha256
    assert combined.effective_weight == pytest.approx(expected.effective_weight)
    assert combined.loss_sum == pytest.approx(expected.loss_sum, rel=1e-9)
    assert (combined.rows, combined.batches) == (n, 2)
    for name, g in expected.gradient_sums.items():
        torch.testing.assert_close(combined.gradient_sums[name], g, rtol=1e-9, atol=1e-12)

    whole_est.estimate(None, expected)
    split_est.estimate(None, combined)
    for (name, p), q in zip(
        whole_leaf.module.named_parameters(), split_leaf.module.parameters(), strict=True
    ):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-9, msg=name)


def test_combine_across_revisions_raises_naming_both_digests() -> None:
    leaf = tiny_leaf()
    est = leaf.estimator()
    ctx, tok = random_pairs(4)
    enc = leaf.dist_to_encoder().encode_arrays(ctx, tok)
    old = est.accumulator_factory().make()
    old.seq_update(enc, np.ones(4), None)
    old_digest = old.base_sha256
    est.estimate(None, old.value())
    new = est.accumulator_factory().make()
    new.seq_update(enc, np.ones(4), None)
    with pytest.raises(RevisionMismatchError) as info:
        new.combine(old.value())
    assert old_digest in str(info.value) and new.base_sha256 in str(info.value)


def test_combine_across_different_models_raises() -> None:
    a = tiny_leaf(seed=1).estimator().accumulator_factory().make()
    b = tiny_leaf(seed=2).estimator().accumulator_factory().make()
    with pytest.raises(RevisionMismatchError, match=b.base_sha256):
        a.combine(b)
    with pytest.raises(ArgumentTypeError):
        a.combine(3)


def test_combine_with_renamed_parameters_raises() -> None:
    acc = tiny_leaf().estimator().accumulator_factory().make()
    state = acc.value()
    renamed = StreamingGradientState(
        state.base_sha256,
        tuple(reversed(state.parameter_names)),
        state.gradient_sums,
        0.0,
        0.0,
        0,
        0,
    )
    with pytest.raises(RevisionMismatchError, match="different parameters"):
        acc.combine(renamed)


def test_seq_update_after_the_module_moved_raises() -> None:
    leaf = tiny_leaf()
    acc = leaf.estimator().accumulator_factory().make()
    with torch.no_grad():
        next(leaf.module.parameters()).add_(1.0)
    ctx, tok = random_pairs(2)
    with pytest.raises(RevisionMismatchError, match="changed after this accumulator"):
        acc.seq_update(leaf.dist_to_encoder().encode_arrays(ctx, tok), np.ones(2), None)


def test_from_value_restores_a_state_and_refuses_another_revision() -> None:
    leaf = tiny_leaf()
    factory = leaf.estimator().accumulator_factory()
    ctx, tok = random_pairs(5)
    a = factory.make()
    a.seq_update(leaf.dist_to_encoder().encode_arrays(ctx, tok), np.ones(5), None)
    state = from_dict(json.loads(json.dumps(to_dict(a.value()))))
    b = factory.make().from_value(state)
    for name, g in a.value().gradient_sums.items():
        assert torch.equal(b.value().gradient_sums[name], g)
    assert b.value().mean_loss == a.value().mean_loss
    other = tiny_leaf(seed=5).estimator().accumulator_factory().make()
    with pytest.raises(RevisionMismatchError):
        other.from_value(state)


def test_empty_state_has_zero_gradients_and_nan_mean_loss() -> None:
    state = tiny_leaf().estimator().accumulator_factory().make().value()
    assert state.effective_weight == 0 and np.isnan(state.mean_loss)
    assert all(float(g.abs().sum()) == 0 for g in state.gradient_sums.values())


def test_seq_update_validates_weights_ids_and_encoding() -> None:
    leaf = tiny_leaf()
    acc: StreamingTransformerAccumulator = leaf.estimator().accumulator_factory().make()
    ctx, tok = random_pairs(3)
    enc = leaf.dist_to_encoder().encode_arrays(ctx, tok)
    with pytest.raises(ArgumentError, match=r"one weight per observation \(3\). Got 2"):
        acc.seq_update(enc, np.ones(2), None)
    with pytest.raises(ArgumentError, match="nonnegative"):
        acc.seq_update(enc, np.array([1.0, -1.0, 1.0]), None)
    with pytest.raises(ArgumentTypeError, match="seq_encode"):
        acc.seq_update((ctx, tok), np.ones(3), None)
    bad = tok.copy()
    bad[2] = VOCAB
    with pytest.raises(
        TokenIdError, match=rf"token id {VOCAB} at row 2; ids must be in \[0, {VOCAB}\)"
    ):
        acc.acc_to_encoder().encode_arrays(ctx, bad)
    with pytest.raises(ArgumentError, match=f"1..{BLOCK} positions"):
        acc.acc_to_encoder().encode_arrays(np.zeros((3, BLOCK + 1), dtype=np.int64), tok)


def test_accumulator_rejects_modules_without_vocab_and_block() -> None:
    with pytest.raises(ArgumentTypeError, match="`vocab`"):
        StreamingTransformerAccumulator(torch.nn.Linear(2, 2))
    with pytest.raises(ArgumentTypeError, match=r"torch\.nn\.Module"):
        StreamingTransformerAccumulator("model")  # type: ignore[arg-type]
