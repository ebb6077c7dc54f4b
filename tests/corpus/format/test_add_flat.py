"""CorpusWriter.add_flat: the vectorised bulk path writes what add_many writes."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.corpus import CorpusWriter, open_corpus, verify_corpus
from mixle.errors import ArgumentError, TokenIdError


def _files(path: Path) -> dict[str, bytes]:
    return {name: (path / name).read_bytes() for name in sorted(os.listdir(path))}


def _split(tokens: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    return np.split(tokens, np.cumsum(lengths)[:-1]) if lengths.size else []


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 9), max_size=60),
    calls=st.integers(1, 4),
    shard_max_bytes=st.integers(1, 40),
    vocab=st.sampled_from([None, 300, 70_000]),
    seed=st.integers(0, 2**16),
)
def test_add_flat_writes_the_bytes_add_many_writes(
    tmp_path_factory: pytest.TempPathFactory,
    lengths: list[int],
    calls: int,
    shard_max_bytes: int,
    vocab: int | None,
    seed: int,
) -> None:
    sizes = np.asarray(lengths, dtype=np.int64)
    high = 65_536 if vocab is None else vocab  # never widens: the bytes are comparable
    tokens = np.random.default_rng(seed).integers(0, high, int(sizes.sum()), dtype=np.int64)
    documents = _split(tokens, sizes)
    root = tmp_path_factory.mktemp("flat")
    with CorpusWriter(
        root / "many", vocab_size=vocab, shard_max_bytes=shard_max_bytes, durable=False
    ) as writer:
        writer.add_many(documents)
    with CorpusWriter(
        root / "flat", vocab_size=vocab, shard_max_bytes=shard_max_bytes, durable=False
    ) as writer:
        # Split the run over several calls at arbitrary document boundaries.
        cuts = np.linspace(0, sizes.size, calls + 1).astype(int)
        token_cuts = np.concatenate([[0], np.cumsum(sizes)])[cuts]
        for a, b, ta, tb in zip(cuts[:-1], cuts[1:], token_cuts[:-1], token_cuts[1:], strict=True):
            writer.add_flat(tokens[ta:tb], sizes[a:b])
    assert _files(root / "flat") == _files(root / "many")
    assert verify_corpus(root / "flat").ok


def test_add_flat_of_many_tiny_documents_crosses_shards(tmp_path: Path) -> None:
    sizes = np.tile(np.array([4, 0, 3, 5], dtype=np.int64), 25_000)
    tokens = (np.arange(int(sizes.sum())) % 50_000).astype(np.uint16)
    with CorpusWriter(tmp_path / "c", vocab_size=50_000, shard_max_bytes=1 << 16) as writer:
        writer.add_flat(tokens, sizes)
    docs = open_corpus(tmp_path / "c")
    assert docs.num_shards > 3
    np.testing.assert_array_equal(docs.lengths, sizes)
    ends = np.cumsum(sizes)
    for index in (0, 1, 2, 77_777, sizes.size - 1):
        np.testing.assert_array_equal(docs[index], tokens[ends[index] - sizes[index] : ends[index]])


def test_add_flat_keeps_the_caller_buffer_free_to_reuse(tmp_path: Path) -> None:
    buffer = np.arange(12, dtype=np.uint16)
    with CorpusWriter(tmp_path / "c", dtype="uint16") as writer:
        writer.add_flat(buffer, [5, 7])
        buffer[:] = 9  # the writer gathered small additions: it must have copied them
    assert [doc.tolist() for doc in open_corpus(tmp_path / "c")] == [
        list(range(5)),
        list(range(5, 12)),
    ]


@pytest.mark.parametrize(
    ("tokens", "lengths", "message"),
    [
        (np.arange(5), [2, 2], "add up to 4"),
        (np.arange(5), [6, -1], r"`lengths\[1\]` must be nonnegative"),
        (np.arange(5), [[5]], "1-D array of integers"),
        (np.arange(5), [2.5, 2.5], "1-D array of integers"),
    ],
)
def test_add_flat_rejects_lengths_that_do_not_describe_tokens(
    tmp_path: Path, tokens: np.ndarray, lengths: list[object], message: str
) -> None:
    with CorpusWriter(tmp_path / "c", vocab_size=100) as writer:
        with pytest.raises(ArgumentError, match=message):
            writer.add_flat(tokens, lengths)
        assert writer.num_documents == 0


def test_add_flat_names_the_bad_document_and_keeps_those_before(tmp_path: Path) -> None:
    with CorpusWriter(tmp_path / "c", vocab_size=10) as writer:
        writer.add(np.array([1]))
        with pytest.raises(TokenIdError, match="document 3 has token id 10 at position 0"):
            writer.add_flat(np.array([1, 2, 3, 4, 10, 5]), [2, 2, 2])
        assert writer.num_documents == 3
    assert [doc.tolist() for doc in open_corpus(tmp_path / "c")] == [[1], [1, 2], [3, 4]]
