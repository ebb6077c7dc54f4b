"""Issue #17 item 5: DataLoader workers hand each batch over as one ``PackedBatch``;
issue #31 item 5: through a ring of shared-memory slots per worker."""

from __future__ import annotations

import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from torch.utils.data import DataLoader

from mixle.data._slot_ring import SLOTS, SlotRing, mapped_ring, supports_shared_slots, worker_ring
from mixle.data.streaming_corpus import StreamingCorpus
from mixle.data.torch import PackedBatch, StreamingDataset
from mixle.errors import ArgumentTypeError

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

DOCUMENTS = [np.arange(100 * i, 100 * i + (i * 7) % 23 + 1, dtype=np.int64) for i in range(50)]

_DTYPES = st.sampled_from([np.int64, np.int32, np.uint16, np.bool_, np.float32, np.uint8])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        _DTYPES.flatmap(lambda dtype: hnp.arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=3))),
        min_size=1,
        max_size=5,
    )
)
def test_packed_batch_round_trips_bitwise_through_the_worker_pickler(
    parts: list[np.ndarray],
) -> None:
    payload = ForkingPickler.dumps(PackedBatch(tuple(parts)))
    tensors = pickle.loads(payload)
    assert isinstance(tensors, list) and len(tensors) == len(parts)
    for tensor, part in zip(tensors, parts, strict=True):
        assert tensor.is_contiguous() and tuple(tensor.shape) == part.shape
        assert tensor.numpy().dtype == part.dtype
        assert tensor.numpy().tobytes() == np.ascontiguousarray(part).tobytes()


def test_a_packed_batch_pickles_as_one_payload_without_tensors() -> None:
    corpus = StreamingCorpus(DOCUMENTS, rank=0, world_size=1, block=8, batch_size=4)
    batch = corpus.batch_at(0, 1)
    packed = PackedBatch(batch)  # context/targets are strided views of the rows
    payload = ForkingPickler.dumps(packed)
    assert b"torch" not in payload  # no per-tensor storage / file-descriptor reduction
    assert len(payload) < len(packed.buffer) + 1024
    unpacked = pickle.loads(payload)
    assert [t.numpy().tobytes() for t in unpacked] == [t.numpy().tobytes() for t in packed.unpack()]
    for tensor, part in zip(unpacked, batch, strict=True):
        np.testing.assert_array_equal(tensor.numpy(), part)
    unpacked[0][0, 0] = -1  # the received buffer is the caller's: writable, no warning
    assert int(unpacked[0][0, 0]) == -1


@pytest.mark.parametrize("layout", ["per-rank", "global"])
@pytest.mark.parametrize("document_ids", [False, True])
def test_worker_batches_equal_in_process_batches_bitwise(layout: str, document_ids: bool) -> None:
    def corpus() -> StreamingCorpus:
        return StreamingCorpus(
            DOCUMENTS,
            rank=0,
            world_size=1,
            block=8,
            batch_size=3,
            layout=layout,
            document_ids=document_ids,
        )

    in_process = list(DataLoader(StreamingDataset(corpus(), num_epochs=2), batch_size=None))
    workers = list(
        DataLoader(StreamingDataset(corpus(), num_epochs=2), batch_size=None, num_workers=2)
    )
    assert len(workers) == len(in_process) > 0
    for got, expected in zip(workers, in_process, strict=True):
        assert type(got) is type(expected) is list
        assert [t.dtype for t in got] == [t.dtype for t in expected]
        assert all(t.is_contiguous() for t in got)
        assert [t.numpy().tobytes() for t in got] == [t.numpy().tobytes() for t in expected]


def _kind(item: object) -> str:
    return type(item).__name__


def test_workers_yield_packed_batches_and_the_main_process_yields_tensors() -> None:
    corpus = StreamingCorpus(DOCUMENTS, rank=0, world_size=1, block=8, batch_size=3)
    dataset = StreamingDataset(corpus, num_epochs=1)
    in_workers = set(DataLoader(dataset, batch_size=None, num_workers=2, collate_fn=_kind))
    assert in_workers == {"PackedBatch"}
    assert set(DataLoader(dataset, batch_size=None, collate_fn=_kind)) == {"tuple"}


# -- the shared-memory slots (issue #31 item 5) -------------------------------------------


