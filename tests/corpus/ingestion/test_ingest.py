"""Every input format round-trips through ``mixle.corpus.ingest``."""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.corpus import ingest, open_corpus, verify_corpus
from mixle.errors import ArgumentError, IngestError
from tests.corpus.ingest_helpers import (
    random_docs,
    read_all,
    write_jsonl,
    write_megatron,
)


def as_lists(documents: list[np.ndarray]) -> list[list[int]]:
    return [[int(x) for x in doc] for doc in documents]


def test_jsonl_round_trip_keeps_order_and_verifies(tmp_path: Path) -> None:
    docs = random_docs(0, 300)
    source = write_jsonl(tmp_path / "a.jsonl", docs)
    summary = ingest(source, tmp_path / "out", unit_size=2048, shard_size=512)
    assert read_all(tmp_path / "out") == as_lists(docs)
    assert summary.documents == 300 and summary.tokens == sum(len(d) for d in docs)
    assert summary.units > 3 and summary.shards >= summary.units
    assert summary.dtype == "uint16" and summary.skipped == 0
    assert not verify_corpus(tmp_path / "out").errors
    assert not (tmp_path / "out" / ".mixle-ingest").exists()


def test_jsonl_tokens_field_gzip_and_multiple_inputs_in_order(tmp_path: Path) -> None:
    first, second = random_docs(1, 20), random_docs(2, 30)
    write_jsonl(tmp_path / "b.jsonl", second, key="tokens")
    with gzip.open(tmp_path / "a.jsonl.gz", "wt") as handle:
        for doc in first:
            handle.write(json.dumps({"tokens": doc.tolist()}) + "\n")
    # Inputs keep the given order (b before a); blank lines are ignored.
    with open(tmp_path / "b.jsonl", "a") as handle:
        handle.write("\n")
    ingest([tmp_path / "b.jsonl", tmp_path / "a.jsonl.gz"], tmp_path / "out")
    assert read_all(tmp_path / "out") == as_lists(second + first)


