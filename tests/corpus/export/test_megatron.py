"""Megatron export: byte layout, links, and reading back with real megatron-core."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.corpus import CorpusWriter, open_corpus
from mixle.corpus.export import export_corpus
from tests.corpus.export.conftest import documents, megatron


def read_idx(path: str) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """Parse a ``.idx`` by the layout in megatron-core's indexed_dataset.py."""
    raw = Path(path).read_bytes()
    magic, version, code, n_seq, n_doc = struct.unpack_from("<9sQBQQ", raw)
    assert magic == b"MMIDIDX\x00\x00" and version == 1
    lengths = np.frombuffer(raw, "<i4", n_seq, 34)
    pointers = np.frombuffer(raw, "<i8", n_seq, 34 + 4 * n_seq)
    doc_idx = np.frombuffer(raw, "<i8", n_doc, 34 + 12 * n_seq)
    assert len(raw) == 34 + 12 * n_seq + 8 * n_doc
    return code, lengths, pointers, doc_idx


@pytest.mark.parametrize(
    ("dtype", "vocab", "code", "itemsize"),
    [("uint16", 50_000, 8, 2), ("uint32", 100_000, 4, 4), ("int64", 2**40, 5, 8)],
)
def test_idx_layout_matches_megatron_spec(
    make_corpus: Callable[..., Path],
    tmp_path: Path,
    dtype: str,
    vocab: int,
    code: int,
    itemsize: int,
) -> None:
    docs = documents(0, 200, vocab=vocab)
    corpus = make_corpus(docs, dtype=dtype, shard_max_bytes=4000)
    summary = export_corpus(corpus, tmp_path / "out", "megatron")
    assert summary.dtype == {"uint32": "int32"}.get(dtype, dtype)
    index = 0
    for prefix in summary.prefixes:
        got_code, lengths, pointers, doc_idx = read_idx(prefix + ".idx")
        assert got_code == code
        np.testing.assert_array_equal(doc_idx, np.arange(lengths.shape[0] + 1))
        expected_pointers = (
            np.concatenate(([0], np.cumsum(lengths[:-1], dtype=np.int64))) * itemsize
        )
        np.testing.assert_array_equal(pointers, expected_pointers)
        tokens = np.fromfile(prefix + ".bin", dtype=np.dtype(summary.dtype).newbyteorder("<"))
        assert tokens.shape[0] == int(lengths.sum())
        for length, pointer in zip(lengths.tolist(), pointers.tolist(), strict=True):
            start = pointer // itemsize
            np.testing.assert_array_equal(tokens[start : start + length], docs[index])
            index += 1
    assert index == len(docs)


def test_token_files_are_hard_linked_not_copied(
    make_corpus: Callable[..., Path], tmp_path: Path
) -> None:
    corpus = make_corpus(documents(1, 300), vocab_size=50_257, shard_max_bytes=8000)
    manifest = open_corpus(corpus).manifest
    summary = export_corpus(corpus, tmp_path / "out", "megatron")
    assert summary.copied_bytes == 0
    assert summary.linked_bytes == open_corpus(corpus).num_tokens * 2
    names = [entry["tokens"] for entry in manifest["shards"]]
    assert len(summary.prefixes) == len(names) > 3
    for prefix, name in zip(summary.prefixes, names, strict=True):
        assert os.stat(prefix + ".bin").st_ino == os.stat(corpus / name).st_ino
    open_corpus(corpus, verify=True)  # the corpus is untouched


def test_uint32_corpus_with_ids_below_2_31_is_linked_as_int32(
    make_corpus: Callable[..., Path], tmp_path: Path
) -> None:
    docs = [np.array([0, 2**31 - 1, 70_000]), np.array([5])]
    corpus = make_corpus(docs)  # dtype from the data: uint32, vocab_size unknown
    assert open_corpus(corpus).dtype == np.uint32
    summary = export_corpus(corpus, tmp_path / "out", "megatron")
    assert summary.dtype == "int32" and summary.copied_bytes == 0
    code, _, _, _ = read_idx(summary.prefixes[0] + ".idx")
    assert code == 4
    np.testing.assert_array_equal(
        np.fromfile(summary.prefixes[0] + ".bin", "<i4"), [0, 2**31 - 1, 70_000, 5]
    )


