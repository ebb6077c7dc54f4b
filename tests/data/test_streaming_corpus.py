"""Issue #2: order, sharding, eager packing and StreamingCorpus validation."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mixle.data.streaming_corpus import (
    PackedCorpus,
    StreamingCorpus,
    global_document_order,
    pack_documents,
    shard_documents_for_rank,
)
from mixle.errors import ArgumentError, ArgumentTypeError, TokenIdError
from tests.data._reference import reference_rows, reference_stream

token_ids = st.integers(min_value=0, max_value=2**40)
documents_strategy = st.lists(
    st.lists(token_ids, min_size=0, max_size=12).map(lambda d: np.array(d, dtype=np.int64)),
    min_size=0,
    max_size=12,
)


class IndexOnlyDocuments:
    """A lazy DocumentSource that records which documents are read and refuses bulk access."""

    fingerprint = "index-only"
    dtype = None

    def __init__(self, documents: list[np.ndarray]) -> None:
        self._documents = documents
        self.read: list[int] = []

    def __len__(self) -> int:
        return len(self._documents)

    def __getitem__(self, index: int) -> np.ndarray:
        self.read.append(int(index))
        return self._documents[index]

    def __iter__(self) -> Iterator[np.ndarray]:
        raise AssertionError("documents must only be indexed, never iterated or copied")

    @property
    def lengths(self) -> np.ndarray:
        return np.array([len(d) for d in self._documents], dtype=np.int64)

    def take(self, indices: Sequence[int]) -> list[np.ndarray]:
        return [self[index] for index in indices]

    def prefetch(self, indices: Sequence[int]) -> None:
        del indices


# ---------------------------------------------------------------- global order


@given(st.integers(0, 200), st.integers(0, 2**40), st.integers(0, 50))
def test_order_is_a_permutation_and_pure(n: int, seed: int, epoch: int) -> None:
    order = global_document_order(n, seed=seed, epoch=epoch)
    assert order.dtype == np.int64
    assert sorted(order.tolist()) == list(range(n))
    again = global_document_order(n, seed=seed, epoch=epoch)
    assert order.tobytes() == again.tobytes()


def test_order_is_identical_in_another_process() -> None:
    code = (
        "import sys; from mixle.data.streaming_corpus import global_document_order as g;"
        "sys.stdout.write(g(1000, seed=12345, epoch=7).tobytes().hex())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd="."
    ).stdout
    here = global_document_order(1000, seed=12345, epoch=7).tobytes().hex()
    assert out == here


@given(st.integers(20, 300), st.integers(0, 2**32), st.integers(0, 100))
def test_different_epochs_and_seeds_give_different_orders(n: int, seed: int, epoch: int) -> None:
    base = global_document_order(n, seed=seed, epoch=epoch)
    assert not np.array_equal(base, global_document_order(n, seed=seed, epoch=epoch + 1))
    assert not np.array_equal(base, global_document_order(n, seed=seed + 1, epoch=epoch))


def test_sequence_selector_transforms_the_order() -> None:
    calls: list[tuple[int, int]] = []

    def keep_even(order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
        calls.append((seed, epoch))
        return order[order % 2 == 0]

    order = global_document_order(10, seed=3, epoch=2, sequence_selector=keep_even)
    base = global_document_order(10, seed=3, epoch=2)
    assert order.tolist() == [i for i in base.tolist() if i % 2 == 0]
    assert calls == [(3, 2)]


@pytest.mark.parametrize(
    ("result", "error"),
    [
        ([0, 10], ArgumentError),
        ([-1], ArgumentError),
        ([0.5], ArgumentTypeError),
        ([[0]], ArgumentTypeError),
    ],
)
def test_sequence_selector_result_is_validated(result: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="sequence_selector"):
        global_document_order(10, seed=0, epoch=0, sequence_selector=lambda o, s, e: result)


def test_sequence_selector_must_be_callable() -> None:
    with pytest.raises(ArgumentTypeError, match="sequence_selector"):
        global_document_order(3, seed=0, epoch=0, sequence_selector=5)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["num_documents", "seed", "epoch"])
@pytest.mark.parametrize(
    ("value", "error"),
    [
        (-3, ArgumentError),
        (1.5, ArgumentTypeError),
        (2.0, ArgumentTypeError),
        (True, ArgumentTypeError),
        (2**63, ArgumentError),
    ],
)
def test_order_arguments_are_validated(name: str, value: Any, error: type[Exception]) -> None:
    kwargs: dict[str, Any] = {"num_documents": 5, "seed": 0, "epoch": 0, name: value}
    n = kwargs.pop("num_documents")
    with pytest.raises(error, match=f"`{name}`"):
        global_document_order(n, **kwargs)


# ---------------------------------------------------------------- sharding


@given(st.integers(0, 300), st.integers(1, 17), st.integers(0, 1000))
def test_sharding_is_disjoint_and_complete(n: int, world_size: int, seed: int) -> None:
    order = global_document_order(n, seed=seed, epoch=0)
    shards = [shard_documents_for_rank(order, r, world_size) for r in range(world_size)]
    combined = np.concatenate(shards)
    assert sorted(combined.tolist()) == list(range(n))
    for rank, shard in enumerate(shards):
        assert shard.tolist() == order[rank::world_size].tolist()


@pytest.mark.parametrize(
    ("rank", "world_size", "error", "name"),
    [
        (2, 2, ArgumentError, "rank"),
        (0, 0, ArgumentError, "world_size"),
        (-1, 2, ArgumentError, "rank"),
        (0, -2, ArgumentError, "world_size"),
        (True, 2, ArgumentTypeError, "rank"),
        (0, 2.0, ArgumentTypeError, "world_size"),
    ],
)
def test_sharding_rank_and_world_size_are_validated(
    rank: Any, world_size: Any, error: type[Exception], name: str
) -> None:
    with pytest.raises(error, match=f"`{name}`"):
        shard_documents_for_rank(np.arange(4), rank, world_size)


# ---------------------------------------------------------------- packing


@given(
    documents_strategy,
    st.data(),
    st.integers(1, 9),
    st.integers(-5, 5),
    st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
)
def test_packing_matches_the_definition(
    documents: list[np.ndarray],
    data: st.DataObject,
    block: int,
    pad_id: int,
    boundary_id: int | None,
) -> None:
    indices = (
        data.draw(st.lists(st.integers(0, max(len(documents) - 1, 0)), max_size=15))
        if documents
        else []
    )
    packed = pack_documents(documents, indices, block, pad_id=pad_id, boundary_id=boundary_id)
    stream = reference_stream(documents, indices, boundary_id)
    rows, mask = reference_rows(stream, block, pad_id)
    assert packed.rows.dtype == np.int64 and packed.loss_mask.dtype == np.bool_
    np.testing.assert_array_equal(packed.rows, rows)
    np.testing.assert_array_equal(packed.loss_mask, mask)
    assert int(packed.loss_mask.sum()) == max(len(stream) - 1, 0) == packed.real_tokens
    assert packed.total_tokens == rows.shape[0] * block
    # Tokens in order: the rows' inputs followed by the last target spell the stream.
    if len(stream) >= 2:
        recovered = np.concatenate([packed.rows[:, :-1].reshape(-1), packed.rows[-1, -1:]])
        assert recovered[: len(stream)].tolist() == stream
    # Padding only at the tail of the final row.
    if packed.rows.shape[0] > 1:
        assert packed.loss_mask[:-1].all()
    if boundary_id is not None and len(indices) > 1:
        positions = [i for i, t in enumerate(stream) if t == boundary_id]
        assert positions  # a boundary is real signal wherever it lands
    if packed.total_tokens:
        assert packed.packing_efficiency == packed.real_tokens / packed.total_tokens


def test_boundary_targets_are_never_masked() -> None:
    documents = [np.array([1, 2]), np.array([3]), np.array([4, 5, 6])]
    packed = pack_documents(documents, [0, 1, 2], 3, boundary_id=0, pad_id=-1)
    targets = packed.rows[:, 1:]
    assert (targets[packed.loss_mask] == 0).sum() == 2
    assert packed.rows.tolist() == [[1, 2, 0, 3], [3, 0, 4, 5], [5, 6, -1, -1]]
    assert packed.loss_mask.tolist() == [[True] * 3, [True] * 3, [True, False, False]]


def test_large_ids_survive_unchanged() -> None:
    ids = [2**24 + 1, 2**53 + 1, 2**63 - 1, 7]
    packed = pack_documents([np.array(ids, dtype=np.int64)], [0], 3)
    assert packed.rows[0].tolist() == ids
    as_float = pack_documents([np.array([2.0**24 + 1, 5.0])], [0], 1)
    assert as_float.rows[0].tolist() == [2**24 + 1, 5]
    corpus = StreamingCorpus([np.array(ids)], rank=0, world_size=1, block=3, batch_size=1)
    context, targets, _ = next(iter(corpus.epoch_batches(0)))
    assert context.dtype == np.int64 and context[0].tolist() == ids[:3]
    assert targets[0].tolist() == ids[1:]


@pytest.mark.parametrize(
    ("document", "error", "needle"),
    [
        (np.array([1.0, 2.5]), TokenIdError, "fractional"),
        (np.array([1.0, np.nan]), TokenIdError, "non-finite"),
        (np.array([np.inf]), TokenIdError, "non-finite"),
        (np.array([float(2**63)]), TokenIdError, "int64"),
        (np.array([2**63], dtype=np.uint64), TokenIdError, "int64"),
        (np.array([True, False]), ArgumentTypeError, "document 1"),
        (np.array([[1, 2]]), ArgumentTypeError, "1-D"),
        (np.array(["a"]), ArgumentTypeError, "document 1"),
    ],
)
def test_invalid_token_ids_raise_naming_the_document(
    document: np.ndarray, error: type[Exception], needle: str
) -> None:
    documents = [np.array([1, 2, 3]), document]
    with pytest.raises(error, match=needle):
        pack_documents(documents, [0, 1], 4)
    if document.ndim == 1:
        corpus = StreamingCorpus(documents, rank=0, world_size=1, block=2, batch_size=8)
        with pytest.raises(error, match="document 1"):
            list(corpus.epoch_batches(0))


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"block": 0}, ArgumentError, "block"),
        ({"block": -4}, ArgumentError, "block"),
        ({"block": 2.0}, ArgumentTypeError, "block"),
        ({"block": True}, ArgumentTypeError, "block"),
        ({"pad_id": 1.5}, ArgumentTypeError, "pad_id"),
        ({"pad_id": 2**63}, ArgumentError, "pad_id"),
        ({"boundary_id": np.float64(3)}, ArgumentTypeError, "boundary_id"),
        ({"boundary_id": False}, ArgumentTypeError, "boundary_id"),
        ({"indices": [0, 3]}, ArgumentError, "indices"),
        ({"indices": [-1]}, ArgumentError, "indices"),
        ({"indices": [0.0]}, ArgumentTypeError, "indices"),
        ({"indices": [True]}, ArgumentTypeError, "indices"),
    ],
)
def test_pack_arguments_are_validated(
    kwargs: dict[str, Any], error: type[Exception], name: str
) -> None:
    arguments: dict[str, Any] = {"indices": [0, 1], "block": 4, **kwargs}
    with pytest.raises(error, match=name):
        pack_documents([np.arange(3), np.arange(4)], **arguments)


def test_pack_reads_only_the_requested_documents() -> None:
    documents = IndexOnlyDocuments([np.arange(i + 1) for i in range(10)])
    pack_documents(documents, [7, 2, 7], 3)  # type: ignore[arg-type]
    assert sorted(set(documents.read)) == [2, 7]


def test_empty_and_single_token_streams_have_no_rows() -> None:
    for documents, indices in (
        ([], []),
        ([np.array([5])], [0]),
        ([np.array([], dtype=np.int64)], [0]),
    ):
        packed = pack_documents(documents, indices, 4)
        assert packed.rows.shape == (0, 5) and packed.loss_mask.shape == (0, 4)
        assert packed.real_tokens == packed.total_tokens == 0


def test_packed_corpus_validates_its_parts() -> None:
    rows = np.zeros((2, 5), dtype=np.int64)
    with pytest.raises(ArgumentTypeError, match="loss_mask"):
        PackedCorpus(rows, real_tokens=1, total_tokens=8, loss_mask=np.ones((2, 5), dtype=bool))
    with pytest.raises(ArgumentError, match="real_tokens"):
        PackedCorpus(rows, real_tokens=9, total_tokens=8, loss_mask=np.ones((2, 4), dtype=bool))
    with pytest.raises(ArgumentTypeError, match="rows"):
        PackedCorpus(
            rows.astype(np.float32),
            real_tokens=1,
            total_tokens=8,
            loss_mask=np.ones((2, 4), dtype=bool),
        )


# ---------------------------------------------------------------- StreamingCorpus (issue #2 surface)


def _corpus(**overrides: Any) -> StreamingCorpus:
    kwargs: dict[str, Any] = {"rank": 0, "world_size": 2, "block": 4, "batch_size": 2, **overrides}
    documents = kwargs.pop("documents", [np.arange(i + 3) for i in range(9)])
    return StreamingCorpus(documents, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"rank": 2}, ArgumentError, "rank"),
        ({"rank": -1}, ArgumentError, "rank"),
        ({"world_size": 0}, ArgumentError, "world_size"),
        ({"block": 0}, ArgumentError, "block"),
        ({"batch_size": 0}, ArgumentError, "batch_size"),
        ({"batch_size": -2}, ArgumentError, "batch_size"),
        ({"batch_size": 2.0}, ArgumentTypeError, "batch_size"),
        ({"seed": -1}, ArgumentError, "seed"),
        ({"seed": 0.5}, ArgumentTypeError, "seed"),
        ({"pad_id": np.nan}, ArgumentTypeError, "pad_id"),
        ({"boundary_id": 1.0}, ArgumentTypeError, "boundary_id"),
        ({"sequence_selector": "x"}, ArgumentTypeError, "sequence_selector"),
        ({"even_batches": 1}, ArgumentTypeError, "even_batches"),
        ({"documents": 5}, ArgumentTypeError, "documents"),
        ({"documents": [np.zeros((2, 2))]}, ArgumentTypeError, "document 0"),
    ],
)
def test_streaming_corpus_validates_eagerly(
    kwargs: dict[str, Any], error: type[Exception], name: str
) -> None:
    with pytest.raises(error, match=name):
        _corpus(**kwargs)


def test_epoch_batches_validates_before_iteration() -> None:
    corpus = _corpus()
    with pytest.raises(ArgumentError, match="epoch"):
        corpus.epoch_batches(-1)
    with pytest.raises(ArgumentTypeError, match="epoch"):
        corpus.epoch_batches(1.0)  # type: ignore[arg-type]


@given(st.integers(0, 3), st.integers(1, 4), st.integers(1, 7), st.integers(1, 3))
def test_epoch_batches_cover_the_rank_stream(
    seed: int, world_size: int, block: int, batch_size: int
) -> None:
    documents = [np.arange(100 * i, 100 * i + (i % 5) + 1) for i in range(13)]
    for rank in range(world_size):
        corpus = StreamingCorpus(
            documents,
            rank=rank,
            world_size=world_size,
            block=block,
            batch_size=batch_size,
            seed=seed,
            boundary_id=-7,
            pad_id=-1,
            even_batches=False,
        )
        indices = corpus.rank_document_indices(3)
        packed = pack_documents(documents, indices, block, pad_id=-1, boundary_id=-7)
        batches = list(corpus.epoch_batches(3))
        assert all(len(b[0]) <= batch_size for b in batches)
        assert all(len(b[0]) == batch_size for b in batches[:-1])
        if batches:
            context = np.concatenate([b[0] for b in batches])
            targets = np.concatenate([b[1] for b in batches])
            mask = np.concatenate([b[2] for b in batches])
            assert context.dtype == targets.dtype == np.int64
            np.testing.assert_array_equal(context, packed.rows[:, :-1])
            np.testing.assert_array_equal(targets, packed.rows[:, 1:])
            np.testing.assert_array_equal(mask, packed.loss_mask)
            assert sum(int((~b[2]).any()) for b in batches) <= 1
            assert corpus.last_packing_efficiency == pytest.approx(packed.packing_efficiency)
        else:
            assert packed.rows.shape[0] == 0


def test_streaming_corpus_reads_only_its_own_documents() -> None:
    documents = IndexOnlyDocuments([np.arange(i + 1) for i in range(20)])
    corpus = StreamingCorpus(
        documents, rank=1, world_size=3, block=4, batch_size=2, even_batches=False
    )  # type: ignore[arg-type]
    list(corpus.epoch_batches(0))
    assert set(documents.read) <= set(corpus.rank_document_indices(0).tolist())
