"""Issue #31 item 5: ``StreamLoader`` — DataLoader workers hand over groups of batches
(one shared-memory slot per group, lent to the main process without a copy); the loader
yields one batch per step, the same batches as a plain DataLoader for any worker count,
and resumes at any batch, mid-group included."""

from __future__ import annotations

import gc
import json
import pickle
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from mixle.data import _slot_ring as slot_ring
from mixle.data._batch_group import BatchGroup, auto_group_size, stacked
from mixle.data._slot_ring import SLOTS, mapped_ring, supports_shared_slots, worker_ring
from mixle.data.stream_token_source import TokenStream
from mixle.data.streaming_corpus import StreamingCorpus
from mixle.data.torch import PackedBatch, StreamingDataset, StreamLoader, TokenStreamDataset
from mixle.errors import ArgumentError, ArgumentTypeError, StateMismatchError
from tests.data.memmap_documents import write_memmap_corpus
from tests.data.resume_helpers import assert_items_equal

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

DOCUMENTS = [np.arange(1000 * i, 1000 * i + (i * 37) % 53 + 1, dtype=np.int64) for i in range(60)]


def _corpus(documents: Any = DOCUMENTS, **kwargs: Any) -> StreamingCorpus:
    defaults: dict[str, Any] = {
        "rank": 0,
        "world_size": 1,
        "block": 16,
        "batch_size": 3,
        "boundary_id": -5,
        "document_ids": True,
    }
    return StreamingCorpus(documents, **{**defaults, **kwargs})


def _expected(epochs: int = 2, **kwargs: Any) -> list[list[np.ndarray]]:
    corpus = _corpus(**kwargs)
    return [list(batch) for epoch in range(epochs) for batch in corpus.epoch_batches(epoch)]


def _numpy(batches: Any) -> list[list[np.ndarray]]:
    return [[part.numpy().copy() for part in batch] for batch in batches]


@pytest.mark.parametrize("num_workers", [0, 1, 2, 3])
@pytest.mark.parametrize("batches_per_item", [None, 1, 4])
def test_loader_yields_the_plain_dataloader_batches_for_any_worker_count(
    num_workers: int, batches_per_item: int | None
) -> None:
    plain = list(DataLoader(StreamingDataset(_corpus(), num_epochs=2), batch_size=None))
    loader = StreamLoader(
        StreamingDataset(_corpus(), num_epochs=2),
        num_workers=num_workers,
        batches_per_item=batches_per_item,
    )
    got = list(loader)
    assert len(got) == len(plain) == len(_expected()) > 8
    for batch, reference in zip(got, plain, strict=True):
        assert type(batch) is type(reference) is list
        assert [t.dtype for t in batch] == [t.dtype for t in reference]
        assert all(t.is_contiguous() for t in batch)
    assert_items_equal(_numpy(got), _numpy(plain))
    assert loader.state_dict()["done"] == 0  # stopped at num_epochs: epoch 2, batch 0
    assert loader.state_dict()["epoch"] == 2


@pytest.mark.parametrize("packing", ["concatenate", "best_fit"])
def test_global_layout_batches_and_mid_group_resume(packing: str) -> None:
    def dataset() -> StreamingDataset:
        corpus = _corpus(layout="global", packing=packing, document_ids=False)
        return StreamingDataset(corpus, num_epochs=2)

    plain = _numpy(DataLoader(dataset(), batch_size=None))
    loader = StreamLoader(dataset(), num_workers=2, batches_per_item=3)
    iterator = iter(loader)
    head = [next(iterator) for _ in range(4)]
    state = loader.state_dict()
    del iterator
    resumed = StreamLoader(dataset(), num_workers=1, batches_per_item=2)
    resumed.load_state_dict(state)
    assert_items_equal(_numpy(head) + _numpy(resumed), plain)


