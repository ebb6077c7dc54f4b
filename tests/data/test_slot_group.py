"""Issue #31 item 5: ``StreamLoader`` workers read each group of batches straight into
their shared slot (:mod:`mixle.data._slot_group`): every token written once, the
batches bitwise the in-process ones, each tensor a storage of its batch's array only,
and a batch the user keeps is never overwritten."""

from __future__ import annotations

import gc
import pickle
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.data import _slot_ring as slot_ring
from mixle.data._slot_group import (
    ReadsRunsInto,
    SlotGroup,
    column_batches,
    direct_group_bytes,
    read_direct_group,
)
from mixle.data._slot_ring import SLOTS, supports_shared_slots
from mixle.data.stream_token_source import TokenStream
from mixle.data.streaming_corpus import StreamingCorpus
from mixle.data.torch import PackedBatch, StreamingDataset, StreamLoader, TokenStreamDataset
from mixle.errors import ArgumentError
from tests.data.resume_helpers import assert_items_equal
from tests.data.test_stream_loader import DOCUMENTS, _corpus, _numpy, _received

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

shared_slots = pytest.mark.skipif(not supports_shared_slots(), reason="needs memfd (Linux)")


@settings(max_examples=30, deadline=None)
@given(
    layout=st.sampled_from(["per-rank", "global"]),
    document_ids=st.booleans(),
    block=st.integers(1, 9),
    batch_size=st.integers(1, 4),
    start=st.integers(0, 20),
    count=st.integers(1, 6),
)
def test_a_direct_group_holds_the_in_process_batches_bitwise(
    layout: str, document_ids: bool, block: int, batch_size: int, start: int, count: int
) -> None:
    corpus = _corpus(layout=layout, document_ids=document_ids, block=block, batch_size=batch_size)
    step = corpus.cursor_step
    total = corpus.epoch_size(0) // step
    start, count = min(start, total - 1), min(count, total - min(start, total - 1))
    sample = corpus.read(0, 0).as_tuple()
    positions = tuple((0, (start + k) * step) for k in range(count + 1))
    group = read_direct_group(
        corpus, [(0, start * step, count)], sample, positions, 1 << 20, shared=False
    )
    expected = [list(corpus.read(0, (start + k) * step).as_tuple()) for k in range(count)]
    assert isinstance(group, SlotGroup) and not group.shared
    # An epoch's last batch may be short: a segment of its own.
    assert len(group.segments) == 1 + (expected[-1][0].shape != sample[0].shape)
    received = _received(group)
    assert received.positions == positions
    assert_items_equal(_numpy(received.batches), expected)


def test_a_group_across_an_epoch_end_is_read_as_two_runs() -> None:
    corpus = _corpus(block=4, batch_size=1, boundary_id=None, document_ids=False)
    last = corpus.epoch_size(0) - 1
    sample = corpus.read(0, 0).as_tuple()
    positions = ((0, last - 1), (0, last), (1, 0), (1, 1), (1, 2))
    group = read_direct_group(
        corpus, [(0, last - 1, 2), (1, 0, 2)], sample, positions, 1 << 20, shared=False
    )
    assert group is not None
    expected = [list(corpus.read(*p).as_tuple()) for p in positions[:-1]]
    assert_items_equal(_numpy(_received(group).batches), expected)


def test_only_streams_with_rows_of_the_stream_read_runs_into_buffers() -> None:
    assert isinstance(_corpus(), ReadsRunsInto)
    stream = TokenStream([np.arange(500)], block=8, batch_size=2)
    assert not isinstance(stream, ReadsRunsInto)
    best_fit = _corpus(layout="global", packing="best_fit")
    asked: list[Any] = []
    assert best_fit.read_run_into(0, 0, 2, lambda *a: asked.append(a)) is None
    assert not asked  # declined before asking for buffers: rows of their own
    declined = _corpus().read_run_into(0, 0, 2, lambda counts, block: None)
    assert declined is None
    with pytest.raises(ArgumentError, match="must be smaller than"):
        _corpus().read_run_into(0, _corpus().epoch_size(0) - 1, 2, lambda *a: None)


def test_worker_groups_of_a_corpus_are_direct_and_of_a_token_stream_copied() -> None:
    corpus = _corpus()
    view = StreamingDataset(corpus, num_epochs=1, shared_memory=False)._grouped((0, 0), 2)
    items = list(view._groups(0, 1))
    assert corpus.num_rows(0) % corpus.batch_size  # the epoch's last batch is short
    assert all(isinstance(item, SlotGroup) for item in items)
    stream = TokenStream([np.arange(500)], block=8, batch_size=2, epochs=1)
    tokens = TokenStreamDataset(stream, shared_memory=False)._grouped((0, 0), 2)
    assert all(isinstance(item, PackedBatch) for item in tokens._groups(0, 1))
    for other in (
        _corpus(layout="global", packing="best_fit"),  # rows of their own
        _corpus(layout="global", world_size=2),  # a rank's batches are not consecutive rows
    ):
        dataset = StreamingDataset(other, num_epochs=1, shared_memory=False)
        assert dataset._direct_reader((0, 0)) is None  # so groups are sized as copied
        assert all(
            isinstance(item, PackedBatch) for item in dataset._grouped((0, 0), 2)._groups(0, 1)
        )
    copying = StreamingDataset(corpus, num_epochs=1, shared_memory=False)
    copying._direct_groups = False
    assert all(isinstance(item, PackedBatch) for item in copying._grouped((0, 0), 2)._groups(0, 1))


