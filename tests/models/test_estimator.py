"""estimate(): one AdamW step with the weighted mean gradient, persistent optimizer state."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from mixle.errors import (
    ArgumentError,
    ArgumentTypeError,
    CheckpointError,
    RevisionMismatchError,
)
from mixle.models import (
    CategoricalEmbedding,
    StreamingTransformer,
    StreamingTransformerEstimator,
    StreamingTransformerLeaf,
    StreamingTransformerLeafEstimator,
    TransformerLMEstimator,
    stream_fit,
)
from mixle.stats import from_dict, partitioned_estimate, to_dict

from .conftest import (
    VOCAB,
    assert_params_equal,
    dense_batch,
    params_snapshot,
    random_pairs,
    tiny_leaf,
)


def _one_step(leaf: StreamingTransformer, seed: int, weights: np.ndarray | None = None) -> None:
    ctx, tok = random_pairs(6, seed=seed)
    w = np.ones(6) if weights is None else weights
    est = leaf.estimator()
    acc = est.accumulator_factory().make()
    acc.seq_update(leaf.dist_to_encoder().encode_arrays(ctx, tok), w, None)
    est.estimate(None, acc.value())


def test_estimate_is_one_adamw_step_with_the_weighted_mean_gradient() -> None:
    leaf = tiny_leaf()
    reference = copy.deepcopy(leaf.module)
    weights = np.array([1.0, 0.5, 2.0, 0.0, 1.0, 3.0])
    ctx, tok = random_pairs(6, seed=1)
    est = leaf.estimator()
    acc = est.accumulator_factory().make()
    acc.seq_update(leaf.dist_to_encoder().encode_arrays(ctx, tok), weights, None)
    state = acc.value()
    est.estimate(None, state)

    # The step is exactly torch's AdamW fed gradient_sums / effective_weight ...
    optimizer = torch.optim.AdamW(reference.parameters(), lr=leaf.lr)
    for name, p in reference.named_parameters():
        p.grad = state.gradient_sums[name] / state.effective_weight
    optimizer.step()
    for (name, p), q in zip(leaf.module.named_parameters(), reference.parameters(), strict=True):
        assert torch.equal(p, q), name
    # ... and that gradient is the gradient of the weighted mean loss at the base weights.
    w = torch.tensor(weights, dtype=torch.float32)
    base = copy.deepcopy(tiny_leaf().module)
    logits = base(torch.from_numpy(ctx))[:, -1]
    nll = torch.nn.functional.cross_entropy(logits, torch.from_numpy(tok), reduction="none")
    ((nll * w).sum() / w.sum()).backward()
    for name, p in base.named_parameters():
        assert p.grad is not None
        torch.testing.assert_close(
            state.gradient_sums[name] / state.effective_weight, p.grad, rtol=1e-5, atol=1e-7
        )
    step = est._slot.state_dict()["state"][0]["step"]  # type: ignore[index]
    assert float(step) == 1.0


def test_optimizer_state_persists_across_estimates() -> None:
    persistent, fresh = tiny_leaf(), tiny_leaf()
    _one_step(persistent, seed=1)
    _one_step(fresh, seed=1)
    assert_params_equal(params_snapshot(persistent), params_snapshot(fresh))
    _one_step(persistent, seed=2)
    # A second leaf that forgets its AdamW moments takes a different second step.
    forgetful = StreamingTransformer(fresh.module, lr=fresh.lr)
    _one_step(forgetful, seed=2)
    assert not all(
        torch.equal(p, q)
        for p, q in zip(persistent.module.parameters(), forgetful.module.parameters(), strict=True)
    )


def test_to_dict_round_trip_mid_training_continues_bitwise() -> None:
    batches = [dense_batch(4, seed=s) for s in range(6)]
    leaf = stream_fit(tiny_leaf(), batches[:3])
    restored = from_dict(json.loads(json.dumps(to_dict(leaf))))
    assert isinstance(restored, StreamingTransformer)
    assert restored.revision == leaf.revision
    assert restored.module is not leaf.module
    stream_fit(leaf, batches[3:])
    stream_fit(restored, batches[3:])
    assert_params_equal(params_snapshot(leaf), params_snapshot(restored))


def test_estimate_from_state_equals_estimate_from_accumulator() -> None:
    a, b = tiny_leaf(), tiny_leaf()
    ctx, tok = random_pairs(5, seed=3)
    for leaf, use_state in ((a, True), (b, False)):
        est = leaf.estimator()
        acc = est.accumulator_factory().make()
        acc.seq_update(leaf.dist_to_encoder().encode_arrays(ctx, tok), np.ones(5), None)
        est.estimate(None, acc.value() if use_state else acc)
    assert_params_equal(params_snapshot(a), params_snapshot(b))


def test_stale_state_raises_naming_both_digests() -> None:
    leaf = tiny_leaf()
    est = leaf.estimator()
    ctx, tok = random_pairs(3)
    acc = est.accumulator_factory().make()
    acc.seq_update(leaf.dist_to_encoder().encode_arrays(ctx, tok), np.ones(3), None)
    state = acc.value()
    est.estimate(None, state)
    with pytest.raises(RevisionMismatchError) as info:
        est.estimate(None, state)
    assert state.base_sha256 in str(info.value) and leaf.revision in str(info.value)
    with pytest.raises(RevisionMismatchError):
        est.estimate(None, acc)


def test_zero_weight_state_cannot_be_estimated() -> None:
    est = tiny_leaf().estimator()
    acc = est.accumulator_factory().make()
    with pytest.raises(ArgumentError, match="zero total weight"):
        est.estimate(None, acc.value())
    with pytest.raises(ArgumentError, match="zero total weight"):
        est.estimate(None, acc)
    with pytest.raises(ArgumentTypeError):
        est.estimate(None, {"grads": 1})


def test_partitioned_driver_gives_the_same_step_for_any_partition_count() -> None:
    ctx, tok = random_pairs(12, seed=4)
    pairs = [(c, int(t)) for c, t in zip(ctx, tok, strict=True)]
    results = []
    for parts in (1, 3, 12):
        leaf = tiny_leaf()
        leaf.module.double()  # see test_split_and_combine_equals_one_accumulator
        out = partitioned_estimate(leaf.estimator(), pairs, num_partitions=parts)
        assert isinstance(out, StreamingTransformer) and out.module is leaf.module
        results.append(params_snapshot(leaf))
    for other in results[1:]:
        assert_params_equal(results[0], other, lambda a, b: torch.allclose(a, b, rtol=0, atol=1e-9))


def test_transformer_lm_estimator_builds_the_same_model_as_from_config() -> None:
    emb = CategoricalEmbedding(VOCAB, 16, seed=11)
    config = {"d_model": 16, "n_layer": 2, "n_head": 2, "block": 8, "seed": 3}
    est = TransformerLMEstimator(VOCAB, embedding=emb, **config)  # type: ignore[arg-type]
    leaf = StreamingTransformer.from_config(VOCAB, embedding=emb, **config)  # type: ignore[arg-type]
    assert isinstance(est, StreamingTransformerEstimator)
    assert est.module.embedding is emb and leaf.module.embedding is emb
    assert_params_equal({n: p for n, p in est.module.named_parameters()}, params_snapshot(leaf))
    assert StreamingTransformerLeaf is StreamingTransformer
    assert StreamingTransformerLeafEstimator is StreamingTransformerEstimator


def test_a_step_through_a_shared_embedding_invalidates_the_other_leafs_accumulators() -> None:
    emb = CategoricalEmbedding(VOCAB, 16, seed=1)
    a = tiny_leaf(embedding=emb, seed=1)
    b = tiny_leaf(embedding=emb, seed=2)
    pending = b.estimator().accumulator_factory().make()
    before = b.revision
    _one_step(a, seed=0)
    assert b.revision != before
    ctx, tok = random_pairs(2)
    with pytest.raises(RevisionMismatchError):
        pending.seq_update(b.dist_to_encoder().encode_arrays(ctx, tok), np.ones(2), None)


def test_pseudo_count_is_refused() -> None:
    with pytest.raises(ArgumentError, match="pseudo_count"):
        tiny_leaf().estimator(pseudo_count=1.0)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"lr": 0.0}, ArgumentError, "`lr` must be a finite positive"),
        ({"lr": float("nan")}, ArgumentError, "`lr`"),
        ({"lr": True}, ArgumentTypeError, "`lr`"),
        ({"device": "nonsense"}, ArgumentError, "`device` must name"),
    ],
)
def test_bad_lr_or_device_raises(kwargs: dict[str, object], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        tiny_leaf(**kwargs)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_device_without_cuda_raises_clearly() -> None:
    with pytest.raises(ArgumentError, match="CUDA is not available"):
        tiny_leaf(device="cuda")


def test_optimizer_state_that_does_not_fit_is_refused() -> None:
    leaf = stream_fit(tiny_leaf(), [dense_batch(2)])
    d = leaf.to_dict()
    other = tiny_leaf(n_layer=1)
    with pytest.raises(CheckpointError, match="optimizer state"):
        StreamingTransformer(other.module, optimizer_state=d["optimizer_state"])
    d["version"] = 7
    with pytest.raises(CheckpointError, match="version"):
        from_dict(d)


def test_unregistered_module_cannot_be_serialised() -> None:
    class Bare(torch.nn.Module):
        vocab = 3
        block = 2

    with pytest.raises(ArgumentTypeError, match="no to_dict"):
        StreamingTransformer(Bare()).to_dict()
