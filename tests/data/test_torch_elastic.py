"""Issue #13 item 4: the torch adapters over global-layout streams; loader state n -> m."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from mixle.data import StreamingCorpus, TokenStream
from mixle.data.torch import StreamingDataset, TokenStreamDataset
from mixle.errors import StateMismatchError
from tests.data.resume_helpers import assert_items_equal

pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
    pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning"),
]

DOCUMENTS = [np.arange(1000 * i, 1000 * i + (i * 37) % 53 + 1, dtype=np.int64) for i in range(60)]


def _corpus(rank: int = 1, world_size: int = 2) -> StreamingCorpus:
    return StreamingCorpus(
        DOCUMENTS, rank=rank, world_size=world_size, block=16, batch_size=3, layout="global"
    )


def _stream() -> TokenStream:
    return TokenStream(DOCUMENTS, 8, 5, epochs=2, rank=1, world_size=3, seed=2)


def _as_numpy(items: list[Any]) -> list[tuple[np.ndarray, ...]]:
    return [tuple(part.numpy() for part in item) for item in items]


def _expected_corpus() -> list[tuple[np.ndarray, ...]]:
    corpus, batches = _corpus(), []
    for batch in corpus:
        batches.append(batch)
        if corpus.cursor[0] >= 2:
            break
    return batches


@pytest.mark.parametrize("num_workers", [0, 2, 3])
def test_global_layout_dataset_yields_the_same_sequence_for_any_worker_count(
    num_workers: int,
) -> None:
    loader = DataLoader(
        StreamingDataset(_corpus(), num_epochs=2),
        batch_size=None,
        num_workers=num_workers,
        multiprocessing_context="fork" if num_workers else None,
    )
    assert_items_equal(_as_numpy(list(loader)), _expected_corpus())


@pytest.mark.parametrize("num_workers", [0, 2])
def test_global_token_stream_dataset_yields_the_same_sequence_for_any_worker_count(
    num_workers: int,
) -> None:
    loader = DataLoader(
        TokenStreamDataset(_stream()),
        batch_size=None,
        num_workers=num_workers,
        multiprocessing_context="fork" if num_workers else None,
    )
    assert_items_equal(_as_numpy(list(loader)), list(_stream()))


def _loader(dataset: Any, num_workers: int) -> StatefulDataLoader:
    return StatefulDataLoader(
        dataset,
        batch_size=None,
        num_workers=num_workers,
        multiprocessing_context="fork" if num_workers else None,
    )


@pytest.mark.parametrize(("before", "after"), [(2, 3), (3, 0), (0, 2), (2, 1)])
def test_loader_state_from_n_workers_loads_into_m_workers(before: int, after: int) -> None:
    expected = _expected_corpus()
    taken = 7
    first = _loader(StreamingDataset(_corpus(), num_epochs=2), before)
    iterator = iter(first)
    head = [next(iterator) for _ in range(taken)]
    state = first.state_dict()
    del iterator
    assert_items_equal(_as_numpy(head), expected[:taken])
    dataset = StreamingDataset(_corpus(), num_epochs=2)
    resumed = _loader(dataset, after)
    resumed.load_state_dict(dataset.loader_state_for(state, num_workers=after))
    assert_items_equal(_as_numpy(list(resumed)), expected[taken:])


def test_token_stream_loader_state_moves_between_worker_counts() -> None:
    expected = list(_stream())
    first = _loader(TokenStreamDataset(_stream()), 2)
    iterator = iter(first)
    head = [next(iterator) for _ in range(5)]
    state = first.state_dict()
    del iterator
    assert_items_equal(_as_numpy(head), expected[:5])
    dataset = TokenStreamDataset(_stream())
    resumed = _loader(dataset, 0)
    resumed.load_state_dict(dataset.loader_state_for(state, num_workers=0))
    assert_items_equal(_as_numpy(list(resumed)), expected[5:])


def test_loader_state_of_another_stream_is_refused() -> None:
    first = _loader(StreamingDataset(_corpus(), num_epochs=2), 0)
    next(iter(first))
    state = first.state_dict()
    other = StreamingDataset(
        StreamingCorpus(DOCUMENTS, rank=1, world_size=2, block=8, batch_size=3, layout="global"),
        num_epochs=2,
    )
    with pytest.raises(StateMismatchError, match="block in checkpoint: 16 / in stream: 8"):
        other.loader_state_for(state, num_workers=2)
    with pytest.raises(StateMismatchError, match="not a StatefulDataLoader state_dict"):
        other.loader_state_for({"x": 1}, num_workers=2)
