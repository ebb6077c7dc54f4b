"""Shared fixtures for the transformer leaf tests: tiny seeded models and batches."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

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


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    """``tools/bench_mixture.py`` as a module (the domain-discovery experiment)."""
    path = Path(__file__).resolve().parents[2] / "tools" / "bench_mixture.py"
    spec = importlib.util.spec_from_file_location("bench_mixture", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_mixture"] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules["bench_mixture"]
