"""VirtualDocuments: the documents contract, the closed-form offsets, and scale."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mixle.errors import ArgumentError
from mixle.testing import VirtualDocuments, assert_documents_contract


def _expected(documents: VirtualDocuments) -> list[np.ndarray]:
    """The documents rebuilt from ``lengths`` and ``read_tokens`` (two other read paths)."""
    ends = np.cumsum(documents.lengths)
    tokens = documents.read_tokens(0, int(ends[-1]) if len(ends) else 0)
    return np.split(tokens, ends[:-1]) if len(ends) else []


@pytest.mark.parametrize(("count", "mean", "spread"), [(257, 4, 3), (100, 9, 9), (64, 5, 0)])
def test_virtual_documents_pass_the_documents_contract(count: int, mean: int, spread: int) -> None:
    documents = VirtualDocuments(count, mean_length=mean, spread=spread, seed=3)
    expected = _expected(documents)
    assert_documents_contract(documents, expected)
    assert_documents_contract(documents[7:90:3], expected[7:90:3])
    assert_documents_contract(documents[5:200], expected[5:200])


@given(
    count=st.integers(0, 600),
    mean=st.integers(0, 40),
    spread_share=st.floats(0, 1),
    seed=st.integers(0, 2**32),
)
def test_token_offsets_are_the_prefix_sums_of_the_lengths(
    count: int, mean: int, spread_share: float, seed: int
) -> None:
    spread = int(mean * spread_share)
    documents = VirtualDocuments(count, mean_length=mean, spread=spread, seed=seed)
    lengths = documents.lengths
    assert ((lengths >= mean - spread) & (lengths <= mean + spread)).all()
    want = np.concatenate(([0], np.cumsum(lengths)))
    np.testing.assert_array_equal(documents.token_offsets(np.arange(count + 1)), want)
    view = documents[count // 3 :: 2]
    np.testing.assert_array_equal(
        view.token_offsets(np.arange(len(view) + 1)),
        np.concatenate(([0], np.cumsum(lengths[count // 3 :: 2]))),
    )


def test_lengths_vary_and_aligned_runs_hold_the_mean() -> None:
    documents = VirtualDocuments(1 << 12, mean_length=64, spread=63, seed=1)
    lengths = documents.lengths
    assert lengths.min() <= 8 and lengths.max() >= 120 and len(set(lengths.tolist())) > 60
    assert documents.num_tokens == 64 << 12


def test_offsets_at_10_to_the_11_documents_match_their_local_lengths() -> None:
    documents = VirtualDocuments(10**11, lengths_limit=0)
    rng = np.random.default_rng(0)
    starts = rng.integers(0, 10**11 - 1000, 20)
    for start in starts.tolist():
        local = documents[start : start + 1000]
        offsets = documents.token_offsets(np.arange(start, start + 1001))
        np.testing.assert_array_equal(np.diff(offsets), [len(d) for d in local.take(range(1000))])
        np.testing.assert_array_equal(
            np.concatenate(local.take(range(1000))), documents.read_tokens(offsets[0], offsets[-1])
        )
    assert 10**11 <= documents.num_tokens <= 7 * 10**11


def test_lengths_are_refused_above_the_limit() -> None:
    with pytest.raises(ArgumentError, match="lengths_limit"):
        VirtualDocuments(10**10).lengths.sum()


def test_pickling_carries_parameters_not_tokens() -> None:
    documents = VirtualDocuments(10**10, seed=5)[10**9 :]
    blob = pickle.dumps(documents)
    assert len(blob) < 2000
    restored = pickle.loads(blob)
    assert restored.fingerprint == documents.fingerprint
    np.testing.assert_array_equal(restored[123], documents[123])


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"num_documents": -1}, "num_documents"),
        ({"num_documents": 10, "spread": 5, "mean_length": 4}, "spread"),
        ({"num_documents": 10, "vocab_size": 0}, "vocab_size"),
        ({"num_documents": 10, "vocab_size": 2**33}, "vocab_size"),
        ({"num_documents": 2**62}, "num_documents"),
    ],
)
def test_bad_parameters_name_the_argument(kwargs: dict[str, int], name: str) -> None:
    with pytest.raises(ArgumentError, match=name):
        VirtualDocuments(**kwargs)


def test_different_seeds_give_different_documents_and_fingerprints() -> None:
    a, b = VirtualDocuments(1000, seed=0), VirtualDocuments(1000, seed=1)
    assert a.fingerprint != b.fingerprint
    assert not np.array_equal(a.lengths, b.lengths)
