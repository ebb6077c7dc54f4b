"""``TokenStreamDataset``: the DataLoader yields the same batches for any worker count."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from mixle.data.stream_token_source import TokenStream
from mixle.data.torch import TokenStreamDataset
from mixle.errors import StateMismatchError

# CI machines may have fewer cores than the 3 workers tested; torch warns about that.
# torchdata 0.11's StatefulDataLoader calls torch.set_vital, which torch 2.13 deprecates.
pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
    pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning"),
]

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


@pytest.mark.parametrize(("workers", "context"), [(0, None), (3, "fork"), (2, "spawn")])
def test_stateful_dataloader_resumes_mid_stream(workers: int, context: str | None) -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader

    expected = list(_stream(shuffle=False))
    taken = 7  # inside epoch 0; the rest crosses into epoch 1

    def loader() -> StatefulDataLoader:
        return StatefulDataLoader(
            TokenStreamDataset(_stream(shuffle=False)),
            batch_size=None,
            num_workers=workers,
            multiprocessing_context=context,
        )

    first = loader()
    iterator = iter(first)
    head = [next(iterator) for _ in range(taken)]
    state = first.state_dict()
    assert "fingerprint" in repr(state)  # the dataset's own cursor: a seek, not a replay
    del iterator
    _assert_same(head, expected[:taken])
    resumed = loader()
    resumed.load_state_dict(state)  # supported order: load_state_dict, THEN iter()
    _assert_same([(c.clone(), t.clone()) for c, t in resumed], expected[taken:])


def test_dataset_state_from_another_stream_is_refused() -> None:
    saved = TokenStreamDataset(_stream()).state_dict()
    other = TokenStreamDataset(TokenStream(DOCS, 6, 5, epochs=2, seed=4, boundary_id=-1))
    with pytest.raises(StateMismatchError, match="seed in checkpoint: 3 / in stream: 4"):
        other.load_state_dict(saved)


def test_a_stream_at_its_end_yields_nothing() -> None:
    stream = _stream()
    stream.advance(stream.num_batches() * stream.epochs)
    assert _loader_batches(stream, 2, "fork") == []
