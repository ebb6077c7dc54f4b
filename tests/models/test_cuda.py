"""The CUDA path: the same contracts on a GPU. Skipped on machines without CUDA."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from mixle.models import StreamingTransformer, stream_fit
from mixle.stats import from_dict, to_dict

from .conftest import dense_batch, random_pairs, tiny_leaf

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_module_lives_on_the_requested_device_with_the_cpu_initialisation() -> None:
    gpu, cpu = tiny_leaf(device="cuda"), tiny_leaf()
    assert all(p.device.type == "cuda" for p in gpu.module.parameters())
    assert gpu.revision == cpu.revision  # seeded init runs on CPU, then moves


def test_seq_update_is_pure_and_split_combine_matches_on_cuda() -> None:
    leaf = tiny_leaf(device="cuda")
    before = {n: p.detach().clone() for n, p in leaf.module.named_parameters()}
    ctx, tok = random_pairs(8, seed=1)
    enc = leaf.dist_to_encoder().encode_arrays(ctx, tok)
    factory = leaf.estimator().accumulator_factory()
    whole, left, right = factory.make(), factory.make(), factory.make()
    whole.seq_update(enc, np.ones(8), None)
    left.seq_update(enc[:3], np.ones(3), None)
    right.seq_update(enc[3:], np.ones(5), None)
    for n, p in leaf.module.named_parameters():
        assert torch.equal(p, before[n]) and p.grad is None
    combined = left.combine(right).value()
    for name, g in whole.value().gradient_sums.items():
        assert combined.gradient_sums[name].device.type == "cuda"
        torch.testing.assert_close(combined.gradient_sums[name], g, rtol=1e-4, atol=1e-5)
    cpu_state = tiny_leaf().estimator().accumulator_factory().make()
    cpu_state.seq_update(enc, np.ones(8), None)
    assert cpu_state.value().base_sha256 == whole.value().base_sha256
    for name, g in cpu_state.value().gradient_sums.items():
        torch.testing.assert_close(whole.value().gradient_sums[name].cpu(), g, rtol=1e-3, atol=1e-5)


def test_cuda_training_tracks_cpu_training_and_round_trips_to_cpu() -> None:
    batches = [dense_batch(4, seed=s) for s in range(4)] + [random_pairs(4, seed=9)]
    # float64 on both sides: AdamW's early steps amplify float32 noise in gradients that
    # are zero in exact arithmetic (attention key biases) to ~lr, differently per device.
    gpu_leaf, cpu_leaf = tiny_leaf(device="cuda"), tiny_leaf()
    gpu_leaf.module.double()
    cpu_leaf.module.double()
    gpu = stream_fit(gpu_leaf, batches)
    cpu = stream_fit(cpu_leaf, batches)
    for (name, p), q in zip(gpu.module.named_parameters(), cpu.module.parameters(), strict=True):
        torch.testing.assert_close(p.cpu(), q, rtol=0, atol=1e-8, msg=name)
    moved = from_dict(json.loads(json.dumps(to_dict(gpu))), device="cpu")
    assert isinstance(moved, StreamingTransformer) and moved.device.type == "cpu"
    assert moved.revision == gpu.revision
    stream_fit(moved, batches[:1])  # the CUDA optimizer state continues on CPU
    back = from_dict(to_dict(moved), device="cuda")
    assert next(back.module.parameters()).device.type == "cuda"
    stream_fit(back, batches[:1])


def test_scoring_and_sampling_on_cuda() -> None:
    gpu, cpu = tiny_leaf(device="cuda"), tiny_leaf()
    ctx, tok = random_pairs(5, seed=2)
    enc = cpu.dist_to_encoder().encode_arrays(ctx, tok)
    np.testing.assert_allclose(gpu.seq_log_density(enc), cpu.seq_log_density(enc), atol=1e-4)
    np.testing.assert_array_equal(gpu.predict(ctx), cpu.predict(ctx))
    assert gpu.batch_loss(dense_batch(2)) == pytest.approx(cpu.batch_loss(dense_batch(2)), rel=1e-4)
    a = gpu.sampler(seed=3).generate([1, 2], 5)
    np.testing.assert_array_equal(a, gpu.sampler(seed=3).generate([1, 2], 5))
