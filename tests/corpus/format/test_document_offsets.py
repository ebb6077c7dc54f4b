"""The document-offsets sidecar: written, read chunk by chunk, and never trusted blindly
(a missing or damaged one falls back to the offsets files; ``verify`` reports it)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.corpus import (
    DOCUMENT_OFFSETS_NAME,
    CorpusWriter,
    add_document_offsets,
    convert_corpus,
    ingest,
    merge_corpora,
    open_corpus,
    verify_corpus,
)
from mixle.corpus.format.document_offsets import (
    DOCUMENT_OFFSETS_CHUNK,
    DOCUMENT_OFFSETS_KEY,
    DOCUMENT_OFFSETS_MIN_SHARDS,
    wants_document_offsets,
)
from mixle.corpus.format.manifest import Manifest, write_manifest
from mixle.data import StreamingCorpus
from mixle.errors import ArgumentError
from tests.corpus._servers import CorpusHTTPServer
from tests.corpus.ingest_helpers import write_jsonl

_HEADER = 48


def _cumulative(lengths: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def _write(path: Path, lengths: np.ndarray, **options: object) -> None:
    rng = np.random.default_rng(len(lengths))
    with CorpusWriter(path, vocab_size=1000, durable=False, **options) as writer:  # type: ignore[arg-type]
        writer.add_flat(rng.integers(0, 1000, int(lengths.sum())), lengths)


def _blank_offsets_files(path: Path) -> None:
    """From here on only the sidecar can answer (any offsets-file read fails; open the
    corpus first: a version-1 manifest's headers are checked on open)."""
    for name in path.glob("shard-*.offsets"):
        name.write_bytes(b"")


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 6), max_size=70),
    shard_tokens=st.integers(1, 30),
    chunk_bits=st.integers(0, 4),
    picks=st.lists(st.integers(0, 10**6), max_size=40),
)
def test_the_sidecar_answers_every_index_as_the_offsets_files_do(
    tmp_path_factory: pytest.TempPathFactory,
    lengths: list[int],
    shard_tokens: int,
    chunk_bits: int,
    picks: list[int],
) -> None:
    # Chunks of 1..16 values: corpora of 2^k - 1, 2^k and 2^k + 1 documents at every
    # chunk seam, indices on and between the boundaries the head answers.
    path = tmp_path_factory.mktemp("c")
    sizes = np.array(lengths, dtype=np.int64)
    _write(path, sizes, shard_max_bytes=2 * shard_tokens)
    add_document_offsets(path, chunk=1 << chunk_bits)
    plain_lengths = open_corpus(path).lengths
    documents = open_corpus(path)  # a version-1 manifest: headers checked on open
    _blank_offsets_files(path)
    table = _cumulative(sizes)
    chosen = np.array([pick % (len(sizes) + 1) for pick in picks], dtype=np.int64)
    for indices in (np.arange(len(sizes) + 1), chosen, np.sort(chosen), chosen[::-1]):
        assert np.array_equal(documents.token_offsets(indices), table[indices])
    boundaries = np.append(np.arange(0, len(sizes), 1 << chunk_bits), len(sizes))
    assert np.array_equal(documents.token_offsets(boundaries), table[boundaries])
    assert documents._document_offsets is not None  # it answered: the files are empty
    assert np.array_equal(documents.lengths, plain_lengths)


def test_the_writer_adds_it_to_corpora_of_many_small_shards(tmp_path: Path) -> None:
    assert wants_document_offsets(DOCUMENT_OFFSETS_MIN_SHARDS, 10 * DOCUMENT_OFFSETS_MIN_SHARDS)
    assert not wants_document_offsets(DOCUMENT_OFFSETS_MIN_SHARDS - 1, 10)
    assert not wants_document_offsets(2000, 4096 * 2000)  # shards of realistic size
    lengths = np.full(DOCUMENT_OFFSETS_MIN_SHARDS * 2, 3, dtype=np.int64)
    path = tmp_path / "many"
    _write(path, lengths, shard_max_bytes=12, metadata={DOCUMENT_OFFSETS_KEY: {"x": 1}})
    manifest = json.loads((path / "manifest.json").read_text())
    reference = manifest["metadata"][DOCUMENT_OFFSETS_KEY]  # the stale entry was replaced
    assert reference["chunk"] == DOCUMENT_OFFSETS_CHUNK
    assert reference["bytes"] == (path / DOCUMENT_OFFSETS_NAME).stat().st_size
    documents = open_corpus(path)
    assert documents.num_shards == DOCUMENT_OFFSETS_MIN_SHARDS
    assert np.array_equal(documents.token_offsets(np.arange(2049)), _cumulative(lengths))
    assert documents._document_offsets is not None
    assert verify_corpus(path, raise_errors=False).ok
    # Few shards, or the option off: none (and a stale entry dropped, not kept).
    _write(tmp_path / "few", lengths, metadata={DOCUMENT_OFFSETS_KEY: {"x": 1}, "a": 1})
    _write(tmp_path / "off", lengths, shard_max_bytes=12, document_offsets=False)
    for name in ("few", "off"):
        assert not (tmp_path / name / DOCUMENT_OFFSETS_NAME).exists()
        assert DOCUMENT_OFFSETS_KEY not in open_corpus(tmp_path / name).parsed_manifest.metadata
    assert open_corpus(tmp_path / "off").fingerprint == documents.fingerprint  # not identity
    with pytest.raises(ArgumentError, match="`document_offsets` must be True, False or None"):
        CorpusWriter(tmp_path / "bad", document_offsets="yes")  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match=r"`chunk` must be a power of two\. Got 3"):
        add_document_offsets(path, chunk=3)


