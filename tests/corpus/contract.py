"""The contract every document collection backend must honour (local mmap, remote cache, ...).

Call :func:`assert_documents_contract` with a collection opened from any backend and
the documents it should hold; it checks the whole read surface in one go, so every
backend is held to the same behaviour.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from mixle.data._documents import DocumentSource, document_lengths, documents_fingerprint


def assert_documents_contract(documents: Any, expected: Sequence[np.ndarray]) -> None:
    """Check ``documents`` against ``expected`` through every public read path."""
    count = len(expected)
    assert len(documents) == count
    assert isinstance(documents, DocumentSource)
    assert isinstance(documents, Sequence)
    # Single reads, negative indices, bounds.
    for index in range(count):
        got = documents[index]
        assert got.ndim == 1 and not got.flags.writeable
        assert got.dtype == documents.dtype
        np.testing.assert_array_equal(got, expected[index])
    if count:
        np.testing.assert_array_equal(documents[-1], expected[-1])
        np.testing.assert_array_equal(documents[-count], expected[0])
    for bad in (count, -count - 1):
        with pytest.raises(IndexError):
            documents[bad]
    with pytest.raises(TypeError):
        documents["0"]
    # Iteration, slicing, batched reads.
    for got, want in zip(documents, expected, strict=True):
        np.testing.assert_array_equal(got, want)
    view = documents[1::2]
    assert len(view) == len(expected[1::2])
    for got, want in zip(view, expected[1::2], strict=True):
        np.testing.assert_array_equal(got, want)
    indices = list(range(count - 1, -1, -3)) + list(range(0, count, 4))
    for got, index in zip(documents.take(indices), indices, strict=True):
        np.testing.assert_array_equal(got, expected[index])
    assert documents.take([]) == []
    # Capabilities used by the data layer.
    lengths = document_lengths(documents)
    assert lengths.dtype == np.int64
    np.testing.assert_array_equal(lengths, [len(doc) for doc in expected])
    assert documents.num_tokens == int(lengths.sum())
    fingerprint = documents_fingerprint(documents)
    assert isinstance(fingerprint, str) and fingerprint == documents.fingerprint
    documents.prefetch(indices)
    documents.prefetch([count + 5])
    # Pickling carries no token bytes and round-trips the content.
    restored = pickle.loads(pickle.dumps(documents))
    assert restored.fingerprint == fingerprint
    assert len(restored) == count
    for index in indices:
        np.testing.assert_array_equal(restored[index], expected[index])


def shard_starts(documents: Any) -> list[int]:
    """The index of each shard's first document, and the total, from the public manifest."""
    starts = [0]
    for entry in documents.manifest["shards"]:
        starts.append(starts[-1] + entry["num_documents"])
    return starts
