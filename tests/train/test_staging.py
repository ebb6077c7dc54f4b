"""Issue #17 item 3 on CUDA: batches parsed in the prefetch thread and pinned for the copy.

No GPU here: the pinning decision is tested directly (off on CPU), and the pinned path
runs with ordinary memory standing in for page-locked memory, through the producer
thread, the trainer and the accumulator's ``non_blocking`` copy, bitwise against the
synchronous run.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch

import mixle.train._staging as staging
from mixle.data import Batch
from mixle.models._inputs import TokenBatch, parse_batch
from mixle.train import train
from mixle.train._prefetch import PrefetchedBatches
from tests.train._helpers import (
    assert_bitwise_equal,
    final_tensors,
    packed_source,
    step_records,
    tiny_config,
)

RNG = np.random.default_rng(0)
DENSE = (
    RNG.integers(0, 50, (3, 8)),
    RNG.integers(0, 50, (3, 8)),
    RNG.integers(0, 2, (3, 8)).astype(bool),
)
PAIRS = (RNG.integers(0, 50, (4, 6)), RNG.integers(0, 50, (4,)))


def _quiet(line: str) -> None:
    del line


def _same(a: TokenBatch, b: TokenBatch) -> bool:
    return all(
        x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
        for x, y in zip(
            (a.contexts, a.targets, a.weights), (b.contexts, b.targets, b.weights), strict=True
        )
    )


def test_batches_are_pinned_only_for_an_available_cuda_device() -> None:
    assert staging.pin_for(torch.device("cpu")) is False
    assert staging.pin_for(torch.device("cuda:0")) is torch.cuda.is_available()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA runtime can pin memory")
def test_pinned_memory_is_unavailable_without_cuda_which_is_why_the_flag_is_off() -> None:
    with pytest.raises(RuntimeError, match="pin"):
        staging.pinned_empty((2, 3), torch.int64)


@pytest.mark.parametrize("batch", [DENSE, PAIRS], ids=["dense", "pairs"])
def test_unpinned_staging_is_parse_batch(batch: tuple[np.ndarray, ...]) -> None:
    staged = staging.stage_batch(batch, vocab=50, block=8, pin=False)
    assert _same(staged, parse_batch(batch, 50, 8))


@pytest.mark.parametrize("batch", [DENSE, PAIRS], ids=["dense", "pairs"])
def test_pinned_staging_copies_every_array_into_host_buffers_bitwise(
    batch: tuple[np.ndarray, ...],
) -> None:
    buffers: list[torch.Tensor] = []

    def allocate(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        buffers.append(torch.full(shape, 7, dtype=dtype))  # garbage until copied over
        return buffers[-1]

    staged = staging.stage_batch(batch, vocab=50, block=8, pin=True, allocate=allocate)
    parsed = parse_batch(batch, 50, 8)
    assert _same(staged, parsed)
    arrays = (staged.contexts, staged.targets, staged.weights)
    assert len(buffers) == 3
    for array, buffer, original in zip(
        arrays, buffers, (parsed.contexts, parsed.targets, parsed.weights), strict=True
    ):
        assert np.shares_memory(array, buffer.numpy())  # the batch keeps its buffer alive
        assert not np.shares_memory(array, original)
    # The accumulator's copy: non_blocking from the staged (host) arrays, here to cpu.
    copied = torch.from_numpy(staged.contexts).to("cpu", non_blocking=True)
    assert torch.equal(copied, torch.from_numpy(parsed.contexts))


def test_prefetch_thread_stages_each_batch_and_reports_the_one_taken(text_corpus: Path) -> None:
    stage_threads: set[str] = set()

    def stage(batch: Batch) -> TokenBatch:
        stage_threads.add(threading.current_thread().name)
        return staging.stage_batch(batch, vocab=256, block=32, pin=False)

    reference = packed_source(text_corpus)
    wrapper = PrefetchedBatches(packed_source(text_corpus), 2, prepare=stage)
    try:
        for (batch, batch_id), (expected, expected_id) in zip(wrapper, reference, strict=False):
            assert batch_id == expected_id
            assert _same(wrapper.prepared, parse_batch(expected, 256, 32))
            pairs = zip(batch.as_tuple(), expected.as_tuple(), strict=True)
            assert all(a.tobytes() == b.tobytes() for a, b in pairs)
            if batch_id[1] >= 5:
                break
    finally:
        wrapper.close()
    assert stage_threads == {"mixle-prefetch"}


def test_trainer_with_pinned_staging_matches_the_synchronous_run_bitwise(
    text_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = {}
    sync = tmp_path / "sync"
    train(tiny_config(text_corpus, steps=10, prefetch=0, checkpoint_dir=str(sync)), log=_quiet)
    allocated: list[tuple[int, ...]] = []

    def ordinary(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        allocated.append(shape)
        return torch.empty(shape, dtype=dtype)

    monkeypatch.setattr("mixle.train._trainer.pin_for", lambda device: True)
    monkeypatch.setattr(staging, "pinned_empty", ordinary)
    for name, depth in (("pinned-1", 1), ("pinned-3", 3)):
        runs[name] = tmp_path / name
        train(
            tiny_config(text_corpus, steps=10, prefetch=depth, checkpoint_dir=str(runs[name])),
            log=_quiet,
        )
    assert len(allocated) >= 3 * 10  # three arrays per staged batch, every step
    for run in runs.values():
        assert step_records(run / "metrics.jsonl") == step_records(sync / "metrics.jsonl")
        assert_bitwise_equal(final_tensors(sync), final_tensors(run))
