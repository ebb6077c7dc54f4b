"""Writer -> reader round trips: content, dtypes, shard roll-over, empty documents."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mixle.corpus import CorpusWriter, ShardedDocuments, open_corpus, verify_corpus
from tests.corpus.conftest import random_documents


def assert_same_documents(documents: ShardedDocuments, expected: list[np.ndarray]) -> None:
    assert len(documents) == len(expected)
    for index, want in enumerate(expected):
        got = documents[index]
        assert got.ndim == 1
        np.testing.assert_array_equal(got, np.asarray(want, dtype=np.int64))


def test_round_trip_preserves_every_document_across_shards(
    make_corpus: Callable[..., Path],
) -> None:
    expected = random_documents(0, 500)
    path = make_corpus(expected, vocab_size=1000, shard_max_bytes=512)
    documents = open_corpus(path, verify=True)
    assert documents.num_shards > 10
    assert_same_documents(documents, expected)
    assert documents.num_tokens == sum(len(doc) for doc in expected)
    np.testing.assert_array_equal(documents.lengths, [len(doc) for doc in expected])
    assert documents.lengths.dtype == np.int64


def test_iteration_yields_the_same_documents_as_indexing(make_corpus: Callable[..., Path]) -> None:
    expected = random_documents(1, 200)
    documents = open_corpus(make_corpus(expected, shard_max_bytes=300))
    for got, want in zip(documents, expected, strict=True):
        np.testing.assert_array_equal(got, want)


def test_add_and_add_many_produce_identical_corpora(tmp_path: Path) -> None:
    expected = random_documents(2, 300)
    with CorpusWriter(tmp_path / "one", vocab_size=1000, shard_max_bytes=400) as writer:
        for doc in expected:
            writer.add(doc)
    with CorpusWriter(tmp_path / "many", vocab_size=1000, shard_max_bytes=400) as writer:
        writer.add_many(iter(expected))
    one, many = open_corpus(tmp_path / "one"), open_corpus(tmp_path / "many")
    assert one.fingerprint == many.fingerprint
    assert_same_documents(one, expected)


def test_add_copies_the_callers_array(tmp_path: Path) -> None:
    buffer = np.arange(5, dtype=np.uint16)
    with CorpusWriter(tmp_path / "c", dtype="uint16") as writer:
        writer.add(buffer)
        buffer[:] = 9
        writer.add(buffer)
    documents = open_corpus(tmp_path / "c")
    np.testing.assert_array_equal(documents[0], np.arange(5))
    np.testing.assert_array_equal(documents[1], [9] * 5)


@pytest.mark.parametrize(
    ("vocab_size", "dtype", "expected"),
    [
        (256, None, "uint16"),
        (65536, None, "uint16"),
        (65537, None, "uint32"),
        (2**32, None, "uint32"),
        (2**32 + 1, None, "int64"),
        (None, "uint32", "uint32"),
        (1000, "int64", "int64"),
    ],
)
def test_dtype_is_the_smallest_that_holds_vocab_size(
    tmp_path: Path, vocab_size: int | None, dtype: str | None, expected: str
) -> None:
    with CorpusWriter(tmp_path / "c", vocab_size=vocab_size, dtype=dtype) as writer:
        writer.add([0, 1, 2])
    documents = open_corpus(tmp_path / "c")
    assert documents.dtype == np.dtype(expected)
    assert documents.vocab_size == vocab_size
    assert documents.manifest["dtype"] == expected


@pytest.mark.parametrize(
    ("largest", "expected"),
    [
        (65535, "uint16"),
        (65536, "uint32"),
        (2**32 - 1, "uint32"),
        (2**32, "int64"),
        (2**63 - 1, "int64"),
    ],
)
def test_dtype_from_data_holds_ids_at_the_dtype_limits(
    tmp_path: Path, largest: int, expected: str
) -> None:
    early = [np.arange(40, dtype=np.int64) for _ in range(20)]
    late = np.array([0, largest, 7], dtype=np.int64)
    with CorpusWriter(tmp_path / "c", shard_max_bytes=100) as writer:
        for doc in early:
            writer.add(doc)
        writer.add(late)
        writer.add([])
    documents = open_corpus(tmp_path / "c", verify=True)
    assert documents.dtype == np.dtype(expected)
    assert_same_documents(documents, [*early, late, np.empty(0, np.int64)])


def test_empty_documents_and_empty_corpus_round_trip(tmp_path: Path) -> None:
    with CorpusWriter(tmp_path / "empty", vocab_size=10):
        pass
    assert len(open_corpus(tmp_path / "empty", verify=True)) == 0
    with CorpusWriter(tmp_path / "blanks", vocab_size=10) as writer:
        writer.add_many([[], [], []])
    documents = open_corpus(tmp_path / "blanks", verify=True)
    assert len(documents) == 3
    assert documents.num_tokens == 0
    assert [doc.shape for doc in documents] == [(0,)] * 3


def test_pickle_carries_the_location_not_the_tokens(make_corpus: Callable[..., Path]) -> None:
    expected = [np.full(10_000, 7, dtype=np.int64)]
    documents = open_corpus(make_corpus(expected))
    _ = documents[0]
    payload = pickle.dumps(documents)
    assert len(payload) < 1000
    restored = pickle.loads(payload)
    assert restored.fingerprint == documents.fingerprint
    np.testing.assert_array_equal(restored[0], expected[0])
    view = pickle.loads(pickle.dumps(documents[0:1]))
    np.testing.assert_array_equal(view[0], expected[0])


token_lists = st.lists(
    st.lists(st.integers(min_value=0, max_value=2**32 + 5), max_size=30), max_size=40
)


@given(documents=token_lists, shard_max_bytes=st.integers(min_value=1, max_value=256))
def test_round_trip_property(
    tmp_path_factory: pytest.TempPathFactory, documents: list[list[int]], shard_max_bytes: int
) -> None:
    path = tmp_path_factory.mktemp("prop") / "c"
    with CorpusWriter(path, shard_max_bytes=shard_max_bytes) as writer:
        writer.add_many(documents)
    opened = open_corpus(path)
    assert_same_documents(opened, [np.asarray(doc, dtype=np.int64) for doc in documents])
    largest = max((max(doc) for doc in documents if doc), default=0)
    want = "uint16" if largest < 2**16 else "uint32" if largest < 2**32 else "int64"
    assert opened.dtype == np.dtype(want)
    assert verify_corpus(path).ok


@given(
    documents=st.lists(
        st.lists(st.sampled_from([0, 1, 65534, 65535]), max_size=20), min_size=1, max_size=20
    )
)
def test_round_trip_at_uint16_limit_with_vocab_size(
    tmp_path_factory: pytest.TempPathFactory, documents: list[list[int]]
) -> None:
    path = tmp_path_factory.mktemp("limit") / "c"
    with CorpusWriter(path, vocab_size=65536, shard_max_bytes=64) as writer:
        for doc in documents:
            writer.add(np.asarray(doc, dtype=np.uint16))
    opened = open_corpus(path, verify=True)
    assert opened.dtype == np.uint16
    assert_same_documents(opened, [np.asarray(doc) for doc in documents])
