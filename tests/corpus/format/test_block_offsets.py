"""The block-offsets sidecar: written, read, checked, and never trusted blindly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.corpus import (
    BLOCK_OFFSETS_NAME,
    CorpusWriter,
    add_block_offsets,
    convert_corpus,
    open_corpus,
    verify_corpus,
)
from mixle.corpus.format.block_offsets import (
    BLOCK_OFFSETS_KEY,
    BLOCK_OFFSETS_STRIDE,
    BlockOffsetsRecorder,
    block_offsets_reference,
    encode_block_offsets,
)
from mixle.corpus.format.manifest import Manifest, write_manifest
from mixle.errors import ArgumentError, CorpusFormatError


def _cumulative(lengths: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def _write(path: Path, lengths: np.ndarray, **options: object) -> None:
    rng = np.random.default_rng(len(lengths))
    with CorpusWriter(path, vocab_size=1000, durable=False, **options) as writer:  # type: ignore[arg-type]
        half = len(lengths) // 2
        for part in (lengths[:half], lengths[half:]):
            writer.add_flat(rng.integers(0, 1000, int(part.sum())), part)


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(st.lists(st.integers(0, 5), max_size=20), max_size=6),
    stride=st.integers(1, 7),
)
def test_the_recorder_keeps_the_offset_before_every_stride_th_document(
    batches: list[list[int]], stride: int
) -> None:
    recorder = BlockOffsetsRecorder(stride)
    for batch in batches:
        lengths = np.array(batch, dtype=np.int64)
        recorder.record(lengths, np.cumsum(lengths))
    lengths = np.array([n for batch in batches for n in batch], dtype=np.int64)
    table = _cumulative(lengths)
    expected = table[np.minimum(np.arange(-(-len(lengths) // stride) + 1) * stride, len(lengths))]
    data = recorder.encode()
    assert np.array_equal(np.frombuffer(data, dtype="<i8", offset=48), expected)


def test_the_writer_writes_it_on_request_and_the_reader_answers_from_it(tmp_path: Path) -> None:
    lengths = np.random.default_rng(1).integers(0, 9, 3 * BLOCK_OFFSETS_STRIDE + 5)
    path = tmp_path / "c"
    _write(path, lengths, block_offsets=True, shard_max_bytes=20_000)
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["metadata"][BLOCK_OFFSETS_KEY]["stride"] == BLOCK_OFFSETS_STRIDE
    documents = open_corpus(path)
    assert documents.num_shards > 3
    boundaries = np.array([0, BLOCK_OFFSETS_STRIDE, 3 * BLOCK_OFFSETS_STRIDE, len(lengths)])
    # The shards' files are unreadable from here on: only the sidecar can answer.
    for name in path.glob("shard-*.offsets"):
        name.write_bytes(b"")
    assert np.array_equal(documents.token_offsets(boundaries), _cumulative(lengths)[boundaries])


def test_small_corpora_get_none_by_default_and_the_fallback_agrees(tmp_path: Path) -> None:
    lengths = np.random.default_rng(2).integers(0, 9, 2 * BLOCK_OFFSETS_STRIDE + 1)
    # The writer owns the metadata key: a stale one passed in is dropped.
    _write(tmp_path / "plain", lengths, metadata={BLOCK_OFFSETS_KEY: {"file": "x"}, "a": 1})
    _write(tmp_path / "sidecar", lengths, block_offsets=True)
    assert not (tmp_path / "plain" / BLOCK_OFFSETS_NAME).exists()
    assert open_corpus(tmp_path / "plain").parsed_manifest.metadata == {"a": 1}
    plain, sidecar = open_corpus(tmp_path / "plain"), open_corpus(tmp_path / "sidecar")
    assert plain.fingerprint == sidecar.fingerprint  # the sidecar is not part of the identity
    indices = np.arange(0, len(lengths) + 1, BLOCK_OFFSETS_STRIDE)
    assert np.array_equal(plain.token_offsets(indices), sidecar.token_offsets(indices))
    assert np.array_equal(sidecar.token_offsets(indices), _cumulative(lengths)[indices])


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 6), min_size=1, max_size=80),
    stride=st.integers(1, 9),
    picks=st.lists(st.integers(0, 10**6), max_size=30),
)
def test_add_block_offsets_answers_every_index_as_the_offsets_files_do(
    tmp_path_factory: pytest.TempPathFactory, lengths: list[int], stride: int, picks: list[int]
) -> None:
    path = tmp_path_factory.mktemp("c")
    sizes = np.array(lengths, dtype=np.int64)
    with CorpusWriter(path, vocab_size=50, durable=False, shard_max_bytes=24) as writer:
        writer.add_flat(np.ones(int(sizes.sum()), dtype=np.int64), sizes)
    reference = add_block_offsets(path, stride=stride)
    assert reference["stride"] == stride
    documents = open_corpus(path)
    table = _cumulative(sizes)
    aligned = np.append(np.arange(0, len(sizes), stride), len(sizes))
    assert np.array_equal(documents.token_offsets(aligned), table[aligned])
    chosen = np.array([pick % (len(sizes) + 1) for pick in picks], dtype=np.int64)
    assert np.array_equal(documents.token_offsets(chosen), table[chosen])
    assert np.array_equal(documents.token_offsets(np.sort(chosen)), table[np.sort(chosen)])
    assert verify_corpus(path, raise_errors=False).ok


def _with_sidecar(tmp_path: Path) -> tuple[Path, np.ndarray]:
    path = tmp_path / "c"
    lengths = np.random.default_rng(3).integers(1, 5, 40)
    _write(path, lengths, shard_max_bytes=30)
    add_block_offsets(path, stride=4)
    return path, np.arange(0, 41, 4)


@pytest.mark.parametrize("damage", ["flip", "truncate", "missing", "stale"])
def test_a_damaged_or_foreign_sidecar_is_refused_by_name(tmp_path: Path, damage: str) -> None:
    path, aligned = _with_sidecar(tmp_path)
    sidecar = path / BLOCK_OFFSETS_NAME
    data = bytearray(sidecar.read_bytes())
    if damage == "flip":
        data[-3] ^= 1
        sidecar.write_bytes(bytes(data))
    elif damage == "truncate":
        sidecar.write_bytes(bytes(data[:-8]))
    elif damage == "missing":
        sidecar.unlink()
    else:  # another corpus's sidecar (same documents, other lengths), digest forged too
        other = tmp_path / "other"
        _write(other, np.random.default_rng(4).integers(1, 5, 40), shard_max_bytes=30)
        add_block_offsets(other, stride=4)
        shutil.copyfile(other / BLOCK_OFFSETS_NAME, sidecar)
        manifest = json.loads((other / "manifest.json").read_text())
        reference = manifest["metadata"][BLOCK_OFFSETS_KEY]
        mine = open_corpus(path).parsed_manifest
        forged = Manifest.build(
            mine.shards,
            dtype=mine.dtype,
            vocab_size=mine.vocab_size,
            metadata={**mine.metadata, BLOCK_OFFSETS_KEY: reference},
        )
        write_manifest(path, forged)
    documents = open_corpus(path)
    with pytest.raises(CorpusFormatError, match=BLOCK_OFFSETS_NAME):
        documents.token_offsets(aligned)
    report = verify_corpus(path, raise_errors=False)
    assert not report.ok
    assert any(BLOCK_OFFSETS_NAME in str(error) for error in report.errors)


def test_a_raw_copy_keeps_the_sidecar_and_a_zarr_copy_names_none(tmp_path: Path) -> None:
    path, aligned = _with_sidecar(tmp_path)
    expected = open_corpus(path).token_offsets(aligned)
    convert_corpus(path, tmp_path / "raw", layout="raw")
    assert (tmp_path / "raw" / BLOCK_OFFSETS_NAME).exists()
    assert np.array_equal(open_corpus(tmp_path / "raw").token_offsets(aligned), expected)
    pytest.importorskip("zarr")
    convert_corpus(path, tmp_path / "zarr")
    copy = open_corpus(tmp_path / "zarr")
    assert BLOCK_OFFSETS_KEY not in copy.parsed_manifest.metadata
    assert copy.fingerprint == open_corpus(path).fingerprint
    assert np.array_equal(copy.token_offsets(aligned), expected)


def test_bad_arguments_are_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ArgumentError, match="block_offsets"):
        CorpusWriter(tmp_path / "c", block_offsets=1)  # type: ignore[arg-type]
    path, _ = _with_sidecar(tmp_path)
    with pytest.raises(ArgumentError, match="stride"):
        add_block_offsets(path, stride=0)


def test_verify_compares_every_value_with_the_offsets_files(tmp_path: Path) -> None:
    path, _ = _with_sidecar(tmp_path)
    documents = open_corpus(path)
    values = documents.token_offsets(np.append(np.arange(0, 40, 4), 40)).copy()
    # One value off but still between its neighbours (documents of 1..4 tokens: the
    # true value is at least 4 above the one before): well formed, digest resealed.
    values[5] = values[4] + 1
    data = encode_block_offsets(values, 40, 4)
    (path / BLOCK_OFFSETS_NAME).write_bytes(data)
    manifest = documents.parsed_manifest
    write_manifest(
        path,
        Manifest.build(
            manifest.shards,
            dtype=manifest.dtype,
            vocab_size=manifest.vocab_size,
            metadata={**manifest.metadata, BLOCK_OFFSETS_KEY: block_offsets_reference(data)},
        ),
    )
    report = verify_corpus(path, raise_errors=False)
    assert not report.ok
    assert any("differ from the shard's offsets file" in str(e) for e in report.errors)


@pytest.mark.parametrize("extra", [0, 5])
def test_every_boundary_in_order_is_answered_with_a_read_only_view(
    tmp_path: Path, extra: int
) -> None:
    lengths = np.random.default_rng(9).integers(0, 9, 4 * BLOCK_OFFSETS_STRIDE + extra)
    _write(tmp_path / "c", lengths, block_offsets=True)
    documents = open_corpus(tmp_path / "c")
    boundaries = np.minimum(
        np.arange(-(-len(lengths) // BLOCK_OFFSETS_STRIDE) + 1) * BLOCK_OFFSETS_STRIDE,
        len(lengths),
    )
    table = _cumulative(lengths)
    every = documents.token_offsets(boundaries)  # a plan's block boundaries: no copy
    assert np.array_equal(every, table[boundaries]) and not every.flags.writeable
    # As many indices, but not every entry in order: gathered into a fresh array.
    for picked in (boundaries[::-1], np.sort(np.append(boundaries[1:], boundaries[1]))):
        got = documents.token_offsets(picked)
        assert np.array_equal(got, table[picked]) and got.flags.writeable
