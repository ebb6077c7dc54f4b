"""The contract every document collection backend must honour (local mmap, remote cache, ...).

Call :func:`assert_documents_contract` with a collection opened from any backend and
the documents it should hold; it checks the whole read surface in one go, so every
backend is held to the same behaviour. Failures are ``AssertionError``; no test
framework is imported.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np

from mixle.data._documents import DocumentSource, document_lengths, documents_fingerprint
from mixle.testing._raises import raises


def assert_documents_contract(documents: Any, expected: Sequence[np.ndarray]) -> None:
    """Check ``documents`` against ``expected`` through every public read path."""
    count = len(expected)
    assert len(documents) == count
    # Checked without narrowing ``documents``' type: the rest reads it as a backend's.
    assert all(isinstance(documents, kind) for kind in (DocumentSource, Sequence))
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
        with raises(IndexError):
            documents[bad]
    with raises(TypeError):
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
    assert_gather_contract(documents, expected)
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


def assert_gather_contract(documents: Any, expected: Sequence[np.ndarray]) -> None:
    """``gather_into`` writes exactly the requested pieces (cast to int64) and nothing else,
    and rejects a piece outside its document or outside ``out`` with :class:`IndexError`."""
    count = len(expected)
    if not count:
        return
    rng = np.random.default_rng(count)
    indices = rng.integers(0, count, size=min(3 * count, 40)).astype(np.int64)
    lengths = np.array([len(expected[i]) for i in indices.tolist()], dtype=np.int64)
    begins = (rng.random(len(indices)) * (lengths + 1)).astype(np.int64)
    ends = begins + (rng.random(len(indices)) * (lengths - begins + 1)).astype(np.int64)
    gaps = rng.integers(0, 3, size=len(indices))
    at = np.cumsum(gaps + ends - begins) - (ends - begins)
    sentinel = -7
    out = np.full(int(at[-1] + ends[-1] - begins[-1]) + 2, sentinel, dtype=np.int64)
    want = out.copy()
    for index, begin, end, position in zip(indices, begins, ends, at, strict=True):
        want[position : position + end - begin] = expected[index][begin:end]
    documents.gather_into(indices, begins, ends, out, at)
    np.testing.assert_array_equal(out, want)
    longest = int(np.argmax(lengths))
    with raises(IndexError):
        documents.gather_into(
            indices[longest : longest + 1],
            np.zeros(1, np.int64),
            lengths[longest : longest + 1] + 1,
            out,
            np.zeros(1, np.int64),
        )
    with raises(IndexError):
        documents.gather_into(
            np.array([count], np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64), out, at[:1]
        )
    with raises(IndexError):
        documents.gather_into(
            indices[longest : longest + 1],
            np.zeros(1, np.int64),
            lengths[longest : longest + 1],
            out,
            np.array([len(out) - int(lengths[longest]) + 1], np.int64),
        )
