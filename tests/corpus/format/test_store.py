"""The declared store contract (ShardStore) and the location dispatch (open_store)."""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mixle.corpus import CorpusWriter, ShardStore, open_corpus
from mixle.corpus.format.documents import open_documents
from mixle.corpus.format.shard_loader import MappedShards
from mixle.corpus.storage.local import LocalStore
from mixle.corpus.storage.open import open_store
from mixle.errors import ArgumentError, CorpusFormatError


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    with CorpusWriter(tmp_path / "c", vocab_size=100, shard_max_bytes=64) as writer:
        writer.add_many([np.arange(i % 7 + 1) for i in range(40)])
    return tmp_path / "c"


class _CountingStore(LocalStore):
    """A local store that records the optional-capability calls the reader makes."""

    def __init__(self, directory: str) -> None:
        super().__init__(directory)
        self.calls: list[tuple[str, Any]] = []

    def release(self, name: str) -> None:
        self.calls.append(("release", name))

    def prefetch_files(self, names: Any) -> None:
        self.calls.append(("prefetch_files", list(names)))


def test_a_backend_missing_a_declared_method_cannot_be_built() -> None:
    class Partial(ShardStore):
        @property
        def location(self) -> str:
            return "x"

        @property
        def options(self) -> Mapping[str, Any]:
            return {}

    with pytest.raises(TypeError, match="read_manifest"):
        Partial()  # type: ignore[abstract]


def test_local_store_capabilities_default_to_no_ops(corpus: Path) -> None:
    store = open_store(str(corpus))
    assert isinstance(store, LocalStore) and isinstance(store, ShardStore)
    store.release("shard-00000.tokens")
    store.prefetch_files(["shard-00000.tokens"])
    store.close()
    assert type(store.shard_loader()) is MappedShards


def test_open_store_passes_a_store_through_and_rejects_unknown_schemes(corpus: Path) -> None:
    store = LocalStore(str(corpus))
    assert open_store(store) is store
    with pytest.raises(ArgumentError, match="no storage backend for nope://"):
        open_store("nope://bucket/corpus")


def test_documents_opened_on_a_store_read_through_it(corpus: Path) -> None:
    store = _CountingStore(str(corpus))
    documents = open_documents(store)
    assert documents.store is store
    reference = open_corpus(corpus)
    for index in range(len(reference)):
        np.testing.assert_array_equal(documents[index], reference[index])


def test_a_pickled_reader_reopens_through_its_store_and_checks_the_fingerprint(
    corpus: Path,
) -> None:
    documents = open_corpus(corpus)
    clone = pickle.loads(pickle.dumps(documents))
    assert clone.fingerprint == documents.fingerprint and isinstance(clone.store, LocalStore)
    payload = pickle.dumps(documents)
    with CorpusWriter(corpus, vocab_size=100, overwrite=True) as writer:
        writer.add_many([np.arange(3)])
    with pytest.raises(CorpusFormatError, match="changed since this reader was pickled"):
        pickle.loads(payload)