def test_spawned_workers_over_memmap_documents(tmp_path: Path) -> None:
    documents = write_memmap_corpus(tmp_path / "c", [d.astype(np.uint16) for d in DOCUMENTS])
    loader = StreamLoader(
        StreamingDataset(_corpus(documents, boundary_id=65000), num_epochs=1),
        num_workers=2,
        batches_per_item=3,
        multiprocessing_context="spawn",
    )
    expected = _expected(1, documents=[d.astype(np.uint16) for d in DOCUMENTS], boundary_id=65000)
    assert_items_equal(_numpy(loader), expected)


def _resume_after_batches(num_workers: int, every: bool) -> None:
    """States (JSON round trip) after each batch, mid-group included, restored into a
    fresh loader with another worker count, continue with exactly the rest."""
    expected = _expected(2)

    def loader(workers: int) -> StreamLoader:
        dataset = StreamingDataset(_corpus(), num_epochs=2)
        return StreamLoader(dataset, num_workers=workers, batches_per_item=3)

    first = loader(num_workers)
    states = [json.loads(json.dumps(first.state_dict()))]
    for _ in first:
        states.append(json.loads(json.dumps(first.state_dict())))
    assert len(states) == len(expected) + 1
    # groups of 3: a group's start, its middle and its end, the first and the last state
    chosen = range(len(states)) if every else (0, 1, 2, 3, 4, 8, len(states) - 2, len(states) - 1)
    for taken in chosen:
        resumed = loader((num_workers + 1 + taken) % 3)  # another worker count each time
        resumed.load_state_dict(states[taken])
        assert_items_equal(_numpy(resumed), expected[taken:])


@pytest.mark.parametrize("num_workers", [0, 1, 2])
def test_a_state_after_a_batch_resumes_at_the_next_one_with_any_worker_count(
    num_workers: int,
) -> None:
    _resume_after_batches(num_workers, every=False)


@pytest.mark.slow
@pytest.mark.parametrize("num_workers", [0, 1, 2])
def test_a_state_after_every_batch_resumes_at_the_next_one(num_workers: int) -> None:
    _resume_after_batches(num_workers, every=True)


def test_a_state_taken_mid_iteration_names_the_next_batch_and_breaking_off_is_clean() -> None:
    expected = _expected(2)
    loader = StreamLoader(
        StreamingDataset(_corpus(), num_epochs=2), num_workers=2, batches_per_item=4
    )
    iterator = iter(loader)
    head = [next(iterator) for _ in range(6)]  # inside the second group
    state = loader.state_dict()
    del iterator  # workers shut down mid-stream
    assert (state["epoch"], state["batch"], state["done"]) == (0, 6, 0)
    resumed = StreamLoader(StreamingDataset(_corpus(), num_epochs=2), num_workers=1)
    resumed.load_state_dict(state)
    assert_items_equal(_numpy(head) + _numpy(resumed), expected)
    assert_items_equal(_numpy(loader), expected)  # a fresh iter() starts at the start again


def test_loader_and_in_process_dataset_states_are_interchangeable() -> None:
    expected = _expected(2)
    dataset = StreamingDataset(_corpus(), num_epochs=2)
    iterator = iter(dataset)
    for _ in range(5):
        next(iterator)
    loader = StreamLoader(StreamingDataset(_corpus(), num_epochs=2), num_workers=2)
    loader.load_state_dict(dataset.state_dict())
    stream = iter(loader)
    for _ in range(3):
        next(stream)
    back = StreamingDataset(_corpus(), num_epochs=2)
    back.load_state_dict(loader.state_dict())
    assert_items_equal(_numpy(back), expected[8:])


def test_load_state_dict_applies_to_an_iterator_not_yet_advanced() -> None:
    expected = _expected(2)
    loader = StreamLoader(StreamingDataset(_corpus(), num_epochs=2), num_workers=2)
    saved = {**loader.state_dict(), "batch": 7}
    iterator = iter(loader)
    loader.load_state_dict(saved)
    assert loader.state_dict()["batch"] == 7
    assert_items_equal(_numpy(iterator), expected[7:])