def test_single_prefix_concatenates_every_shard(
    make_corpus: Callable[..., Path], tmp_path: Path
) -> None:
    docs = documents(2, 300)
    corpus = make_corpus(docs, vocab_size=50_257, shard_max_bytes=6000)
    summary = export_corpus(corpus, tmp_path / "out", "megatron", single=True)
    assert [os.path.basename(p) for p in summary.prefixes] == ["corpus"]
    assert summary.copied_bytes == open_corpus(corpus).num_tokens * 2
    assert summary.files == (".mixle-export.json", "corpus.bin", "corpus.idx")
    _, lengths, _, _ = read_idx(summary.prefixes[0] + ".idx")
    np.testing.assert_array_equal(lengths, [len(doc) for doc in docs])
    np.testing.assert_array_equal(
        np.fromfile(summary.prefixes[0] + ".bin", "<u2"), np.concatenate(docs)
    )


def test_single_prefix_of_a_one_shard_corpus_is_linked(
    make_corpus: Callable[..., Path], tmp_path: Path
) -> None:
    corpus = make_corpus(documents(3, 50), vocab_size=50_257)
    summary = export_corpus(corpus, tmp_path / "out", "megatron", single=True)
    assert summary.copied_bytes == 0 and summary.linked_bytes > 0


def test_shards_without_documents_get_no_prefix(tmp_path: Path) -> None:
    with CorpusWriter(tmp_path / "c", vocab_size=100, shard_max_bytes=4) as writer:
        writer.add_many([[1, 2], [], [3]])
    documents_ = open_corpus(tmp_path / "c")
    summary = export_corpus(documents_, tmp_path / "out", "megatron")
    assert sum(read_idx(p + ".idx")[1].shape[0] for p in summary.prefixes) == 3


