"""Scoring, prediction and seeded sampling of the leaf."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mixle.errors import ArgumentError, TokenIdError
from mixle.models import StreamingTransformerSampler

from .conftest import BLOCK, VOCAB, dense_batch, random_pairs, tiny_leaf


def test_log_density_is_the_model_next_token_log_probability() -> None:
    leaf = tiny_leaf(seed=2)
    ctx, tok = random_pairs(3, seed=1)
    with torch.no_grad():
        expected = torch.log_softmax(leaf.module(torch.from_numpy(ctx))[:, -1].double(), -1)
    for i in range(3):
        got = leaf.log_density((ctx[i], int(tok[i])))
        assert got == pytest.approx(float(expected[i, tok[i]]), abs=1e-5)
    total = sum(np.exp(leaf.log_density((ctx[0], t))) for t in range(VOCAB))
    assert total == pytest.approx(1.0, abs=1e-6)


def test_seq_log_density_scores_every_row_across_chunks() -> None:
    leaf = tiny_leaf()
    ctx, tok = random_pairs(300, seed=3)  # more than one 256-row chunk
    scores = leaf.seq_log_density(leaf.dist_to_encoder().encode_arrays(ctx, tok))
    assert scores.shape == (300,) and scores.dtype == np.float64
    assert np.all(scores < 0)
    for i in (0, 255, 256, 299):
        assert scores[i] == pytest.approx(leaf.log_density((ctx[i], int(tok[i]))), abs=1e-5)
    pairs = [(ctx[i], int(tok[i])) for i in range(5)]
    np.testing.assert_allclose(leaf.seq_log_density(pairs), scores[:5], atol=1e-5)


def test_shorter_contexts_are_scored_from_their_last_position() -> None:
    leaf = tiny_leaf()
    ctx, tok = random_pairs(4, width=3)
    with torch.no_grad():
        expected = torch.log_softmax(leaf.module(torch.from_numpy(ctx))[:, -1].double(), -1)
    got = leaf.seq_log_density(leaf.dist_to_encoder().encode_arrays(ctx, tok))
    np.testing.assert_allclose(got, expected[np.arange(4), tok].numpy(), atol=1e-5)


def test_predict_returns_argmax_ids() -> None:
    leaf = tiny_leaf(seed=4)
    ctx, _ = random_pairs(5, seed=5)
    with torch.no_grad():
        expected = leaf.module(torch.from_numpy(ctx))[:, -1].argmax(-1).numpy()
    got = leaf.predict(ctx)
    assert isinstance(got, np.ndarray) and got.dtype == np.int64
    np.testing.assert_array_equal(got, expected)
    single = leaf.predict(ctx[1])
    assert isinstance(single, int) and single == expected[1]


def test_scoring_validates_ids_and_shapes() -> None:
    leaf = tiny_leaf()
    with pytest.raises(TokenIdError, match=r"row 0, position 2"):
        leaf.predict(np.array([1, 2, VOCAB]))
    with pytest.raises(ArgumentError, match=f"1..{BLOCK} positions"):
        leaf.predict(np.zeros((1, BLOCK + 2), dtype=np.int64))
    with pytest.raises(TokenIdError, match="token of pair 0"):
        leaf.log_density(([1, 2], 1.5))
    with pytest.raises(ArgumentError, match="same length"):
        leaf.seq_log_density([([1, 2], 1), ([1], 2)])


def test_batch_loss_is_the_masked_mean_of_either_shape() -> None:
    leaf = tiny_leaf()
    ctx, targets, mask = dense_batch(2, seed=1)
    mask[1, 6:] = False
    with torch.no_grad():
        logp = torch.log_softmax(leaf.module(torch.from_numpy(ctx)).double(), -1)
    nll = -logp.gather(-1, torch.from_numpy(targets)[..., None])[..., 0].numpy()
    assert leaf.batch_loss((ctx, targets, mask)) == pytest.approx(nll[mask].mean(), rel=1e-6)
    pairs = random_pairs(3)
    scores = leaf.seq_log_density(leaf.dist_to_encoder().encode_arrays(*pairs))
    assert leaf.batch_loss(pairs) == pytest.approx(-scores.mean(), rel=1e-6)
    with pytest.raises(ArgumentError, match="no unmasked target"):
        leaf.batch_loss((ctx, targets, np.zeros_like(mask)))


def test_sampler_is_reproducible_for_a_seed() -> None:
    leaf = tiny_leaf()
    a, b, c = leaf.sampler(seed=5), leaf.sampler(seed=5), leaf.sampler(seed=6)
    assert isinstance(a, StreamingTransformerSampler)
    draws_a = a.sample(50, context=[1, 2, 3])
    np.testing.assert_array_equal(draws_a, b.sample(50, context=[1, 2, 3]))
    assert not np.array_equal(draws_a, c.sample(50, context=[1, 2, 3]))
    np.testing.assert_array_equal(a.generate([4, 5], 12), b.generate([4, 5], 12))


def test_sampler_draws_follow_the_model_distribution() -> None:
    leaf = tiny_leaf(seed=1)
    with torch.no_grad():
        leaf.module.ln_f.bias.copy_(torch.linspace(-2, 2, 16))  # make the distribution peaked
    context = [3, 1, 4, 1, 5]
    probs = np.exp([leaf.log_density((context, t)) for t in range(VOCAB)])
    draws = leaf.sampler(seed=0).sample(20_000, context=context)
    freq = np.bincount(draws, minlength=VOCAB) / draws.size
    np.testing.assert_allclose(freq, probs, atol=0.015)


def test_generate_extends_the_prompt_within_the_vocabulary() -> None:
    out = tiny_leaf().sampler(seed=1).generate([7] * (BLOCK + 3), 10, temperature=0.7)
    assert out.shape == (BLOCK + 13,) and out.dtype == np.int64
    assert np.all(out[: BLOCK + 3] == 7) and np.all((out >= 0) & (out < VOCAB))
    one = tiny_leaf().sampler(seed=1).sample(context=[1])
    assert isinstance(one, int) and 0 <= one < VOCAB


def test_sampler_arguments_are_validated() -> None:
    sampler = tiny_leaf().sampler(seed=0)
    with pytest.raises(ArgumentError, match="`context` is required"):
        sampler.sample(3)
    with pytest.raises(ArgumentError, match="`temperature`"):
        sampler.sample(context=[1], temperature=0.0)
    with pytest.raises(ArgumentError, match="`size`"):
        sampler.sample(0, context=[1])
    with pytest.raises(TokenIdError):
        sampler.generate([VOCAB], 2)


def test_generate_validates_the_whole_prompt() -> None:
    sampler = tiny_leaf().sampler(seed=0)
    with pytest.raises(TokenIdError, match="row 0"):
        sampler.generate([VOCAB] + [1] * (BLOCK + 2), 1)
    with pytest.raises(ArgumentError, match="at least one"):
        sampler.generate([], 1)
