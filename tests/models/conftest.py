"""Shared fixtures for the transformer leaf tests: tiny seeded models and batches."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest
import torch

from mixle.models import StreamingTransformer

VOCAB = 23
BLOCK = 8


@pytest.fixture(autouse=True)
def _few_threads() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def tiny_leaf(seed: int = 0, **kwargs: object) -> StreamingTransformer:
    """A 2-layer, 16-wide model: fast enough to run hundreds of times in a test."""
    config: dict[str, object] = {"d_model": 16, "n_layer": 2, "n_head": 2, "block": BLOCK}
    config.update(kwargs)
    return StreamingTransformer.from_config(VOCAB, seed=seed, **config)  # type: ignore[arg-type]


def random_pairs(n: int, seed: int = 0, width: int = BLOCK) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, VOCAB, (n, width)), rng.integers(0, VOCAB, n)


def dense_batch(
    b: int, seed: int = 0, width: int = BLOCK
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, VOCAB, (b, width + 1))
    return rows[:, :-1], rows[:, 1:], np.ones((b, width), dtype=bool)


def params_snapshot(leaf: StreamingTransformer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in leaf.module.named_parameters()}


def assert_params_equal(
    a: dict[str, torch.Tensor],
    b: dict[str, torch.Tensor],
    check: Callable[[torch.Tensor, torch.Tensor], bool] = torch.equal,
) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert check(a[name], b[name]), name
