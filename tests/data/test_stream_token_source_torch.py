"""``TokenStreamDataset``: the DataLoader yields the same batches for any worker count."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from mixle.data.stream_token_source import TokenStream
from mixle.data.torch import TokenStreamDataset

# CI machines may have fewer cores than the 3 workers tested; torch warns about that.
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

DOCS = [np.arange(i * 100, i * 100 + 5 + (i * 7) % 23, dtype=np.int64) for i in range(40)]


def _stream(**kwargs: Any) -> TokenStream:
    return TokenStream(DOCS, 6, 5, epochs=2, seed=3, boundary_id=-1, **kwargs)


def _loader_batches(stream: TokenStream, workers: int, context: str | None = None) -> list[Any]:
    loader = DataLoader(
        TokenStreamDataset(stream),
        batch_size=None,
        num_workers=workers,
        multiprocessing_context=context if workers else None,
    )
    return [(c.clone(), t.clone()) for c, t in loader]


def _assert_same(got: list[Any], expected: list[tuple[np.ndarray, np.ndarray]]) -> None:
    assert len(got) == len(expected)
    for (c, t), (ec, et) in zip(got, expected, strict=True):
        assert c.dtype == t.dtype == torch.int64
        assert np.array_equal(c.numpy(), ec) and np.array_equal(t.numpy(), et)


@pytest.mark.parametrize("workers", [0, 1, 2, 3])
def test_batch_sequence_is_the_same_for_every_worker_count(workers: int) -> None:
    expected = list(_stream())
    assert len(expected) % 3 != 0  # workers finish unevenly: order must still hold
    _assert_same(_loader_batches(_stream(), workers, "fork"), expected)


def test_workers_start_at_the_stream_cursor() -> None:
    expected = list(_stream())
    stream = _stream()
    stream.advance(7)  # mid-epoch 0; continues into epoch 1
    _assert_same(_loader_batches(stream, 3, "fork"), expected[7:])


def test_spawned_workers_give_the_same_batches() -> None:
    _assert_same(_loader_batches(_stream(shuffle=False), 2, "spawn"), list(_stream(shuffle=False)))