def _with_sidecar(tmp_path: Path) -> tuple[Path, np.ndarray]:
    path = tmp_path / "c"
    lengths = np.random.default_rng(3).integers(0, 5, 300)
    _write(path, lengths, shard_max_bytes=16, document_offsets=True)
    add_document_offsets(path, chunk=16)  # 19 chunks: damage one, read the others
    return path, _cumulative(lengths)


def _flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0x40
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage",
    ["value", "boundary", "digest", "header", "truncated", "missing", "malformed"],
)
def test_a_damaged_or_missing_sidecar_falls_back_and_verify_reports_it(
    tmp_path: Path, damage: str
) -> None:
    path, table = _with_sidecar(tmp_path)
    sidecar = path / DOCUMENT_OFFSETS_NAME
    values_end = _HEADER + 8 * len(table)
    if damage == "value":
        _flip(sidecar, _HEADER + 8 * 40)  # document 40: chunk 2
    elif damage == "boundary":
        _flip(sidecar, values_end + 8 * 2)
    elif damage == "digest":
        _flip(sidecar, os.path.getsize(sidecar) - 1)
    elif damage == "header":
        _flip(sidecar, 24)
    elif damage == "truncated":
        sidecar.write_bytes(sidecar.read_bytes()[:-8])
    elif damage == "missing":
        sidecar.unlink()
    else:
        manifest = open_corpus(path).parsed_manifest
        metadata = {**manifest.metadata, DOCUMENT_OFFSETS_KEY: {"version": 1, "file": 3}}
        write_manifest(
            path,
            Manifest.build(
                manifest.shards, dtype=manifest.dtype, vocab_size=1000, metadata=metadata
            ),
        )
    documents = open_corpus(path)
    # Chunk 0 still reads from the sidecar where only chunk 2 is damaged; the damaged
    # chunk is then refused and every later answer comes from the offsets files.
    assert np.array_equal(documents.token_offsets(np.arange(10)), table[:10])
    assert np.array_equal(documents.token_offsets(np.arange(len(table))), table)
    assert documents._document_offsets is None
    assert np.array_equal(documents.token_offsets(np.arange(0, 300, 7)), table[0:300:7])
    assert np.array_equal(np.diff(table), open_corpus(path).lengths)
    report = verify_corpus(path, raise_errors=False)
    assert not report.ok
    assert any(DOCUMENT_OFFSETS_NAME in str(error) or DOCUMENT_OFFSETS_KEY in str(error)
               for error in report.errors)  # fmt: skip


def test_a_sidecar_of_another_version_is_ignored(tmp_path: Path) -> None:
    path, table = _with_sidecar(tmp_path)
    manifest = open_corpus(path).parsed_manifest
    future = {**manifest.metadata[DOCUMENT_OFFSETS_KEY], "version": 2, "layout": "new"}
    write_manifest(
        path,
        Manifest.build(
            manifest.shards,
            dtype=manifest.dtype,
            vocab_size=1000,
            metadata={**manifest.metadata, DOCUMENT_OFFSETS_KEY: future},
        ),
    )
    documents = open_corpus(path)
    assert np.array_equal(documents.token_offsets(np.arange(len(table))), table)
    assert documents._document_offsets is None
    assert verify_corpus(path, raise_errors=False).ok