def test_direct_bytes_are_one_token_buffer_and_a_mask_per_batch() -> None:
    tokens = np.zeros(8 * 2048 + 1, dtype=np.int64)
    mask = np.ones((8, 2048), dtype=np.bool_)
    sample = (tokens[:-1].reshape(8, 2048), tokens[1:].reshape(8, 2048), mask)
    assert direct_group_bytes(sample, 1) == 131_136 + 8 * 2048  # 64-byte aligned tokens
    assert direct_group_bytes(sample, 1) < sum(a.nbytes for a in sample) * 0.55
    windows = TokenStream([np.arange(500)], block=8, batch_size=2).read(0, 0).as_tuple()
    assert direct_group_bytes(windows, 4) is None  # not packed rows


def test_a_column_past_its_buffer_is_refused() -> None:
    with pytest.raises(RuntimeError, match="does not fit"):
        column_batches(bytearray(64), (("<i8", (2, 4), 0, 64),), 2)
    with pytest.raises(RuntimeError, match="does not fit"):
        column_batches(bytearray(256), (("<i8", (2, 4), 4, 64),), 2)  # misaligned


@shared_slots
def test_a_shared_direct_group_frees_its_slot_with_its_last_tensor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(slot_ring, "_worker_ring", None)  # a ring of this test's own
    corpus = _corpus()
    sample = corpus.read(0, 0).as_tuple()
    full = direct_group_bytes(sample, 4)
    assert full is not None
    positions = tuple((0, k) for k in range(5))
    group = read_direct_group(corpus, [(0, 0, 4)], sample, positions, full, shared=True)
    assert group is not None and group.shared
    payload = ForkingPickler.dumps(group)
    assert len(payload) < 1024  # the slot's place and the columns, not the bytes
    ring = slot_ring._worker_ring
    assert ring is not None and ring.states.any()
    batches = pickle.loads(payload).batches
    kept = batches[3]
    del batches, group
    gc.collect()
    assert ring.states.any()  # one batch of the group is alive: its slot stays full
    expected = corpus.read(0, 3).as_tuple()
    assert_items_equal(_numpy([kept]), [list(expected)])
    # Each tensor's storage is its batch's array, not the slot.
    assert [t.untyped_storage().nbytes() for t in kept] == [a.nbytes for a in expected]
    del kept
    assert not ring.states.any()
    held = [
        read_direct_group(corpus, [(0, 0, 4)], sample, positions, full, True) for _ in range(SLOTS)
    ]
    assert all(g is not None and g.shared for g in held)
    spare = read_direct_group(corpus, [(0, 0, 4)], sample, positions, full, True)
    assert spare is not None and not spare.shared  # no free slot: the bytes go in the pipe
    assert_items_equal(
        _numpy(_received(spare).batches), [list(corpus.read(0, k).as_tuple()) for k in range(4)]
    )
    del held


@pytest.mark.parametrize("num_workers", [1, 2])
def test_kept_batches_outlive_their_slots_unchanged_and_batch_sized(num_workers: int) -> None:
    """A loop that keeps every batch (more groups than a ring has slots): each kept
    batch still holds its own bytes at the end, and only a batch-sized storage each."""
    corpus = _corpus(boundary_id=None, document_ids=False, block=8, batch_size=2)
    expected = [list(b) for e in range(2) for b in corpus.epoch_batches(e)]
    loader = StreamLoader(
        StreamingDataset(corpus, num_epochs=2), num_workers=num_workers, batches_per_item=2
    )
    kept = list(loader)
    assert len(kept) == len(expected) > 2 * SLOTS * 2
    gc.collect()
    assert_items_equal(_numpy(kept), expected)
    for batch, reference in zip(kept, expected, strict=True):
        assert [t.untyped_storage().nbytes() for t in batch] == [a.nbytes for a in reference]
        assert all(isinstance(t, torch.Tensor) and t.is_contiguous() for t in batch)


@pytest.mark.parametrize("document_ids", [False, True])
@pytest.mark.parametrize("layout", ["per-rank", "global"])
def test_a_sharded_corpus_is_gathered_straight_into_the_slot_bitwise(
    tmp_path: Path, layout: str, document_ids: bool
) -> None:
    """Sharded documents take the split-output gather (each batch's buffer written by
    the group's one gather); the in-memory documents above take the joint read."""
    from mixle.corpus import CorpusWriter, open_corpus

    with CorpusWriter(tmp_path / "c", vocab_size=70_000) as writer:
        writer.add_many([d.astype(np.uint32) for d in DOCUMENTS])
    documents = open_corpus(tmp_path / "c")
    assert documents.gathers_split_output
    corpus = StreamingCorpus(
        documents,
        rank=0,
        world_size=1,
        block=8,
        batch_size=2,
        boundary_id=7,
        document_ids=document_ids,
        layout=layout,
    )
    step, total = corpus.cursor_step, corpus.epoch_size(0) // corpus.cursor_step
    sample = corpus.read(0, 0).as_tuple()
    positions = (*((0, k * step) for k in range(total)), None)
    group = read_direct_group(corpus, [(0, 0, total)], sample, positions, 1 << 22, shared=False)
    assert group is not None
    expected = [list(corpus.read(0, k * step).as_tuple()) for k in range(total)]
    assert_items_equal(_numpy(_received(group).batches), expected)
