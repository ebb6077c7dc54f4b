"""A large shard's offsets are checked block by block as its documents are first read.

Opening and reading one document of a shard with more documents than the reader checks
whole on first touch costs one block of offsets, not the whole file; a corrupt offset
still raises a :class:`CorpusFormatError` naming the file and the document before any
token of an affected document is returned, through every read path.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mixle.corpus import CorpusWriter, open_corpus
from mixle.data import StreamingCorpus
from mixle.errors import CorpusFormatError

# More documents than the reader checks whole when a shard is mapped (2**18).
COUNT = 300_000
BLOCK = 4096
TOKENS = np.arange(2 * COUNT, dtype=np.int64) % 2**16  # document i is TOKENS[2i : 2i + 2]


@pytest.fixture(scope="module")
def large_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("offsets") / "corpus"
    tokens = TOKENS.astype(np.uint16)
    with CorpusWriter(path, dtype="uint16", durable=False) as writer:
        writer.add_many(np.split(tokens, np.arange(2, 2 * COUNT, 2)))
    return path


def _corrupt(path: Path, document: int, value: int) -> Path:
    """A copy of ``path`` whose offset ``document`` (shard-local) is set to ``value``."""
    copy = path.parent / f"corrupt-{document}-{value}"
    copy.mkdir()
    for item in path.iterdir():
        (copy / item.name).write_bytes(item.read_bytes())
    offsets = copy / "shard-00000.offsets"
    data = bytearray(offsets.read_bytes())
    data[32 + 8 * document : 40 + 8 * document] = np.int64(value).tobytes()
    offsets.write_bytes(bytes(data))
    return copy


def test_a_large_shard_is_read_without_checking_its_whole_offsets(large_corpus: Path) -> None:
    documents = open_corpus(large_corpus)
    assert documents.parsed_manifest.shards[0].num_documents == COUNT
    np.testing.assert_array_equal(documents[12345], [24690, 24691])
    out = np.zeros(4, dtype=np.int64)
    documents.gather_into(
        np.array([COUNT - 1, 7]), np.array([0, 1]), np.array([2, 2]), out, np.array([0, 3])
    )
    np.testing.assert_array_equal(out, [*TOKENS[-2:], 0, 15])


@pytest.mark.parametrize("block", [0, 20, COUNT // BLOCK])
def test_a_corrupt_offset_raises_naming_file_and_document_on_every_read_path(
    large_corpus: Path, block: int
) -> None:
    # Document `bad - 1` grows into its neighbour (its own offsets still increase);
    # document `bad` gets a negative length. `bad` is the first of a check block, so
    # the decrease is one offset past the block of `bad - 1`.
    bad = max(block * BLOCK, 1)
    corrupt = _corrupt(large_corpus, bad, 2 * bad + 5)
    pattern = rf"shard-00000\.offsets: offsets decrease at document {bad}"
    for victim in (bad - 1, bad):
        documents = open_corpus(corrupt)
        documents.prefetch([victim])  # a hint never fails
        with pytest.raises(CorpusFormatError, match=pattern):
            documents[victim]
        with pytest.raises(CorpusFormatError, match=pattern):
            open_corpus(corrupt).take([3, victim])
        out = np.zeros(2, dtype=np.int64)
        with pytest.raises(CorpusFormatError, match=pattern):
            open_corpus(corrupt).gather_into(
                np.array([victim]), np.array([0]), np.array([1]), out, np.array([0])
            )
        assert not out.any()  # raised before anything was copied
    far = (bad + 3 * BLOCK) % COUNT
    np.testing.assert_array_equal(open_corpus(corrupt)[far], TOKENS[2 * far : 2 * far + 2])
    with pytest.raises(CorpusFormatError, match=pattern):
        _ = open_corpus(corrupt).lengths
    with pytest.raises(CorpusFormatError, match=pattern):
        list(open_corpus(corrupt))


def test_a_stream_over_a_corrupt_shard_raises_before_any_batch(large_corpus: Path) -> None:
    corrupt = _corrupt(large_corpus, 5 * BLOCK, 7)
    with pytest.raises(CorpusFormatError, match=r"shard-00000\.offsets"):
        # Without a plan store the stream reads every length, which checks every offset.
        StreamingCorpus(open_corpus(corrupt), rank=0, world_size=1, block=64, batch_size=4)


def test_offsets_past_the_token_count_raise(large_corpus: Path) -> None:
    corrupt = _corrupt(large_corpus, COUNT - 10, 2 * COUNT + 50)
    with pytest.raises(CorpusFormatError, match=r"shard-00000\.offsets: offsets"):
        open_corpus(corrupt)[COUNT - 11]


def test_the_blocks_of_one_read_are_checked_together_and_a_bad_one_is_named(
    large_corpus: Path,
) -> None:
    spread = np.arange(11, COUNT, COUNT // 97)  # ~100 documents in ~100 blocks
    out = np.zeros(2 * spread.size, dtype=np.int64)
    ones = np.ones(spread.size, dtype=np.int64)
    open_corpus(large_corpus).gather_into(
        spread, 0 * ones, 2 * ones, out, 2 * np.arange(spread.size)
    )
    np.testing.assert_array_equal(out.reshape(-1, 2)[:, 0], TOKENS[2 * spread])
    bad = int(spread[40]) + 1
    corrupt = _corrupt(large_corpus, bad, -3)
    with pytest.raises(CorpusFormatError, match=rf"offsets decrease at document {bad - 1}"):
        open_corpus(corrupt).take(spread.tolist())
    too_far = _corrupt(large_corpus, COUNT - 10, 2 * COUNT + 51)
    with pytest.raises(CorpusFormatError, match=r"shard-00000\.offsets: offsets"):
        open_corpus(too_far).take([3, 70_000, COUNT - 11])
