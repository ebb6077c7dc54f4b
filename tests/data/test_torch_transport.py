"""Issue #17 item 5: DataLoader workers hand each batch over as one ``PackedBatch``."""

from __future__ import annotations

import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from torch.utils.data import DataLoader

from mixle.data.streaming_corpus import StreamingCorpus
from mixle.data.torch import PackedBatch, StreamingDataset

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
