"""add_sidecars / ``mixle sidecars``: fix a corpus that lacks its scale sidecars in one
command; ``mixle verify`` checks them and ``mixle inspect`` says whether they are there."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mixle.corpus.format.block_offsets as block_module
import mixle.corpus.format.document_offsets as document_module
from mixle.cli import main
from mixle.corpus import (
    BLOCK_OFFSETS_NAME,
    DOCUMENT_OFFSETS_NAME,
    CorpusWriter,
    add_sidecars,
    convert_corpus,
    open_corpus,
    upload_corpus,
    verify_corpus,
)
from mixle.errors import ArgumentError
from tests.corpus._remote_fixtures import *  # noqa: F403

SIDECARS = (BLOCK_OFFSETS_NAME, DOCUMENT_OFFSETS_NAME)
LENGTHS = np.random.default_rng(4).integers(0, 6, 9000)


def _write(path: Path, **flags: Any) -> Path:
    tokens = np.random.default_rng(5).integers(0, 300, int(LENGTHS.sum()))
    with CorpusWriter(path, vocab_size=300, shard_max_bytes=3000, durable=False, **flags) as writer:
        writer.add_flat(tokens, LENGTHS)
    return path


@pytest.fixture
def bare(tmp_path: Path) -> Path:
    """A corpus of 9,000 documents in many shards, without sidecars."""
    return _write(tmp_path / "bare", block_offsets=False, document_offsets=False)


@pytest.fixture
def full(tmp_path: Path) -> Path:
    """The same documents, both sidecars written by the writer."""
    return _write(tmp_path / "full", block_offsets=True, document_offsets=True)


@pytest.fixture
def low_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(block_module, "BLOCK_OFFSETS_MIN_DOCUMENTS", 1)
    monkeypatch.setattr(document_module, "DOCUMENT_OFFSETS_MIN_SHARDS", 2)


def _files(path: Path) -> dict[str, bytes]:
    return {name: (path / name).read_bytes() for name in SIDECARS if (path / name).exists()}


def test_forced_sidecars_equal_the_writers_and_keep_the_fingerprint(bare: Path, full: Path) -> None:
    before = open_corpus(bare)
    result = add_sidecars(bare, block_offsets=True, document_offsets=True)
    assert result["written"] == list(SIDECARS) and result["removed"] == []
    assert _files(bare) == _files(full)
    after = open_corpus(bare)
    assert after.fingerprint == before.fingerprint
    assert after.parsed_manifest.metadata == open_corpus(full).parsed_manifest.metadata
    assert verify_corpus(bare).ok


def test_default_adds_what_the_shape_calls_for_and_keeps_the_rest(
    bare: Path, full: Path, low_thresholds: None
) -> None:
    assert add_sidecars(bare)["written"] == list(SIDECARS)
    assert _files(bare) == _files(full)
    again = add_sidecars(bare)  # nothing left to do
    assert again["written"] == [] and again["removed"] == []


def test_default_on_a_small_corpus_writes_nothing(bare: Path) -> None:
    manifest = (bare / "manifest.json").read_bytes()
    assert add_sidecars(bare) == {
        "block_offsets": None,
        "document_offsets": None,
        "written": [],
        "removed": [],
    }
    assert (bare / "manifest.json").read_bytes() == manifest


def test_false_removes_one_and_keeps_the_other(full: Path) -> None:
    result = add_sidecars(full, block_offsets=False)
    assert result["removed"] == [BLOCK_OFFSETS_NAME] and result["block_offsets"] is None
    assert result["document_offsets"] is not None
    assert not (full / BLOCK_OFFSETS_NAME).exists() and (full / DOCUMENT_OFFSETS_NAME).exists()
    assert "block_offsets" not in open_corpus(full).parsed_manifest.metadata
    assert verify_corpus(full).ok


def test_a_bad_flag_is_refused_before_anything_is_read(bare: Path) -> None:
    with pytest.raises(ArgumentError, match=r"`block_offsets` must be True, False or None\. Got 1"):
        add_sidecars(bare, block_offsets=1)  # type: ignore[arg-type]


def test_cli_check_lists_then_adds_then_verify_and_inspect_report(
    bare: Path, full: Path, low_thresholds: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sidecars", str(bare), "--check"]) == 1
    out = capsys.readouterr().out
    assert "MISSING (recommended) block_offsets.bin" in out and f"mixle sidecars {bare}" in out
    assert main(["verify", str(bare)]) == 0  # a missing sidecar is no corruption
    assert f"note  {BLOCK_OFFSETS_NAME} missing" in capsys.readouterr().out
    assert main(["inspect", str(bare)]) == 0
    assert (
        "missing, recommended: block_offsets.bin, document_offsets.bin" in capsys.readouterr().out
    )
    assert main(["sidecars", str(bare)]) == 0
    assert capsys.readouterr().out.split() == [
        "wrote",
        BLOCK_OFFSETS_NAME,
        "wrote",
        DOCUMENT_OFFSETS_NAME,
    ]
    assert _files(bare) == _files(full)
    assert main(["sidecars", str(bare), "--check", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["missing"] == [] and status["sidecars"]["block_offsets"]["present"]
    assert main(["verify", str(bare), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["sidecars"]["document_offsets"] == {
        "file": DOCUMENT_OFFSETS_NAME,
        "present": True,
        "recommended": True,
        "ok": True,
    }
    assert main(["inspect", str(bare)]) == 0
    assert "sidecars    block_offsets.bin, document_offsets.bin\n" in capsys.readouterr().out


def test_verify_fails_on_a_damaged_sidecar_and_says_which(
    full: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = bytearray((full / BLOCK_OFFSETS_NAME).read_bytes())
    data[-1] ^= 1
    (full / BLOCK_OFFSETS_NAME).write_bytes(bytes(data))
    assert main(["verify", str(full)]) == 1
    out = capsys.readouterr().out
    assert BLOCK_OFFSETS_NAME in out and "CORRUPT" in out
    assert f"ok    {DOCUMENT_OFFSETS_NAME}" in out
    assert main(["sidecars", str(full), "--block-offsets"]) == 0  # the fix: rewritten
    capsys.readouterr()
    assert main(["verify", str(full)]) == 0


def test_cli_errors_are_one_line_and_exit_2(
    tmp_path: Path, bare: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sidecars", str(tmp_path / "nothing")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert main(["sidecars", str(bare), "--check", "--block-offsets"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--check writes nothing" in err and len(err.splitlines()) == 1


def test_a_zarr_round_trip_regains_the_sidecars(
    tmp_path: Path, full: Path, low_thresholds: None
) -> None:
    convert_corpus(full, tmp_path / "z.zarr", layout="zarr")
    convert_corpus(tmp_path / "z.zarr", tmp_path / "raw", layout="raw")
    assert _files(tmp_path / "raw") == _files(full)
    assert open_corpus(tmp_path / "raw").fingerprint == open_corpus(full).fingerprint
    assert verify_corpus(tmp_path / "raw").ok


def test_add_sidecars_to_a_corpus_in_s3(
    tmp_path: Path, bare: Path, full: Path, s3: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"s3://corpora/{uuid.uuid4().hex}"
    upload_corpus(bare, url, s3)
    endpoint = s3["client_kwargs"]["endpoint_url"]
    options = ["--storage-option", f"client_kwargs.endpoint_url={endpoint}"]
    for key in ("key", "secret"):
        if key in s3:
            options += ["--storage-option", f"{key}={s3[key]}"]
    assert main(["sidecars", url, "--block-offsets", "--document-offsets", *options]) == 0
    capsys.readouterr()
    from tests.corpus.ingestion.distributed_helpers import s3_objects

    objects = s3_objects(url, s3)
    assert {name: objects[name] for name in SIDECARS} == _files(full)
    assert objects["manifest.json"] == (full / "manifest.json").read_bytes()
    assert verify_corpus(url, storage_options=s3, cache_dir=str(tmp_path / "cache")).ok