def test_directory_input_is_sorted_and_custom_field(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    parts = [random_docs(seed, 5) for seed in range(3)]
    for name, docs in zip(["c.jsonl", "a.jsonl", "b.jsonl"], parts, strict=True):
        write_jsonl(folder / name, docs, key="ids")
    (folder / "README").write_text("not an input")
    ingest(folder, tmp_path / "out", field="ids")
    assert read_all(tmp_path / "out") == as_lists(parts[1] + parts[2] + parts[0])


@pytest.mark.skipif(importlib.util.find_spec("zstandard") is None, reason="zstandard absent")
def test_jsonl_zst_round_trip(tmp_path: Path) -> None:
    import zstandard

    docs = random_docs(3, 50)
    data = "".join(json.dumps({"input_ids": d.tolist()}) + "\n" for d in docs).encode()
    (tmp_path / "a.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(data))
    ingest(tmp_path / "a.jsonl.zst", tmp_path / "out")
    assert read_all(tmp_path / "out") == as_lists(docs)


def test_jsonl_zst_without_zstandard_gives_install_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "zstandard", None)  # makes `import zstandard` fail
    (tmp_path / "a.jsonl.zst").write_bytes(b"\x28\xb5\x2f\xfd")
    with pytest.raises(IngestError, match=r"mixle\[zstd\]"):
        ingest(tmp_path / "a.jsonl.zst", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_parquet_list_column_round_trip_across_row_groups(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    parquet = pytest.importorskip("pyarrow.parquet")
    docs = random_docs(4, 100, vocab=70000)
    table = pa.table({"input_ids": [d.tolist() for d in docs], "n": list(range(100))})
    parquet.write_table(table, tmp_path / "a.parquet", row_group_size=30)
    summary = ingest(tmp_path / "a.parquet", tmp_path / "out")
    assert read_all(tmp_path / "out") == as_lists(docs)
    assert summary.units == 4 and summary.dtype == "uint32"


def test_parquet_text_column_with_bytes_tokenizer(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    parquet = pytest.importorskip("pyarrow.parquet")
    parquet.write_table(pa.table({"text": ["hé", "", "abc"]}), tmp_path / "t.parquet")
    ingest(tmp_path / "t.parquet", tmp_path / "out", tokenizer="bytes", append_eos=300)
    assert read_all(tmp_path / "out") == [[104, 195, 169, 300], [300], [97, 98, 99, 300]]


def test_npy_directory_one_document_per_file(tmp_path: Path) -> None:
    docs = random_docs(5, 12)
    folder = tmp_path / "docs"
    folder.mkdir()
    for index, doc in enumerate(docs):
        np.save(folder / f"{index:03d}.npy", doc.astype(np.int32))
    summary = ingest(folder, tmp_path / "out", unit_size=200)
    assert read_all(tmp_path / "out") == as_lists(docs)
    assert summary.units > 1


@pytest.mark.parametrize("layout", ["npz", "npz-compressed", "pair"])
def test_flat_tokens_and_offsets_round_trip(tmp_path: Path, layout: str) -> None:
    docs = random_docs(6, 200)
    tokens = np.concatenate(docs).astype(np.uint16)
    offsets = np.concatenate(([0], np.cumsum([len(d) for d in docs]))).astype(np.int64)
    if layout == "npz":
        np.savez(tmp_path / "flat.npz", tokens=tokens, offsets=offsets)
        source = tmp_path / "flat.npz"
    elif layout == "npz-compressed":
        np.savez_compressed(tmp_path / "flat.npz", tokens=tokens, offsets=offsets)
        source = tmp_path / "flat.npz"
    else:
        np.save(tmp_path / "flat.tokens.npy", tokens)
        np.save(tmp_path / "flat.offsets.npy", offsets)
        source = tmp_path
    summary = ingest(source, tmp_path / "out", unit_size=1000, shard_size=1000)
    assert read_all(tmp_path / "out") == as_lists(docs)
    assert summary.units > 3


def test_flat_offsets_must_cover_tokens(tmp_path: Path) -> None:
    np.savez(tmp_path / "bad.npz", tokens=np.arange(10), offsets=np.array([0, 4, 9]))
    with pytest.raises(IngestError, match=r"bad\.npz.*offsets.*len\(tokens\) = 10"):
        ingest(tmp_path / "bad.npz", tmp_path / "out")


@pytest.mark.parametrize("dtype", [np.uint16, np.int32, np.uint8])
def test_megatron_pair_written_from_spec_round_trips(tmp_path: Path, dtype: type) -> None:
    rng = np.random.default_rng(7)
    high = 250 if dtype is np.uint8 else 30000
    documents = [
        [rng.integers(0, high, size=int(n)) for n in rng.integers(0, 20, size=rng.integers(1, 4))]
        for _ in range(150)
    ]
    documents[3] = []  # a document without sequences
    prefix = write_megatron(tmp_path / "corpus_text_document", documents, np.dtype(dtype))
    summary = ingest(str(prefix), tmp_path / "out", unit_size=256, shard_size=256)
    expected = [[int(x) for seq in doc for x in seq] for doc in documents]
    assert read_all(tmp_path / "out") == expected
    assert summary.units > 3
    # Naming either file of the pair works too.
    ingest(f"{prefix}.idx", tmp_path / "out2")
    assert read_all(tmp_path / "out2") == expected


def test_megatron_bad_magic_names_the_index(tmp_path: Path) -> None:
    (tmp_path / "x.bin").write_bytes(b"")
    (tmp_path / "x.idx").write_bytes(b"NOTANIDX" + bytes(40))
    with pytest.raises(IngestError, match=r"x\.idx: not a Megatron-LM index"):
        ingest(tmp_path / "x.bin", tmp_path / "out")


def test_text_files_and_paragraphs_with_bytes_tokenizer(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("first para\nline two\n\n\nsecond\n")
    (tmp_path / "b.txt").write_text("héllo")
    ingest(tmp_path, tmp_path / "files")
    assert [bytes(d).decode() for d in read_all(tmp_path / "files")] == [
        "first para\nline two\n\n\nsecond\n",
        "héllo",
    ]
    ingest(tmp_path / "a.txt", tmp_path / "paras", split="paragraphs", append_eos=0)
    assert read_all(tmp_path / "paras") == [
        [*b"first para\nline two", 0],
        [*b"second", 0],
    ]


def test_hf_tokenizer_missing_package_gives_install_hint(tmp_path: Path) -> None:
    if importlib.util.find_spec("tokenizers") is not None:
        pytest.skip("tokenizers is installed")
    (tmp_path / "tokenizer.json").write_text("{}")
    write_jsonl(tmp_path / "a.jsonl", [])
    with pytest.raises(IngestError, match=r"pip install 'mixle\[tokenizers\]'"):
        ingest(tmp_path / "a.jsonl", tmp_path / "out", tokenizer=str(tmp_path / "tokenizer.json"))


def test_unknown_extension_needs_input_format(tmp_path: Path) -> None:
    (tmp_path / "data.log").write_text("x")
    with pytest.raises(IngestError, match="--input-format"):
        ingest(tmp_path / "data.log", tmp_path / "out")
    ingest(tmp_path / "data.log", tmp_path / "out", input_format="text")
    assert read_all(tmp_path / "out") == [[120]]


def test_missing_input_and_bad_options_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="does not exist"):
        ingest(tmp_path / "nope.jsonl", tmp_path / "out")
    write_jsonl(tmp_path / "a.jsonl", [np.arange(3)])
    with pytest.raises(ArgumentError, match="`workers` must be a positive integer"):
        ingest(tmp_path / "a.jsonl", tmp_path / "out", workers=0)
    with pytest.raises(ArgumentError, match="`append_eos` must be below `vocab_size` 10"):
        ingest(tmp_path / "a.jsonl", tmp_path / "out", vocab_size=10, append_eos=10)
    with pytest.raises(ArgumentError, match="`dtype` must be one of"):
        ingest(tmp_path / "a.jsonl", tmp_path / "out", dtype="float32")


def test_manifest_records_source(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", random_docs(8, 10))
    ingest(str(tmp_path / "a.jsonl"), tmp_path / "out", vocab_size=1000, append_eos=999)
    source = open_corpus(tmp_path / "out").manifest["metadata"]["source"]
    assert source["inputs"] == [str(tmp_path / "a.jsonl")]
    assert source["tool"] == "mixle ingest" and source["version"]
    assert source["options"]["vocab_size"] == 1000
    assert source["options"]["append_eos"] == 999
    assert "workers" not in source["options"]


def test_vocab_size_fixes_dtype_and_append_eos(tmp_path: Path) -> None:
    docs = random_docs(9, 40)
    write_jsonl(tmp_path / "a.jsonl", docs)
    summary = ingest(tmp_path / "a.jsonl", tmp_path / "out", vocab_size=100_000, append_eos=99_999)
    assert summary.dtype == "uint32"
    assert read_all(tmp_path / "out") == [[*doc, 99_999] for doc in as_lists(docs)]


@settings(max_examples=15)  # each example fsyncs a corpus; the shared disk is slow
@given(
    st.lists(st.lists(st.integers(0, 2**33), max_size=12), max_size=25),
    st.integers(64, 400),
)
def test_property_jsonl_round_trip_any_ids_and_unit_size(
    tmp_path_factory: pytest.TempPathFactory, documents: list[list[int]], unit_size: int
) -> None:
    folder = tmp_path_factory.mktemp("prop")
    write_jsonl(folder / "a.jsonl", [np.array(d, dtype=np.int64) for d in documents])
    summary = ingest(folder / "a.jsonl", folder / "out", unit_size=unit_size, shard_size=128)
    assert read_all(folder / "out") == documents
    widest = max((x for d in documents for x in d), default=0)
    assert summary.dtype == (
        "uint16" if widest < 2**16 else "uint32" if widest < 2**32 else "int64"
    )


def test_small_text_files_share_units_and_errors_name_the_file(tmp_path: Path) -> None:
    folder = tmp_path / "texts"
    folder.mkdir()
    for index in range(6):
        (folder / f"{index}.txt").write_text(f"doc {index}\n\npara\n")
    summary = ingest(folder, tmp_path / "out", unit_size=30, split="paragraphs")
    assert summary.units == 2 and summary.documents == 12  # 12-byte files, 3 per unit
    (folder / "3.txt").write_bytes(b"ok\n\nbad \xff byte\n")
    with pytest.raises(IngestError, match=r"3\.txt line 3: invalid UTF-8 at column 5"):
        ingest(folder, tmp_path / "out2", unit_size=30, split="paragraphs")


def test_fsspec_url_input(tmp_path: Path) -> None:
    fsspec = pytest.importorskip("fsspec")
    docs = random_docs(10, 30)
    text = "".join(json.dumps({"input_ids": d.tolist()}) + "\n" for d in docs)
    fs = fsspec.filesystem("memory")
    fs.pipe("/ingest-test/part-1.jsonl", text.encode())
    fs.pipe("/ingest-test/part-0.jsonl", b'{"input_ids": [7]}\n')
    try:
        ingest("memory://ingest-test/", tmp_path / "out", unit_size=256)
    finally:
        fs.rm("/ingest-test", recursive=True)
    assert read_all(tmp_path / "out") == [[7], *as_lists(docs)]


def test_text_through_a_hugging_face_tokenizer_json(tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    texts = ["the cat sat on the mat", "a dog sat on a log", "the cat and the dog"]
    words = sorted({word for text in texts for word in text.split()})
    vocab = {"[UNK]": 0, **{word: index + 1 for index, word in enumerate(words)}}
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    for index, text in enumerate(texts):
        (tmp_path / f"doc{index}.txt").write_text(text + " zebra")
    summary = ingest(
        sorted(str(path) for path in tmp_path.glob("doc*.txt")),
        tmp_path / "out",
        tokenizer=str(tmp_path / "tokenizer.json"),
        append_eos=len(vocab),
    )
    expected = [[*tokenizer.encode(text + " zebra").ids, len(vocab)] for text in texts]
    assert read_all(tmp_path / "out") == expected
    assert expected[0][-2] == 0  # the unknown word maps to [UNK], not dropped
    assert summary.documents == 3


def test_a_missing_tokenizer_file_is_rejected_before_any_work(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello")
    with pytest.raises(ArgumentError, match=r"nope\.json' does not exist"):
        ingest(str(tmp_path / "a.txt"), tmp_path / "out", tokenizer=str(tmp_path / "nope.json"))
    assert not (tmp_path / "out" / "manifest.json").exists()
