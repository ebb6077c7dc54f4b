"""The zarr v3 layout: conversion both ways, detection, compression, publishing order, CLI."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from mixle.cli import main
from mixle.corpus import (
    CachedDocuments,
    ShardedDocuments,
    convert_corpus,
    open_corpus,
    publish_corpus,
    upload_corpus,
)
from mixle.corpus.storage.fs import filesystem
from mixle.corpus.storage.publish import stored_bytes
from mixle.errors import ArgumentError, CorpusExistsError, CorpusNotFoundError
from tests.corpus.conftest import random_documents

SAMPLE = Path(__file__).resolve().parents[3] / "shards" / "sample"


@pytest.fixture
def raw(make_corpus: object) -> Path:
    return make_corpus(random_documents(11, 300, max_len=80), shard_max_bytes=6000)  # type: ignore[operator]


def _same(left: ShardedDocuments, right: ShardedDocuments) -> None:
    assert len(left) == len(right)
    for a, b in zip(left, right, strict=True):
        np.testing.assert_array_equal(a, b)


def test_zarr_round_trip_keeps_documents_and_fingerprint(raw: Path, tmp_path: Path) -> None:
    manifest = convert_corpus(raw, tmp_path / "c.zarr", layout="zarr")
    zarr_docs = open_corpus(tmp_path / "c.zarr", cache_dir=tmp_path / "cache")
    assert isinstance(zarr_docs, CachedDocuments)
    assert zarr_docs.fingerprint == manifest["fingerprint"] == open_corpus(raw).fingerprint
    _same(zarr_docs, open_corpus(raw))
    convert_corpus(
        tmp_path / "c.zarr",
        tmp_path / "back",
        layout="raw",
        source_options={"cache_dir": tmp_path / "cache"},
    )
    for name in os.listdir(raw):  # byte for byte the same files
        assert (tmp_path / "back" / name).read_bytes() == (raw / name).read_bytes(), name


def test_zarr_group_holds_the_manifest_sharded_zstd_arrays(raw: Path, tmp_path: Path) -> None:
    convert_corpus(raw, tmp_path / "c.zarr")
    group = json.loads((tmp_path / "c.zarr" / "zarr.json").read_text())
    assert group["zarr_format"] == 3 and group["node_type"] == "group"
    info = group["attributes"]["mixle"]
    assert info["layout"] == "mixle-zarr" and info["manifest"] == open_corpus(raw).manifest
    array = json.loads((tmp_path / "c.zarr" / "shard-00000.tokens" / "zarr.json").read_text())
    assert array["data_type"] == "uint16"
    (codec,) = array["codecs"]
    assert codec["name"] == "sharding_indexed"
    assert "zstd" in [inner["name"] for inner in codec["configuration"]["codecs"]]


def test_zarr_compresses_the_sample_corpus(tmp_path: Path) -> None:
    if not (SAMPLE / "manifest.json").exists():
        pytest.skip("shards/sample is not on this branch")
    convert_corpus(SAMPLE, tmp_path / "sample.zarr")
    ratio = stored_bytes(tmp_path / "sample.zarr") / stored_bytes(SAMPLE)
    assert ratio < 0.5  # byte-level tokens (vocab 256) compress well
    _same(open_corpus(tmp_path / "sample.zarr", cache_dir=tmp_path / "cache"), open_corpus(SAMPLE))


def test_a_group_without_the_manifest_is_not_a_corpus(raw: Path, tmp_path: Path) -> None:
    """An interrupted conversion: arrays written, attributes (written last) missing."""
    convert_corpus(raw, tmp_path / "c.zarr")
    meta = tmp_path / "c.zarr" / "zarr.json"
    group = json.loads(meta.read_text())
    group["attributes"] = {}
    meta.write_text(json.dumps(group))
    with pytest.raises(CorpusNotFoundError, match="without a mixle manifest"):
        open_corpus(tmp_path / "c.zarr", cache_dir=tmp_path / "cache")


def test_range_mode_is_refused_for_zarr(raw: Path, tmp_path: Path) -> None:
    convert_corpus(raw, tmp_path / "c.zarr")
    with pytest.raises(ArgumentError, match="range"):
        open_corpus(tmp_path / "c.zarr", mode="range")


def test_converting_onto_a_corpus_needs_overwrite(raw: Path, tmp_path: Path) -> None:
    convert_corpus(raw, tmp_path / "c.zarr")
    with pytest.raises(CorpusExistsError):
        convert_corpus(raw, tmp_path / "c.zarr")
    convert_corpus(raw, tmp_path / "c.zarr", overwrite=True)
    with pytest.raises(ArgumentError, match="layout"):
        convert_corpus(raw, tmp_path / "x", layout="parquet")
    assert not (tmp_path / "x").exists()


def test_decoded_shards_land_in_the_cache_as_raw_files(raw: Path, tmp_path: Path) -> None:
    convert_corpus(raw, tmp_path / "c.zarr")
    documents = open_corpus(tmp_path / "c.zarr", cache_dir=tmp_path / "cache")
    documents[0]
    entry = documents.manifest["shards"][0]
    cached = tmp_path / "cache" / "objects" / entry["tokens_sha256"]
    assert cached.read_bytes() == (raw / entry["tokens"]).read_bytes()


@pytest.mark.parametrize("layout", ["raw", "zarr"])
def test_publishing_to_a_url_writes_the_entry_point_last(
    raw: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    fs = filesystem("memory")
    order: list[str] = []
    real = fs.put_file

    def recording(local: str, remote: str, *args: object, **kwargs: object) -> None:
        order.append(remote.rsplit("/pub-" + layout + "/", 1)[1])
        real(local, remote, *args, **kwargs)

    monkeypatch.setattr(fs, "put_file", recording)
    url = f"memory://bucket/pub-{layout}"
    publish_corpus(raw, url, layout=layout)
    entry_point = "manifest.json" if layout == "raw" else "zarr.json"
    assert order[-1] == entry_point and order.count(entry_point) == 1
    assert len(order) > 2
    _same(open_corpus(url, cache_dir=tmp_path / "cache"), open_corpus(raw))
    with pytest.raises(CorpusExistsError):
        publish_corpus(raw, url, layout=layout)
    publish_corpus(raw, url, layout=layout, overwrite=True)


def test_upload_corpus_requires_a_url(raw: Path, tmp_path: Path) -> None:
    with pytest.raises(ArgumentError, match="URL"):
        upload_corpus(raw, str(tmp_path / "elsewhere"))
    upload_corpus(raw, "memory://bucket/uploaded")
    _same(open_corpus("memory://bucket/uploaded", cache_dir=tmp_path), open_corpus(raw))


def test_cli_convert_writes_zarr_and_back(
    raw: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["convert", str(raw), str(tmp_path / "c.zarr"), "--layout", "zarr"]) == 0
    out = capsys.readouterr().out
    assert "zarr layout" in out and "ratio" in out
    assert main(["convert", str(raw), str(tmp_path / "c.zarr")]) == 2
    assert "CorpusExistsError" in capsys.readouterr().err
    assert (
        main(
            [
                "convert",
                str(tmp_path / "c.zarr"),
                str(tmp_path / "raw"),
                "--layout",
                "raw",
                "--cache-dir",
                str(tmp_path / "cache"),
            ]
        )
        == 0
    )
    assert open_corpus(tmp_path / "raw").fingerprint == open_corpus(raw).fingerprint
    shutil.rmtree(tmp_path / "raw")