def test_loader_starts_at_the_dataset_cursor_and_restart_at() -> None:
    expected = _expected(2)
    corpus = _corpus()
    corpus.load_state_dict({**corpus.state_dict(), "epoch": 0, "batch": 4})
    dataset = StreamingDataset(corpus, num_epochs=2)
    loader = StreamLoader(dataset, num_workers=2, batches_per_item=2)
    assert loader.state_dict()["batch"] == 4
    assert_items_equal(_numpy(loader), expected[4:])
    dataset.restart_at((1, 2))
    first_epoch = len(list(_corpus().epoch_batches(0)))
    assert_items_equal(_numpy(loader), expected[first_epoch + 2 :])


def test_loader_refuses_foreign_states_and_bad_arguments() -> None:
    loader = StreamLoader(StreamingDataset(_corpus(), num_epochs=1), num_workers=1)
    other = StreamLoader(StreamingDataset(_corpus(seed=5), num_epochs=1), num_workers=1)
    with pytest.raises(StateMismatchError, match="seed in checkpoint: 0 / in stream: 5"):
        other.load_state_dict(loader.state_dict())
    with pytest.raises(StateMismatchError, match="only"):
        loader.load_state_dict({**loader.state_dict(), "batch": 10_000})
    assert loader.state_dict()["batch"] == 0  # nothing changed
    with pytest.raises(ArgumentTypeError, match="`dataset` must be a StreamDataset"):
        StreamLoader(_corpus())  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="batches_per_item"):
        StreamLoader(StreamingDataset(_corpus()), num_workers=1, batches_per_item=0)


def test_a_finished_loader_saves_done_and_resumes_empty() -> None:
    corpus = _corpus()
    dataset = StreamingDataset(corpus)  # no num_epochs: runs until an empty epoch
    loader = StreamLoader(dataset, num_workers=2, batches_per_item=3)
    iterator = iter(loader)
    for _ in range(4):
        next(iterator)
    del iterator
    empty = StreamLoader(StreamingDataset(_corpus(), num_epochs=1), num_workers=2)
    empty.load_state_dict({**empty.state_dict(), "done": 1})
    assert list(empty) == [] and empty.state_dict()["done"] == 1


@pytest.mark.parametrize("num_workers", [0, 2])
def test_token_stream_batches_and_resume_through_the_loader(num_workers: int) -> None:
    documents = [np.arange(i * 100, i * 100 + 5 + (i * 7) % 23, dtype=np.int64) for i in range(40)]

    def stream() -> TokenStream:
        return TokenStream(documents, 6, 5, epochs=2, seed=3, boundary_id=-1)

    expected = [list(batch) for batch in stream()]
    loader = StreamLoader(TokenStreamDataset(stream()), num_workers=num_workers, batches_per_item=3)
    iterator = iter(loader)
    head = [next(iterator) for _ in range(4)]
    state = loader.state_dict()
    rest = list(iterator)
    assert_items_equal(_numpy(head + rest), expected)
    resumed = StreamLoader(TokenStreamDataset(stream()), num_workers=2 - num_workers)
    resumed.load_state_dict(state)
    assert_items_equal(_numpy(resumed), expected[4:])


# -- the worker side, in process: groups, their positions, the lent slot ----------------


def _received(item: PackedBatch) -> BatchGroup:
    group = pickle.loads(ForkingPickler.dumps(item))
    assert isinstance(group, BatchGroup)
    return group