def _parts(seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return (
        rng.integers(0, 50_000, (4, 16), dtype=np.int64),
        rng.integers(0, 2, (4, 16)).astype(np.bool_),
        rng.integers(0, 9, (3,), dtype=np.int32),
    )


def _ring_of(packed: PackedBatch) -> SlotRing:
    ring = worker_ring(len(packed.buffer))
    assert ring is not None
    return ring


@pytest.mark.skipif(not supports_shared_slots(), reason="needs memfd_create (Linux)")
def test_a_shared_batch_pickles_as_its_slot_and_arrives_bitwise() -> None:
    parts = _parts(0)
    packed = PackedBatch(parts, shared=True)
    assert packed.shared
    payload = ForkingPickler.dumps(packed)
    assert len(payload) < 1024 and packed.buffer.tobytes() not in payload
    ring = _ring_of(packed)
    received = pickle.loads(payload)
    assert [t.numpy().tobytes() for t in received] == [p.tobytes() for p in parts]
    assert not ring.states.any()  # the receiver copied the batch out and freed the slot
    received[0][0, 0] = -1  # a private copy: writable, the slot is not touched
    again = PackedBatch(_parts(1), shared=True)
    assert again.shared and pickle.loads(ForkingPickler.dumps(again))[0][0, 0] != -1


@pytest.mark.skipif(not supports_shared_slots(), reason="needs memfd_create (Linux)")
def test_a_full_ring_falls_back_to_the_bytes_payload_and_recovers() -> None:
    held = [PackedBatch(_parts(i), shared=True) for i in range(SLOTS)]
    assert all(p.shared for p in held)
    overflow = PackedBatch(_parts(99), shared=True)
    assert not overflow.shared  # no slot free: the batch travels through the pipe
    tensors = pickle.loads(ForkingPickler.dumps(overflow))
    assert [t.numpy().tobytes() for t in tensors] == [p.tobytes() for p in _parts(99)]
    payloads = [ForkingPickler.dumps(p) for p in held]
    pickle.loads(payloads[0])  # the consumer takes one batch: one slot is free again
    assert PackedBatch(_parts(5), shared=True).shared
    for payload in payloads[1:]:
        pickle.loads(payload)
    assert not _ring_of(held[0]).states.any()


@pytest.mark.skipif(not supports_shared_slots(), reason="needs memfd_create (Linux)")
def test_a_shared_batch_consumed_in_the_worker_frees_its_slot() -> None:
    packed = PackedBatch(_parts(2), shared=True)
    ring = _ring_of(packed)
    tensors = packed.unpack()  # a collate_fn in the worker: it owns a copy now
    assert not packed.shared and not ring.states.any()
    assert [t.numpy().tobytes() for t in tensors] == [p.tobytes() for p in _parts(2)]
    dropped = PackedBatch(_parts(3), shared=True)
    assert ring.states.any()
    del dropped  # dropped without being sent: the slot is free again
    assert not ring.states.any()


def test_a_slot_of_an_unknown_ring_is_refused_with_the_worker_named() -> None:
    with pytest.raises(RuntimeError, match=r"worker 4242: .* ring 00ff"):
        mapped_ring("00ff", 4242, None)


def _is_shared(packed: PackedBatch) -> bool:
    return packed.shared


@pytest.mark.skipif(not supports_shared_slots(), reason="needs memfd_create (Linux)")
@pytest.mark.parametrize("shared_memory", [True, False])
def test_workers_use_the_slots_unless_told_not_to(shared_memory: bool) -> None:
    corpus = StreamingCorpus(DOCUMENTS, rank=0, world_size=1, block=8, batch_size=3)
    dataset = StreamingDataset(corpus, num_epochs=1, shared_memory=shared_memory)
    seen = set(DataLoader(dataset, batch_size=None, num_workers=2, collate_fn=_is_shared))
    assert seen == {shared_memory}


def test_shared_memory_must_be_a_bool() -> None:
    corpus = StreamingCorpus(DOCUMENTS, rank=0, world_size=1, block=8, batch_size=3)
    with pytest.raises(ArgumentTypeError, match=r"`shared_memory` must be True or False\. Got 1"):
        StreamingDataset(corpus, shared_memory=1)  # type: ignore[arg-type]