def test_streams_are_the_same_with_and_without_the_sidecar(tmp_path: Path) -> None:
    lengths = np.random.default_rng(4).integers(1, 40, 3000)
    _write(tmp_path / "plain", lengths, shard_max_bytes=200, document_offsets=False)
    _write(tmp_path / "sidecar", lengths, shard_max_bytes=200, document_offsets=True)
    batches = []
    for name in ("plain", "sidecar"):
        documents = open_corpus(tmp_path / name)
        stream = StreamingCorpus(
            documents, rank=1, world_size=2, block=64, batch_size=3, layout="global", seed=5
        )
        iterator = iter(stream)
        batches.append([next(iterator) for _ in range(12)])
        assert (documents._document_offsets is not None) == (name == "sidecar")
    for plain, sidecar in zip(*batches, strict=True):
        for left, right in zip(plain, sidecar, strict=True):
            assert np.array_equal(np.asarray(left), np.asarray(right))


def test_a_raw_copy_keeps_the_sidecar_and_zarr_drops_it(tmp_path: Path) -> None:
    path, table = _with_sidecar(tmp_path)
    convert_corpus(path, tmp_path / "raw", layout="raw")
    assert (tmp_path / "raw" / DOCUMENT_OFFSETS_NAME).exists()
    raw = open_corpus(tmp_path / "raw")
    _blank_offsets_files(tmp_path / "raw")
    assert np.array_equal(raw.token_offsets(np.arange(301)), table)
    convert_corpus(path, tmp_path / "z", layout="zarr")
    zarr = open_corpus(tmp_path / "z", cache_dir=tmp_path / "cache")
    assert DOCUMENT_OFFSETS_KEY not in zarr.parsed_manifest.metadata
    assert np.array_equal(zarr.token_offsets(np.arange(301)), table)


def test_range_reads_fetch_chunks_of_the_sidecar_not_offsets_files(tmp_path: Path) -> None:
    path, table = _with_sidecar(tmp_path)
    with CorpusHTTPServer(str(path)) as server:
        documents = open_corpus(server.url, mode="range", retries=4, backoff=0.01)
        server.state.reset_counters()  # opening read every offsets header (version 1)
        picks = np.array([0, 5, 17, 150, 151, 299, 300], dtype=np.int64)
        assert np.array_equal(documents.token_offsets(picks), table[picks])
        assert np.array_equal(documents.token_offsets(np.arange(301)), table)
        offsets_gets = sum(
            count for name, count in server.state.gets.items() if name.endswith(".offsets")
        )
        assert offsets_gets == 0
        assert documents._document_offsets is not None


def test_a_merge_of_many_small_shards_gets_the_sidecar(tmp_path: Path) -> None:
    lengths = np.random.default_rng(6).integers(1, 4, 1100)
    _write(tmp_path / "a", lengths, shard_max_bytes=8, document_offsets=False)
    _write(tmp_path / "b", lengths[::-1].copy(), shard_max_bytes=8, document_offsets=False)
    merge_corpora([tmp_path / "a", tmp_path / "b"], tmp_path / "m")
    merged = open_corpus(tmp_path / "m")
    assert merged.num_shards >= DOCUMENT_OFFSETS_MIN_SHARDS
    assert DOCUMENT_OFFSETS_KEY in merged.parsed_manifest.metadata
    table = _cumulative(np.concatenate([lengths, lengths[::-1]]))
    assert np.array_equal(merged.token_offsets(np.arange(len(table))), table)
    assert merged._document_offsets is not None
    assert verify_corpus(tmp_path / "m", raise_errors=False).ok


def test_an_ingest_of_many_small_shards_publishes_the_sidecar(tmp_path: Path) -> None:
    documents = [np.arange(n % 3 + 1, dtype=np.int64) for n in range(2100)]
    write_jsonl(tmp_path / "in.jsonl", documents)
    ingest(tmp_path / "in.jsonl", tmp_path / "out", unit_size=8192, shard_size=8)
    corpus = open_corpus(tmp_path / "out")
    assert corpus.num_shards >= DOCUMENT_OFFSETS_MIN_SHARDS
    assert (tmp_path / "out" / DOCUMENT_OFFSETS_NAME).exists()
    table = _cumulative(np.array([len(document) for document in documents]))
    assert np.array_equal(corpus.token_offsets(np.arange(len(table))), table)
    assert corpus._document_offsets is not None
    assert verify_corpus(tmp_path / "out", raise_errors=False).ok


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 6), max_size=70),
    chunk_bits=st.integers(0, 4),
    runs=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 40)), max_size=12),
)
def test_the_sidecar_answers_runs_as_the_offsets_files_do(
    tmp_path_factory: pytest.TempPathFactory,
    lengths: list[int],
    chunk_bits: int,
    runs: list[tuple[int, int]],
) -> None:
    # Runs of 0..40 indices across chunk seams (chunks of 1..16 values), ending at the
    # count; only the sidecar can answer (the offsets files are empty).
    path = tmp_path_factory.mktemp("c")
    sizes = np.array(lengths, dtype=np.int64)
    _write(path, sizes, shard_max_bytes=6)
    add_document_offsets(path, chunk=1 << chunk_bits)
    documents = open_corpus(path)
    _blank_offsets_files(path)
    table = _cumulative(sizes)
    count = len(sizes) + 1
    picked = [(start % count, size) for start, size in runs]
    picked = [(start, min(size, count - start)) for start, size in picked]
    starts = np.array([start for start, _ in picked], dtype=np.int64)
    counts = np.array([size for _, size in picked], dtype=np.int64)
    indices = np.array([start + j for start, size in picked for j in range(size)], dtype=np.int64)
    got = documents.token_offset_runs(starts, counts)
    assert got.dtype == np.int64
    assert got.tolist() == table[indices].tolist()
    if documents.num_shards:  # it answered: the files are empty
        assert documents._document_offsets is not None


