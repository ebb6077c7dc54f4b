"""CorpusWriter, ShardWriter and commit_manifest: validation, atomicity, roll-over."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from mixle.corpus import (
    CorpusWriter,
    ShardWriter,
    commit_manifest,
    open_corpus,
    verify_corpus,
    write_shard,
)
from mixle.errors import (
    ArgumentError,
    ArgumentTypeError,
    CorpusExistsError,
    CorpusFormatError,
    CorpusNotFoundError,
    TokenIdError,
)


def test_negative_id_names_document_and_position_and_commits_nothing(tmp_path: Path) -> None:
    path = tmp_path / "c"
    with (
        pytest.raises(TokenIdError, match=r"document 2 has token id -5 at position 1"),
        CorpusWriter(path, vocab_size=100, shard_max_bytes=8) as writer,
    ):
        writer.add_many([[1, 2, 3], [4, 5, 6], [7, -5]])
    assert not (path / "manifest.json").exists()
    assert os.listdir(path) == []


def test_id_at_vocab_size_is_rejected_with_its_position(tmp_path: Path) -> None:
    with CorpusWriter(tmp_path / "c", vocab_size=100) as writer:
        writer.add([1, 2])
        with pytest.raises(TokenIdError, match=r"document 1 has token id 100 at position 2"):
            writer.add(np.array([0, 99, 100], dtype=np.uint8))
        writer.add([3])
    documents = open_corpus(tmp_path / "c")
    assert [doc.tolist() for doc in documents] == [[1, 2], [3]]


def test_id_too_large_for_explicit_dtype_is_rejected(tmp_path: Path) -> None:
    with CorpusWriter(tmp_path / "c", dtype="uint16") as writer:
        with pytest.raises(TokenIdError, match=r"document 0 has token id 65536 at position 0"):
            writer.add([65536])
        writer.abort()
    assert not (tmp_path / "c" / "manifest.json").exists()


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([1.5], r"document 0 has fractional token id 1.5 at position 0"),
        ([float("nan")], r"document 0 has non-finite token id"),
        (["a"], r"document 0"),
        ([[1, 2]], r"document 0 must be a 1-D"),
        (np.array([2**64 - 1], dtype=np.uint64), r"outside the int64 range"),
    ],
)
def test_non_integer_documents_raise_value_errors(
    tmp_path: Path, document: object, message: str
) -> None:
    with CorpusWriter(tmp_path / "c") as writer:
        with pytest.raises(ValueError, match=message):
            writer.add(document)
        writer.abort()


def test_integral_floats_are_accepted_exactly(tmp_path: Path) -> None:
    with CorpusWriter(tmp_path / "c") as writer:
        writer.add([1.0, 2.0, 70000.0])
    assert open_corpus(tmp_path / "c")[0].tolist() == [1, 2, 70000]


def test_exception_inside_with_leaves_no_manifest_and_no_files(tmp_path: Path) -> None:
    path = tmp_path / "c"
    with (
        pytest.raises(RuntimeError, match="boom"),
        CorpusWriter(path, vocab_size=50, shard_max_bytes=16) as writer,
    ):
        writer.add_many([list(range(20))] * 10)
        raise RuntimeError("boom")
    assert os.listdir(path) == []
    with pytest.raises(CorpusNotFoundError):
        open_corpus(path)


def test_writer_dropped_without_commit_removes_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("mixle.corpus.format.writer._BATCH_TOKENS", 8)
    path = tmp_path / "c"
    writer = CorpusWriter(path, vocab_size=50, shard_max_bytes=16)
    writer.add_many([list(range(20))] * 10)
    assert os.listdir(path)
    del writer
    assert os.listdir(path) == []


def test_existing_corpus_requires_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "c"
    with CorpusWriter(path, shard_max_bytes=8) as writer:
        writer.add_many([[1, 2, 3, 4]] * 5)
    with pytest.raises(CorpusExistsError, match="overwrite=True"):
        CorpusWriter(path)
    with pytest.raises(FileExistsError):
        CorpusWriter(path)
    with CorpusWriter(path, overwrite=True) as writer:
        writer.add([9])
    documents = open_corpus(path, verify=True)
    assert [doc.tolist() for doc in documents] == [[9]]
    assert sorted(os.listdir(path)) == [
        "manifest.json",
        "shard-00000.offsets",
        "shard-00000.tokens",
    ]


def test_path_that_is_a_file_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(CorpusExistsError):
        CorpusWriter(tmp_path / "f")


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"vocab_size": 0}, ArgumentError),
        ({"vocab_size": 2.0}, ArgumentTypeError),
        ({"shard_max_bytes": 0}, ArgumentError),
        ({"dtype": "float32"}, ArgumentError),
        ({"dtype": "uint16", "vocab_size": 70000}, ArgumentError),
        ({"overwrite": 1}, ArgumentError),
        ({"metadata": {"x": 0.5}}, ArgumentError),
    ],
)
def test_invalid_arguments_raise_value_errors(
    tmp_path: Path, options: dict[str, object], error: type[Exception]
) -> None:
    with pytest.raises(error), CorpusWriter(tmp_path / "c", **options) as writer:  # type: ignore[arg-type]
        writer.add([1])
    assert not (tmp_path / "c" / "manifest.json").exists()


def test_oversized_document_gets_its_own_shard(tmp_path: Path) -> None:
    with CorpusWriter(tmp_path / "c", dtype="uint16", shard_max_bytes=10) as writer:
        writer.add_many([[1, 2], [3] * 50, [4], [5, 6]])
    documents = open_corpus(tmp_path / "c")
    counts = [entry["num_documents"] for entry in documents.manifest["shards"]]
    assert counts == [1, 1, 2]
    sizes = [entry["tokens_bytes"] for entry in documents.manifest["shards"]]
    assert sizes == [4, 100, 6]


def test_metadata_round_trips_and_manifest_is_plain_json(tmp_path: Path) -> None:
    metadata = {"source": {"files": ["a.jsonl"], "records": 3, "ok": True, "note": None}}
    with CorpusWriter(tmp_path / "c", metadata=metadata) as writer:
        writer.add([1])
    documents = open_corpus(tmp_path / "c")
    assert documents.manifest["metadata"] == metadata
    raw = json.loads((tmp_path / "c" / "manifest.json").read_text())
    assert raw["fingerprint"] == documents.fingerprint
    assert raw["format_version"] == 1


def test_fingerprint_changes_with_content_and_is_deterministic(tmp_path: Path) -> None:
    def build(name: str, docs: list[list[int]]) -> str:
        with CorpusWriter(tmp_path / name, vocab_size=10) as writer:
            writer.add_many(docs)
        return open_corpus(tmp_path / name).fingerprint

    assert build("a", [[1, 2], [3]]) == build("b", [[1, 2], [3]])
    assert build("a2", [[1, 2], [3]]) != build("c", [[1, 2], [4]])
    assert build("a3", [[1, 2], [3]]) != build("d", [[1], [2, 3]])


def test_shard_writers_and_commit_manifest_build_a_corpus(tmp_path: Path) -> None:
    """The ingest path: independent workers write shards, the parent commits."""
    entries = [
        write_shard(tmp_path, 1, [[5, 6], [7]], dtype="uint32", first_document=2),
        write_shard(tmp_path, 0, [[1], [], [2, 3]], dtype="uint32"),
    ]
    assert not (tmp_path / "manifest.json").exists()
    manifest = commit_manifest(
        tmp_path,
        [entries[1], entries[0]],
        dtype="uint32",
        vocab_size=100,
        metadata={"source": {"kind": "test"}},
    )
    assert manifest["num_documents"] == 5
    documents = open_corpus(tmp_path, verify=True)
    assert [doc.tolist() for doc in documents] == [[1], [], [2, 3], [5, 6], [7]]
    assert documents.manifest["metadata"]["source"] == {"kind": "test"}


def test_shard_writer_streams_validated_arrays(tmp_path: Path) -> None:
    with ShardWriter(tmp_path, 0, dtype="uint16") as shard:
        shard.write(np.array([1, 2, 3], dtype=np.uint16), [1, 2])
        shard.add_documents([[4, 5]], first_document=2)
        with pytest.raises(ArgumentError, match="add up to"):
            shard.write(np.array([1], dtype=np.uint16), [2])
        with pytest.raises(ArgumentError, match="uint16"):
            shard.write(np.array([1], dtype=np.int64), [1])
        entry = shard.commit()
    assert entry["num_documents"] == 3 and entry["num_tokens"] == 5
    commit_manifest(tmp_path, [entry], dtype="uint16")
    assert [doc.tolist() for doc in open_corpus(tmp_path)] == [[1], [2, 3], [4, 5]]


def test_shard_writer_error_leaves_no_files(tmp_path: Path) -> None:
    with pytest.raises(TokenIdError, match="document 7"):
        write_shard(tmp_path, 0, [[1], [70000]], dtype="uint16", first_document=6)
    assert os.listdir(tmp_path) == []


def test_commit_manifest_rejects_missing_or_resized_shard_files(tmp_path: Path) -> None:
    entry = write_shard(tmp_path, 0, [[1, 2]], dtype="uint16")
    with pytest.raises(CorpusFormatError, match="bytes on disk"):
        commit_manifest(tmp_path, [entry], dtype="uint16")  # fine first
        with open(tmp_path / entry["tokens"], "ab") as handle:
            handle.write(b"\0\0")
        commit_manifest(tmp_path, [entry], dtype="uint16")
    os.unlink(tmp_path / entry["tokens"])
    with pytest.raises(CorpusFormatError, match="missing"):
        commit_manifest(tmp_path, [entry], dtype="uint16")
    with pytest.raises(CorpusFormatError, match="tokens_bytes"):
        commit_manifest(tmp_path, [{**entry, "tokens_bytes": 3}], dtype="uint16")


def test_verify_corpus_reports_ok_for_a_fresh_corpus(tmp_path: Path) -> None:
    with CorpusWriter(tmp_path / "c", shard_max_bytes=8) as writer:
        writer.add_many([[1, 2, 3]] * 4)
    report = verify_corpus(tmp_path / "c")
    assert report.ok
    assert len(report.shards) == 4
    assert report.to_dict()["shards"][0]["ok"] is True


def test_background_hashing_never_sees_a_reused_caller_buffer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("mixle.corpus.format.writer._BATCH_TOKENS", 1000)
    monkeypatch.setattr("mixle.corpus.format.shard._THREAD_MIN_BYTES", 1)
    buffer = np.arange(5000, dtype=np.uint16)
    with CorpusWriter(tmp_path / "c", dtype="uint16", shard_max_bytes=4096) as writer:
        for value in range(6):
            writer.add(buffer)  # large enough to bypass the pending list
            buffer[:] = value
        writer.add_many([buffer] * 3)
        buffer[:] = 99
    assert verify_corpus(tmp_path / "c").ok
    documents = open_corpus(tmp_path / "c")
    np.testing.assert_array_equal(documents[0], np.arange(5000))
    assert [int(doc[0]) for doc in documents][1:] == [0, 1, 2, 3, 4, 5, 5, 5]
    with ShardWriter(tmp_path / "c", 99, dtype="uint16") as shard:
        for value in range(4):
            buffer[:] = value
            shard.write(buffer, [buffer.shape[0]])
        entry = shard.commit()
    commit_manifest(tmp_path / "c", [entry], dtype="uint16")
    documents = open_corpus(tmp_path / "c", verify=True)
    assert [int(doc[0]) for doc in documents] == [0, 1, 2, 3]


def test_add_many_keeps_every_document_before_the_invalid_one(tmp_path: Path) -> None:
    path = tmp_path / "c"
    with CorpusWriter(path, vocab_size=10) as writer:
        writer.add([1])
        with pytest.raises(TokenIdError, match=r"document 3 has token id 10 at position 2"):
            writer.add_many([[2], [3, 4], [5, 6, 10, -1], [7]])
        with pytest.raises(TokenIdError, match=r"document 4 has fractional"):
            writer.add_many([[8], [0.5]])
        with pytest.raises(TokenIdError, match=r"document 4 has token id -1 at position 0"):
            writer.add_many([np.array([-1, 99])])
        assert writer.num_documents == 4
    assert [doc.tolist() for doc in open_corpus(path)] == [[1], [2], [3, 4], [8]]


def test_empty_shards_in_a_manifest_are_skipped_by_readers(tmp_path: Path) -> None:
    entries = [
        write_shard(tmp_path, 0, [], dtype="uint16"),
        write_shard(tmp_path, 1, [[1, 2], [3]], dtype="uint16"),
        write_shard(tmp_path, 2, [], dtype="uint16"),
        write_shard(tmp_path, 3, [[4]], dtype="uint16"),
        write_shard(tmp_path, 4, [], dtype="uint16"),
    ]
    commit_manifest(tmp_path, entries, dtype="uint16")
    documents = open_corpus(tmp_path, verify=True)
    assert [documents[i].tolist() for i in range(-3, 3)] == [[1, 2], [3], [4]] * 2
    assert [doc.tolist() for doc in documents] == [[1, 2], [3], [4]]
    assert [doc.tolist() for doc in documents.take([2, 0])] == [[4], [1, 2]]
    np.testing.assert_array_equal(documents.lengths, [2, 1, 1])


def _helper_threads() -> set[str]:
    return {
        thread.name
        for thread in threading.enumerate()
        if thread.name.startswith(("mixle-flush", "mixle-sha256"))
    }


def test_durable_writer_flushes_behind_and_writes_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("mixle.corpus.format.writer._BATCH_TOKENS", 1000)
    monkeypatch.setattr("mixle.corpus.format.shard._THREAD_MIN_BYTES", 1)
    monkeypatch.setattr("mixle.corpus.format.shard._FLUSH_BYTES", 4096)
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(threading.current_thread().name)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    rng = np.random.default_rng(0)
    documents = [rng.integers(0, 5000, size=n, dtype=np.uint16) for n in rng.integers(1, 900, 60)]
    for durable in (True, False):
        with CorpusWriter(tmp_path / str(durable), vocab_size=5000, durable=durable) as writer:
            writer.add_many(documents)
    assert any(name.startswith("mixle-flush") for name in synced)
    assert not _helper_threads()
    durable_files = sorted(os.listdir(tmp_path / "True"))
    assert durable_files == sorted(os.listdir(tmp_path / "False"))
    for name in durable_files:
        assert (tmp_path / "True" / name).read_bytes() == (tmp_path / "False" / name).read_bytes()
    assert verify_corpus(tmp_path / "True").ok


def test_a_failed_background_flush_aborts_the_shard_and_publishes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("mixle.corpus.format.shard._FLUSH_BYTES", 1024)
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if threading.current_thread().name.startswith("mixle-flush"):
            raise OSError(5, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with (
        pytest.raises(OSError, match="Input/output error"),
        CorpusWriter(tmp_path / "c", dtype="uint16") as writer,
    ):
        writer.add_many([np.arange(2000, dtype=np.uint16)] * 3)
    assert os.listdir(tmp_path / "c") == []
    assert not _helper_threads()


def test_add_many_accepts_mixed_chunks_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("mixle.corpus.format.writer._CHUNK_DOCUMENTS", 3)
    documents: list[object] = [
        np.array([1, 2], dtype=np.int32),
        [3],
        np.array([4], dtype=np.uint64),
        np.array([], dtype=np.int64),
        (5, 6),
        np.array([7, 8, 9], dtype=np.uint16),
        np.array([10], dtype=np.int8),
    ]
    with CorpusWriter(tmp_path / "c", vocab_size=11) as writer:
        writer.add_many(iter(documents))
        with pytest.raises(TokenIdError, match=r"document 9 has token id 11 at position 0"):
            writer.add_many(iter([np.array([1]), np.array([2]), np.array([11]), np.array([3])]))
    expected = [[1, 2], [3], [4], [], [5, 6], [7, 8, 9], [10], [1], [2]]
    assert [doc.tolist() for doc in open_corpus(tmp_path / "c")] == expected


def test_add_many_holds_about_one_batch_of_a_generators_long_documents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("mixle.corpus.format.writer._BATCH_TOKENS", 10_000)
    produced = 0
    written: list[int] = []

    def documents() -> Iterator[np.ndarray]:
        nonlocal produced
        for index in range(200):
            produced += 1
            yield np.full(1_000 if index < 100 else 3_000, index % 7, dtype=np.uint16)

    with CorpusWriter(tmp_path / "c", dtype="uint16") as writer:
        real_add_batch = writer._add_batch

        def add_batch(arrays: list[np.ndarray]) -> None:
            # Documents taken from the generator but not yet written stay within ~2 batches.
            written.append(produced - writer.num_documents)
            real_add_batch(arrays)

        monkeypatch.setattr(writer, "_add_batch", add_batch)
        writer.add_many(documents())
    assert max(written) <= 2 * 10_000 // 1_000
    assert len(open_corpus(tmp_path / "c")) == 200
