"""Bad input: clear errors before anything is written; never a partial export."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from mixle.corpus import commit_manifest, open_corpus
from mixle.corpus.export import export_corpus
from mixle.errors import ArgumentError, CorpusError, CorpusExistsError, ExportError
from tests.corpus.export.conftest import documents


def entries_in(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


def sparse_corpus(directory: Path, shards: list[tuple[int, int]]) -> Path:
    """A valid corpus of ``(num_documents, num_tokens)`` shards whose files are sparse.

    Every document but the last of a shard is empty; the last holds all its tokens
    (zeros). The files are created with ``truncate``, so a 2**31-document shard costs
    no disk. Their SHA-256 is not computed (hashing 16 GiB of holes takes a minute);
    opening without ``verify`` never reads it, and neither does an export that stops
    at its checks.
    """
    directory.mkdir()
    entries = []
    for number, (count, tokens) in enumerate(shards):
        names = (f"shard-{number:05d}.tokens", f"shard-{number:05d}.offsets")
        with open(directory / names[0], "wb") as handle:
            handle.truncate(2 * tokens)
        with open(directory / names[1], "wb") as handle:
            handle.write(struct.pack("<8sIIQQ", b"MIXLEOFS", 1, 1, count, tokens))
            handle.truncate(32 + 8 * (count + 1))  # offsets[0..count-1] = 0 (holes)
            handle.seek(32 + 8 * count)
            handle.write(struct.pack("<q", tokens))  # offsets[count] = tokens
        entries.append(
            {
                "tokens": names[0],
                "offsets": names[1],
                "num_documents": count,
                "num_tokens": tokens,
                "tokens_bytes": 2 * tokens,
                "offsets_bytes": 32 + 8 * (count + 1),
                "tokens_sha256": "0" * 64,
                "offsets_sha256": "0" * 64,
            }
        )
    commit_manifest(directory, entries, dtype="uint16")
    return directory


def test_existing_output_without_overwrite_is_refused_untouched(
    make_corpus: Callable[..., Path], tmp_path: Path
) -> None:
    corpus = make_corpus(documents(0, 50), vocab_size=50_257)
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    before = entries_in(tmp_path)
    for fmt in ("megatron", "litdata"):
        with pytest.raises(CorpusExistsError, match="overwrite") as caught:
            export_corpus(corpus, out, fmt)
        assert isinstance(caught.value, FileExistsError)
    assert entries_in(tmp_path) == before and entries_in(out) == ["keep.txt"]


def test_overwrite_replaces_a_previous_export_only(
    make_corpus: Callable[..., Path], tmp_path: Path
) -> None:
    corpus = make_corpus(documents(1, 80), vocab_size=50_257, shard_max_bytes=3000)
    out = tmp_path / "out"
    export_corpus(corpus, out, "megatron")
    summary = export_corpus(corpus, out, "litdata", overwrite=True, block_size=16)
    assert "index.json" in summary.files and not any(n.endswith(".idx") for n in summary.files)
    assert entries_in(tmp_path) == sorted([os.path.basename(corpus), "out"])

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "data.txt").write_text("not an export")
    with pytest.raises(CorpusExistsError, match="not a mixle export"):
        export_corpus(corpus, foreign, "megatron", overwrite=True)
    assert entries_in(foreign) == ["data.txt"]

    empty = tmp_path / "empty"
    empty.mkdir()
    assert export_corpus(corpus, empty, "megatron", overwrite=True).prefixes


def test_output_must_be_a_local_directory_other_than_the_corpus(
    make_corpus: Callable[..., Path],
) -> None:
    corpus = make_corpus(documents(2, 10), vocab_size=50_257)
    with pytest.raises(ArgumentError, match="is the corpus"):
        export_corpus(corpus, corpus, "megatron", overwrite=True)
    with pytest.raises(ArgumentError, match="local directory"):
        export_corpus(corpus, "s3://bucket/export", "megatron")
    open_corpus(corpus, verify=True)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"format": "webdataset"}, "`format` must be one of megatron, litdata"),
        ({"format": "megatron", "block_size": 128}, "`block_size` applies to format='litdata'"),
        ({"format": "litdata", "single": True}, "`single` applies to format='megatron'"),
        ({"format": "litdata", "block_size": 0}, "`block_size` must be a positive integer"),
        (
            {"format": "litdata", "chunk_bytes": 2**31},
            r"`chunk_bytes` must be in \[1, 1073741824\]",
        ),
        ({"format": "megatron", "single": 1}, "`single` must be a bool"),
    ],
)
def test_invalid_options_raise_value_errors_naming_the_argument(
    make_corpus: Callable[..., Path], tmp_path: Path, options: dict, message: str
) -> None:
    corpus = make_corpus(documents(3, 10), vocab_size=50_257)
    with pytest.raises(ValueError, match=message):
        export_corpus(corpus, tmp_path / "out", **options)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("vocab_size", [None, 2**32])
def test_uint32_id_above_int32_is_refused_before_writing(
    make_corpus: Callable[..., Path], tmp_path: Path, vocab_size: int | None
) -> None:
    docs = [np.array([1, 2, 3]), np.array([7, 2**31 - 1]), np.array([4, 5, 2**31, 6])]
    corpus = make_corpus(docs, dtype="uint32", vocab_size=vocab_size, shard_max_bytes=12)
    before = entries_in(tmp_path)
    with pytest.raises(
        ExportError, match=r"token id 2147483648 \(document 2, position 2\)"
    ) as caught:
        export_corpus(corpus, tmp_path / "out", "megatron")
    assert "shard-00002.tokens" in str(caught.value) and isinstance(caught.value, ValueError)
    assert entries_in(tmp_path) == before
    # LitData keeps uint32: the same corpus exports there.
    export_corpus(corpus, tmp_path / "lit", "litdata")


def test_more_than_int32_documents_in_a_prefix_is_refused(tmp_path: Path) -> None:
    corpus = sparse_corpus(tmp_path / "c", [(2**31, 5)])
    with pytest.raises(ExportError, match="2,147,483,648 documents"):
        export_corpus(corpus, tmp_path / "out", "megatron")
    assert entries_in(tmp_path) == ["c"]


def test_single_prefix_over_int32_documents_is_refused(tmp_path: Path) -> None:
    corpus = sparse_corpus(tmp_path / "c", [(2**30, 1), (2**30, 1)])
    with pytest.raises(ExportError, match="without --single"):
        export_corpus(corpus, tmp_path / "out", "megatron", single=True)
    assert entries_in(tmp_path) == ["c"]


def test_document_longer_than_int32_tokens_is_refused(tmp_path: Path) -> None:
    corpus = sparse_corpus(tmp_path / "c", [(1, 2**31)])
    with pytest.raises(ExportError, match=r"document 0 .* 2,147,483,648 tokens"):
        export_corpus(corpus, tmp_path / "out", "megatron")
    assert entries_in(tmp_path) == ["c"]


@pytest.mark.parametrize("fmt", ["megatron", "litdata"])
def test_failure_midway_leaves_no_output_and_no_staging(
    make_corpus: Callable[..., Path], tmp_path: Path, fmt: str
) -> None:
    corpus = make_corpus(documents(4, 300), vocab_size=50_257, shard_max_bytes=6000)
    documents_ = open_corpus(corpus)
    last = documents_.manifest["shards"][-1]["tokens"]
    os.unlink(corpus / last)  # the corpus loses a shard after it was opened
    with pytest.raises((OSError, CorpusError), match=last):
        export_corpus(documents_, tmp_path / "out", fmt, chunk_bytes=1000)
    assert entries_in(tmp_path) == [os.path.basename(corpus)]


def test_killed_export_never_leaves_an_output(
    make_corpus: Callable[..., Path], tmp_path: Path
) -> None:
    corpus = make_corpus(documents(5, 4000, max_len=1000), vocab_size=50_257)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "mixle.cli", "export", str(corpus), str(out)]
    process = subprocess.Popen(
        [*command, "--format", "litdata", "--chunk-bytes", "2048"],
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    deadline = time.monotonic() + 60
    staging: list[str] = []
    while time.monotonic() < deadline and process.poll() is None:
        staging = [n for n in os.listdir(tmp_path) if n.startswith(".out.mixle-export-")]
        if staging and len(os.listdir(tmp_path / staging[0])) >= 20:
            break
        time.sleep(0.005)
    assert process.poll() is None, "the export finished before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not out.exists()
    # A later export is not disturbed by the hidden leftovers.
    summary = export_corpus(corpus, out, "litdata")
    assert summary.tokens == open_corpus(corpus).num_tokens