def test_token_offset_runs_check_the_sidecar_chunks_they_read(tmp_path: Path) -> None:
    path, table = _with_sidecar(tmp_path)  # 300 documents, chunks of 16
    with open(path / DOCUMENT_OFFSETS_NAME, "r+b") as handle:
        handle.seek(_HEADER + 8 * 200)  # a value inside chunk 12 (documents 192..208)
        handle.write(np.int64(3).tobytes())
    documents = open_corpus(path)
    assert documents.token_offset_runs([0, 100], [20, 60]).tolist() == [
        *table[:20], *table[100:160]
    ]  # fmt: skip
    assert documents._document_offsets is not None  # chunk 12 not read: not checked yet
    # The damaged chunk drops the sidecar; the offsets files answer, right.
    assert documents.token_offset_runs([190], [30]).tolist() == table[190:220].tolist()
    assert documents._document_offsets is None


@pytest.fixture(scope="module")
def many_small_shards(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, Path]:
    """1,024 shards of 2 documents of 4 tokens, without and with the sidecar."""
    root = tmp_path_factory.mktemp("many")
    lengths = np.full(2048, 4, dtype=np.int64)
    _write(root / "plain", lengths, shard_max_bytes=16, document_offsets=False)
    shutil.copytree(root / "plain", root / "sidecar")
    add_document_offsets(root / "sidecar")
    return {False: root / "plain", True: root / "sidecar"}


@pytest.mark.parametrize("sidecar", [True, False])
def test_a_first_batch_over_many_small_shards_opens_only_the_shards_it_reads(
    many_small_shards: dict[bool, Path], sidecar: bool
) -> None:
    """The blocks order's window (1,024 documents in 512 shards here) is placed from
    the sidecar or, without it, from the offsets files read in one lean pass: no shard
    is mapped but those whose documents the first batch reads. (A regression once
    mapped every shard of the window, one at a time: 3 s at 10^5 shards.)"""
    documents = open_corpus(many_small_shards[sidecar])
    assert documents.num_shards == 1024
    assert (DOCUMENT_OFFSETS_KEY in documents.parsed_manifest.metadata) == sidecar
    loaded: list[int] = []
    load = documents._load

    def counting(number: int) -> object:
        loaded.append(number)
        return load(number)

    documents._load = counting  # type: ignore[method-assign,assignment]
    stream = StreamingCorpus(
        documents,
        rank=0,
        world_size=1,
        block=16,
        batch_size=2,
        layout="global",
        seed=3,
        block_documents=64,
        window_blocks=16,
    )
    inputs = next(iter(stream))[0]
    # 2 rows of 17 tokens from documents of 4: at most 10 documents, one shard each.
    assert inputs.shape == (2, 16)
    assert 0 < len(set(loaded)) <= 10
    assert (documents._document_offsets is not None) == sidecar


@pytest.mark.parametrize("sidecar", [True, False])
def test_runs_over_many_small_shards_reach_the_count(
    many_small_shards: dict[bool, Path], sidecar: bool
) -> None:
    # Over 16 shards: the sidecar or the offsets files' lean pass answers, runs out of
    # order, one ending at the corpus's count (index 2048, past the last shard's start).
    documents = open_corpus(many_small_shards[sidecar])
    table = np.arange(0, 4 * 2049, 4, dtype=np.int64)
    starts, counts = np.array([1900, 0, 777, 5]), np.array([149, 300, 0, 1])
    assert documents.token_offset_runs(starts, counts).tolist() == [
        *table[1900:2049], *table[0:300], *table[5:6]
    ]  # fmt: skip
