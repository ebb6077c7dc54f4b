"""LitData export: chunk layout, and reading back with the real StreamingDataset."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.corpus import CorpusWriter, open_corpus
from mixle.corpus.export import export_corpus
from tests.corpus.export.conftest import documents, litdata


def read_chunks(directory: Path) -> tuple[dict, list[list[np.ndarray]]]:
    """Parse ``index.json`` and every chunk by LitData's chunk layout."""
    index = json.loads((directory / "index.json").read_text())
    code = int(index["config"]["data_format"][0].split(":")[1])
    dtype = np.dtype({5: "<u2", 6: "<u4", 3: "<i8"}[code])
    chunks = []
    for chunk in index["chunks"]:
        raw = (directory / chunk["filename"]).read_bytes()
        count = int(np.frombuffer(raw, "<u4", 1)[0])
        offsets = np.frombuffer(raw, "<u4", count + 1, 4)
        assert count == chunk["chunk_size"] and offsets[0] == 4 * (count + 2)
        assert offsets[-1] == len(raw) == chunk["chunk_bytes"]
        items = [np.frombuffer(raw[a:b], dtype) for a, b in itertools.pairwise(offsets)]
        assert sum(item.shape[0] for item in items) == chunk["dim"]
        chunks.append(items)
    return index, chunks


def streaming_blocks(directory: Path, block_size: int) -> list[np.ndarray]:
    module = litdata()
    from litdata.streaming.item_loader import TokensLoader

    dataset = module.StreamingDataset(
        str(directory), item_loader=TokensLoader(block_size=block_size), shuffle=False
    )
    return [np.asarray(dataset[i]) for i in range(len(dataset))]


@pytest.mark.parametrize(
    ("dtype", "vocab"), [("uint16", 50_000), ("uint32", 100_000), ("int64", 2**40)]
)
def test_streaming_dataset_reads_every_block_of_the_token_stream(
    make_corpus: Callable[..., Path], tmp_path: Path, dtype: str, vocab: int
) -> None:
    docs = documents(0, 400, vocab=vocab)
    corpus = make_corpus(docs, dtype=dtype, shard_max_bytes=9000)
    block = 129
    summary = export_corpus(corpus, tmp_path / "out", "litdata", block_size=block, chunk_bytes=5000)
    assert (
        summary.dtype == dtype
        and summary.copied_bytes == open_corpus(corpus).num_tokens * np.dtype(dtype).itemsize
    )
    stream = np.concatenate(docs)
    blocks = streaming_blocks(tmp_path / "out", block)
    assert len(blocks) == stream.shape[0] // block  # only the final partial block is dropped
    for number, got in enumerate(blocks):
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, stream[number * block : (number + 1) * block])


def test_every_chunk_but_the_last_holds_whole_blocks(
    make_corpus: Callable[..., Path], tmp_path: Path
) -> None:
    corpus = make_corpus(documents(1, 300), vocab_size=50_257)
    export_corpus(corpus, tmp_path / "out", "litdata", block_size=100, chunk_bytes=3000)
    index, _ = read_chunks(tmp_path / "out")
    dims = [chunk["dim"] for chunk in index["chunks"]]
    assert len(dims) > 5 and all(dim == 1500 for dim in dims[:-1]) and 0 < dims[-1] <= 1500
    assert index["config"]["item_loader"] == "TokensLoader"
    assert index["config"]["data_format"] == ["no_header_numpy:5"]


def test_items_are_the_document_pieces_of_each_chunk(
    make_corpus: Callable[..., Path], tmp_path: Path
) -> None:
    docs = documents(2, 200)
    corpus = make_corpus(docs, vocab_size=50_257)
    export_corpus(corpus, tmp_path / "out", "litdata", chunk_bytes=2000)
    _, chunks = read_chunks(tmp_path / "out")
    pieces = [item for chunk in chunks for item in chunk]
    assert all(piece.shape[0] > 0 for piece in pieces)
    # Joining each document's pieces (a piece ends where its document ends or a chunk
    # ends) gives back exactly the non-empty documents.
    rebuilt, current, boundaries = [], [], set(np.cumsum([len(d) for d in docs]).tolist())
    position = 0
    for piece in pieces:
        current.append(piece)
        position += piece.shape[0]
        if position in boundaries:
            rebuilt.append(np.concatenate(current))
            current = []
    expected = [doc for doc in docs if len(doc)]
    assert len(rebuilt) == len(expected)
    for got, want in zip(rebuilt, expected, strict=True):
        np.testing.assert_array_equal(got, want)


def test_without_block_size_chunks_hold_chunk_bytes_of_ids(
    make_corpus: Callable[..., Path], tmp_path: Path
) -> None:
    docs = documents(3, 300)
    corpus = make_corpus(docs, vocab_size=50_257)
    summary = export_corpus(corpus, tmp_path / "out", "litdata", chunk_bytes=4096)
    index, chunks = read_chunks(tmp_path / "out")
    assert all(chunk["dim"] == 2048 for chunk in index["chunks"][:-1])
    np.testing.assert_array_equal(
        np.concatenate([item for chunk in chunks for item in chunk]), np.concatenate(docs)
    )
    blocks = streaming_blocks(tmp_path / "out", 512)  # 512 divides 2048: nothing lost
    assert len(blocks) == summary.tokens // 512


def test_litdata_export_is_deterministic(make_corpus: Callable[..., Path], tmp_path: Path) -> None:
    corpus = make_corpus(documents(4, 200), vocab_size=50_257, shard_max_bytes=7000)
    first = export_corpus(corpus, tmp_path / "a", "litdata", block_size=64, chunk_bytes=3000)
    export_corpus(corpus, tmp_path / "b", "litdata", block_size=64, chunk_bytes=3000)
    for name in first.files:
        if name != ".mixle-export.json":
            assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 50), min_size=1, max_size=50),
    block=st.integers(1, 40),
    chunk_blocks=st.integers(1, 6),
    shard_bytes=st.integers(2, 300),
)
def test_chunks_concatenate_to_the_corpus_token_stream(
    tmp_path_factory: pytest.TempPathFactory,
    lengths: list[int],
    block: int,
    chunk_blocks: int,
    shard_bytes: int,
) -> None:
    root = tmp_path_factory.mktemp("prop")
    rng = np.random.default_rng(sum(lengths) + block)
    docs = [rng.integers(0, 65_536, size=n) for n in lengths]
    with CorpusWriter(root / "c", vocab_size=65_536, shard_max_bytes=shard_bytes) as writer:
        writer.add_many(docs)
    export_corpus(
        root / "c", root / "out", "litdata", block_size=block, chunk_bytes=2 * block * chunk_blocks
    )
    index, chunks = read_chunks(root / "out")
    assert all(chunk["dim"] == block * chunk_blocks for chunk in index["chunks"][:-1])
    total = sum(lengths)
    flat = [item for chunk in chunks for item in chunk]
    got = np.concatenate(flat) if flat else np.empty(0, np.uint16)
    np.testing.assert_array_equal(got, np.concatenate(docs) if total else np.empty(0))
