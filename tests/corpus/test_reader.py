"""ShardedDocuments: indexing, slicing views, batched reads, prefetch, LRU, capabilities."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from mixle.corpus import DocumentsView, ShardedDocuments, open_corpus
from mixle.data._documents import (
    DocumentSource,
    document_lengths,
    documents_fingerprint,
    prefetch_hint,
)
from mixle.errors import ArgumentError, ArgumentTypeError, CorpusNotFoundError
from tests.corpus.conftest import random_documents


@pytest.fixture
def corpus(make_corpus: Callable[..., Path]) -> tuple[ShardedDocuments, list[np.ndarray]]:
    expected = random_documents(7, 120)
    return open_corpus(make_corpus(expected, vocab_size=1000, shard_max_bytes=200)), expected


def test_negative_indices_and_out_of_range(
    corpus: tuple[ShardedDocuments, list[np.ndarray]],
) -> None:
    documents, expected = corpus
    np.testing.assert_array_equal(documents[-1], expected[-1])
    np.testing.assert_array_equal(documents[-120], expected[0])
    np.testing.assert_array_equal(documents[np.int64(5)], expected[5])
    for bad in (120, -121, 10**12):
        with pytest.raises(IndexError, match="out of range"):
            documents[bad]
    with pytest.raises(TypeError):
        documents[True]
    with pytest.raises(TypeError):
        documents[1.0]  # type: ignore[call-overload]


def test_documents_are_read_only_views(corpus: tuple[ShardedDocuments, list[np.ndarray]]) -> None:
    documents, _ = corpus
    doc = documents[3]
    assert not doc.flags.writeable
    assert not doc.flags.owndata
    with pytest.raises(ValueError):
        doc[...] = 0


def test_slices_are_lazy_views_with_sequence_semantics(
    corpus: tuple[ShardedDocuments, list[np.ndarray]],
) -> None:
    documents, expected = corpus
    for selection in (slice(10, 50), slice(None, None, -3), slice(5, 100, 7), slice(200, 300)):
        view = documents[selection]
        assert isinstance(view, DocumentsView)
        want = expected[selection]
        assert len(view) == len(want)
        for got, ref in zip(view, want, strict=True):
            np.testing.assert_array_equal(got, ref)
        np.testing.assert_array_equal(view.lengths, [len(doc) for doc in want])
        assert view.num_tokens == sum(len(doc) for doc in want)
    nested = documents[10:50][5:][::2]
    assert [d.tolist() for d in nested] == [d.tolist() for d in expected[10:50][5:][::2]]
    np.testing.assert_array_equal(nested[-1], expected[10:50][5:][::2][-1])
    with pytest.raises(IndexError):
        documents[10:20][10]
    assert documents[0:10].fingerprint != documents[0:11].fingerprint
    assert [d.tolist() for d in documents[10:20].take([-1, 0])] == [
        expected[19].tolist(),
        expected[10].tolist(),
    ]


def test_take_returns_documents_in_request_order(
    corpus: tuple[ShardedDocuments, list[np.ndarray]],
) -> None:
    documents, expected = corpus
    indices = [119, 0, 5, 5, -1, 60, 1]
    for got, index in zip(documents.take(indices), indices, strict=True):
        np.testing.assert_array_equal(got, expected[index])
    assert documents.take([]) == []
    with pytest.raises(IndexError, match=r"indices\[1\]"):
        documents.take([0, 120])
    with pytest.raises(ArgumentTypeError):
        documents.take([0.5])


def test_prefetch_is_a_harmless_hint(corpus: tuple[ShardedDocuments, list[np.ndarray]]) -> None:
    documents, expected = corpus
    documents.prefetch(range(0, 120, 3))
    documents.prefetch([10**9, -(10**9)])  # ignored, never raises
    documents.prefetch([])
    prefetch_hint(documents, [1, 2, 3])
    np.testing.assert_array_equal(documents[1], expected[1])


def test_data_layer_capabilities(corpus: tuple[ShardedDocuments, list[np.ndarray]]) -> None:
    documents, expected = corpus
    assert isinstance(documents, DocumentSource)
    np.testing.assert_array_equal(document_lengths(documents), [len(d) for d in expected])
    assert documents_fingerprint(documents) == documents.fingerprint
    assert documents.lengths is documents.lengths  # cached
    assert not documents.lengths.flags.writeable


def test_open_maps_no_shard_and_lru_bounds_open_shards(
    make_corpus: Callable[..., Path],
) -> None:
    expected = random_documents(3, 300)
    path = make_corpus(expected, shard_max_bytes=64)
    documents = open_corpus(path, max_open_shards=3)
    assert documents.num_shards > 20
    assert len(documents._resident) == 0
    rng = np.random.default_rng(0)
    for index in rng.integers(0, 300, size=500).tolist():
        np.testing.assert_array_equal(documents[index], expected[index])
        assert len(documents._resident) <= 3
    _ = documents.lengths
    assert len(documents._resident) <= 3
    with pytest.raises(ArgumentError):
        open_corpus(path, max_open_shards=0)


def test_missing_corpus_is_both_corpus_error_and_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(CorpusNotFoundError) as info:
        open_corpus(tmp_path / "nope")
    assert isinstance(info.value, FileNotFoundError)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"manifest\.json is missing"):
        open_corpus(tmp_path / "empty")


def test_views_survive_eviction_of_their_shard(make_corpus: Callable[..., Path]) -> None:
    expected = random_documents(4, 100)
    documents = open_corpus(make_corpus(expected, shard_max_bytes=64), max_open_shards=1)
    first = documents[0]
    _ = [documents[i] for i in range(100)]
    np.testing.assert_array_equal(first, expected[0])


def test_open_len_lengths_and_fingerprint_map_no_token_file(
    make_corpus: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = random_documents(5, 50)
    path = make_corpus(expected, shard_max_bytes=64)

    def forbidden(path: str, size: int) -> None:
        raise AssertionError(f"mapped {path}")

    monkeypatch.setattr("mixle.corpus._reader._map", forbidden)
    documents = open_corpus(path)
    assert len(documents) == 50
    np.testing.assert_array_equal(documents.lengths, [len(d) for d in expected])
    assert len(documents.fingerprint) == 64
    assert documents[10:20].num_tokens == sum(len(d) for d in expected[10:20])
    with pytest.raises(AssertionError, match="mapped"):
        documents[0]