def test_export_is_deterministic(make_corpus: Callable[..., Path], tmp_path: Path) -> None:
    corpus = make_corpus(documents(4, 200), vocab_size=50_257, shard_max_bytes=5000)
    first = export_corpus(corpus, tmp_path / "a", "megatron", single=True)
    export_corpus(corpus, tmp_path / "b", "megatron", single=True)
    for name in first.files:
        if name != ".mixle-export.json":
            assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 40), min_size=1, max_size=60),
    shard_bytes=st.integers(2, 200),
    single=st.booleans(),
)
def test_every_document_is_exported_once_in_order(
    tmp_path_factory: pytest.TempPathFactory, lengths: list[int], shard_bytes: int, single: bool
) -> None:
    root = tmp_path_factory.mktemp("prop")
    rng = np.random.default_rng(len(lengths) * 1000 + shard_bytes)
    docs = [rng.integers(0, 65_536, size=n) for n in lengths]
    with CorpusWriter(root / "c", vocab_size=65_536, shard_max_bytes=shard_bytes) as writer:
        writer.add_many(docs)
    summary = export_corpus(root / "c", root / "out", "megatron", single=single)
    got = []
    for prefix in summary.prefixes:
        _, doc_lengths, pointers, _ = read_idx(prefix + ".idx")
        tokens = np.fromfile(prefix + ".bin", "<u2")
        got += [tokens[p // 2 : p // 2 + n] for p, n in zip(pointers, doc_lengths, strict=True)]
    assert len(got) == len(docs)
    for have, want in zip(got, docs, strict=True):
        np.testing.assert_array_equal(have, want)


@pytest.mark.parametrize(
    ("dtype", "vocab"), [("uint16", 50_000), ("uint32", 100_000), ("int64", 2**40)]
)
def test_megatron_core_indexed_dataset_reads_every_document(
    make_corpus: Callable[..., Path], tmp_path: Path, dtype: str, vocab: int
) -> None:
    core = megatron()
    docs = documents(5, 400, vocab=vocab)
    corpus = make_corpus(docs, dtype=dtype, shard_max_bytes=20_000)
    for single in (False, True):
        summary = export_corpus(corpus, tmp_path / f"out-{single}", "megatron", single=single)
        index = 0
        for prefix in summary.prefixes:
            dataset = core.datasets.indexed_dataset.IndexedDataset(prefix)
            assert dataset.index.dtype == np.dtype(summary.dtype)
            np.testing.assert_array_equal(dataset.document_indices, np.arange(len(dataset) + 1))
            for position in range(len(dataset)):
                np.testing.assert_array_equal(dataset[position], docs[index])
                index += 1
        assert index == len(docs)


def test_megatron_core_gpt_dataset_samples_are_the_exported_tokens(
    make_corpus: Callable[..., Path], tmp_path: Path
) -> None:
    """Build Megatron's training datasets (a blend of every exported prefix, as
    ``--data-path`` does) and check each sample against the corpus."""
    core = megatron()
    datasets = core.datasets
    docs = documents(6, 600)
    corpus = make_corpus(docs, vocab_size=50_257, shard_max_bytes=40_000)
    summary = export_corpus(corpus, tmp_path / "out", "megatron")
    assert len(summary.prefixes) > 2
    sequence_length = 64
    config = datasets.gpt_dataset.GPTDatasetConfig(
        random_seed=1234,
        sequence_length=sequence_length,
        blend=(list(summary.prefixes), None),
        split="1,0,0",
        tokenizer=core.tokenizers.text.libraries.null_tokenizer.NullTokenizer(50_257),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        path_to_cache=str(tmp_path / "megatron-cache"),
    )
    builder = datasets.blended_megatron_dataset_builder.BlendedMegatronDatasetBuilder
    # BlendedDataset asks torch.distributed for the rank: a real one-process gloo group.
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1
    )
    try:
        train, valid, test = builder(
            datasets.gpt_dataset.GPTDataset, [None, None, None], lambda: True, config
        ).build()
    finally:
        torch.distributed.destroy_process_group()
    assert valid is None and test is None
    starts = np.cumsum([0] + [read_idx(p + ".idx")[1].shape[0] for p in summary.prefixes])
    total = 0
    for number, gpt in enumerate(train.datasets):
        assert isinstance(gpt, datasets.gpt_dataset.GPTDataset)
        local = docs[starts[number] : starts[number + 1]]
        stream = np.concatenate([local[d] for d in gpt.document_index])
        assert len(gpt) == (stream.shape[0] - 1) // sequence_length
        for position in range(len(gpt)):
            sample = gpt[position]
            first = int(gpt.shuffle_index[position]) * sequence_length
            text = stream[first : first + sequence_length + 1]
            np.testing.assert_array_equal(sample["tokens"].numpy(), text[:-1])
            np.testing.assert_array_equal(sample["labels"].numpy(), text[1:])
        total += len(gpt)
    assert len(train) == total
    for position in range(0, len(train), 7):  # the blend hands out those same samples
        sample = train[position]
        source = train.datasets[int(train.dataset_index[position])]
        expected = source[int(train.dataset_sample_index[position])]
        assert int(sample["dataset_id"]) == int(train.dataset_index[position])
        assert torch.equal(sample["tokens"], expected["tokens"])


def test_corpus_without_local_token_files_is_exported_through_the_reader(
    make_corpus: Callable[..., Path], tmp_path: Path
) -> None:
    """A zarr corpus has no raw .tokens files: its shards are decoded and copied."""
    from mixle.corpus import convert_corpus

    corpus = make_corpus(documents(7, 200), vocab_size=50_257, shard_max_bytes=6000)
    convert_corpus(corpus, tmp_path / "zarr", layout="zarr")
    raw = export_corpus(corpus, tmp_path / "from-raw", "megatron")
    zarr = export_corpus(
        tmp_path / "zarr", tmp_path / "from-zarr", "megatron", cache_dir=tmp_path / "cache"
    )
    assert zarr.linked_bytes == 0 and zarr.copied_bytes == raw.linked_bytes > 0
    assert zarr.files == raw.files
    for name in raw.files:
        if name != ".mixle-export.json":
            assert (tmp_path / "from-raw" / name).read_bytes() == (
                tmp_path / "from-zarr" / name
            ).read_bytes()