@settings(max_examples=40, deadline=None)
@given(
    workers=st.integers(1, 4),
    size=st.integers(1, 5),
    start=st.integers(0, 12),
    epochs=st.integers(1, 3),
)
def test_worker_groups_interleave_into_the_sequence_with_exact_positions(
    workers: int, size: int, start: int, epochs: int
) -> None:
    """Groups of every simulated worker, taken round robin, are the batch sequence from
    the start, and each carries the position of every batch and of the next one."""
    corpus = _corpus()
    dataset = StreamingDataset(corpus, num_epochs=epochs, shared_memory=False)
    origin = corpus.next_cursor(0, 0, start)
    assert origin is not None
    view = dataset._grouped(origin, size)
    per_worker = [[_received(item) for item in view._groups(w, workers)] for w in range(workers)]
    groups = [
        per_worker[g % workers][g // workers]
        for g in range(sum(len(items) for items in per_worker))
    ]
    expected = _expected(epochs)[start:]
    assert_items_equal([batch for g in groups for batch in _numpy(g.batches)], expected)
    assert all(len(g.batches) == size for g in groups[:-1])
    at: Any = origin
    for group in groups:
        assert group.positions[0] == at
        for index in range(len(group.batches)):
            following = corpus.next_cursor(*group.positions[index], 1)
            assert group.positions[index + 1] == following
        at = group.positions[-1]
    assert at is None or at[0] >= epochs


def test_groups_of_unequal_batches_travel_batch_by_batch() -> None:
    batches = [
        (np.arange(6, dtype=np.int64).reshape(2, 3), np.ones(3, dtype=np.bool_)),
        (np.arange(3, dtype=np.int64).reshape(1, 3), np.zeros(3, dtype=np.bool_)),
    ]
    positions = ((0, 0), (0, 1), None)
    parts, info = stacked(batches, positions)
    assert info[0] == (2, 2)  # not stacked: one entry per array of each batch
    group = _received(PackedBatch(parts, group=info))
    assert group.positions == positions
    assert_items_equal(_numpy(group.batches), [list(b) for b in batches])
    parts, info = stacked(batches[:1] * 3, positions)
    assert info[0] == () and len(parts) == 2  # one stack per array
    assert_items_equal(
        _numpy(_received(PackedBatch(parts, group=info)).batches), [list(batches[0])] * 3
    )


@pytest.mark.skipif(not supports_shared_slots(), reason="needs memfd_create (Linux)")
def test_a_lent_group_frees_its_slot_when_its_last_tensor_goes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(slot_ring, "_worker_ring", None)  # a ring of this test's own
    batches = [(np.full((2, 4), i, dtype=np.int64), np.arange(4, dtype=np.int32)) for i in range(3)]
    parts, info = stacked(batches, ((0, 0), (0, 1), (0, 2), (0, 3)))
    packed = PackedBatch(parts, shared=True, group=info)
    assert packed.shared
    payload = ForkingPickler.dumps(packed)
    assert len(payload) < 1024  # the slot's place, not the bytes
    ring = worker_ring(len(packed.buffer))
    assert ring is not None
    group = pickle.loads(payload)
    assert ring.states.any()  # lent, not copied: the slot is still full
    kept = group.batches[2][0]
    del group, packed
    gc.collect()
    assert ring.states.any()  # one tensor of the group is alive
    assert int(kept[0, 0]) == 2
    kept[0, 0] = -1  # writable
    del kept
    assert not ring.states.any()
    held = [PackedBatch(parts, shared=True, group=info) for _ in range(SLOTS)]
    assert all(p.shared for p in held) and not PackedBatch(parts, shared=True, group=info).shared
    del held


def test_auto_group_size_is_bounded_by_bytes_and_count() -> None:
    assert auto_group_size(278_528) == 60  # batch 8 x 2048
    assert auto_group_size(32 * 2048 * 17) == 15
    assert auto_group_size(9 << 20) == 1 and auto_group_size(0) == 128
    assert auto_group_size(147_520) == 113  # read straight into the slot, 8 x 2048


def test_an_unknown_ring_is_refused_for_a_group_too() -> None:
    with pytest.raises(RuntimeError, match=r"worker 4343: .* ring 00ee"):
        mapped_ring("00ee", 4343, None)


def test_pin_memory_keeps_positions() -> None:
    group = BatchGroup([[torch.zeros(2)]], ((0, 0), (0, 1)))
    if not torch.cuda.is_available():
        pytest.skip("pinned memory needs an accelerator")
    pinned = group.pin_memory()
    assert pinned.positions == group.positions and pinned.batches[0][0].is_pinned()
