"""Distributed ingestion and merge into an object store (moto S3 server on loopback).

Two task processes write their units straight to ``s3://``; the commit copies the
shards server-side and writes the manifest last. Every object equals the file of a
local run; nothing is visible as a corpus before the commit.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from mixle.corpus import commit_ingest, ingest, merge_corpora, open_corpus
from mixle.corpus.storage.fs import filesystem
from mixle.errors import ArgumentError
from tests.corpus._remote_fixtures import *  # noqa: F403
from tests.corpus.ingestion.distributed_helpers import (
    OPTIONS,
    make_inputs,
    run_tasks_into,
    s3_objects,
    tree,
)


def test_two_task_processes_into_s3_then_commit_equal_the_local_run(
    tmp_path: Path, s3: dict[str, Any]
) -> None:
    inputs = make_inputs(tmp_path)
    local = tmp_path / "local"
    ingest(inputs, local, **OPTIONS)
    url = f"s3://corpora/{uuid.uuid4().hex}"
    run_tasks_into(inputs, url, s3, OPTIONS)
    fs = filesystem("s3", s3)
    assert not fs.exists(f"{url}/manifest.json")  # units only: not a corpus yet
    summary = commit_ingest(url, storage_options=s3)
    assert summary.documents == 300
    assert s3_objects(url, s3) == tree(local)
    assert not fs.exists(f"{url}/.mixle-ingest")
    remote = open_corpus(url, storage_options=s3, cache_dir=str(tmp_path / "cache"))
    assert remote.fingerprint == open_corpus(local).fingerprint


def test_commit_on_s3_lists_missing_units_and_publishes_nothing(
    tmp_path: Path, s3: dict[str, Any]
) -> None:
    inputs = make_inputs(tmp_path)
    url = f"s3://corpora/{uuid.uuid4().hex}"
    ingest(inputs, url, task="0/3", storage_options=s3, **OPTIONS)
    with pytest.raises(Exception, match="work units have not finished: unit-000001, unit-000002"):
        commit_ingest(url, storage_options=s3)
    assert not filesystem("s3", s3).exists(f"{url}/manifest.json")


def test_merge_on_s3_copies_server_side(tmp_path: Path, s3: dict[str, Any]) -> None:
    urls = []
    for number in range(2):
        url = f"s3://corpora/{uuid.uuid4().hex}"
        folder = tmp_path / str(number)
        folder.mkdir()
        inputs = make_inputs(folder, seed=number)
        ingest(inputs, url, storage_options=s3, staging_dir=tmp_path / f"st{number}", **OPTIONS)
        urls.append(url)
    out = f"s3://corpora/{uuid.uuid4().hex}"
    merge_corpora(urls, out, storage_options=s3)
    cache = str(tmp_path / "cache")
    parts = [open_corpus(u, storage_options=s3, cache_dir=cache) for u in urls]
    merged = open_corpus(out, storage_options=s3, cache_dir=cache)
    expected = [doc.tolist() for part in parts for doc in part]
    assert [doc.tolist() for doc in merged] == expected
    with pytest.raises(ArgumentError, match="different stores"):
        merge_corpora([urls[0], str(tmp_path / "local")], tmp_path / "m", storage_options=s3)


def test_ids_reach_an_s3_corpus_through_the_remote_commit(
    tmp_path: Path, s3: dict[str, Any]
) -> None:
    path = tmp_path / "ids.jsonl"
    path.write_text("".join(f'{{"input_ids": [{n}], "key": "k{n}"}}\n' for n in range(120)))
    options = dict(OPTIONS, unit_size=500, id_field="key")
    ingest([str(path)], tmp_path / "local", **options)
    url = f"s3://corpora/{uuid.uuid4().hex}"
    ingest([str(path)], url, storage_options=s3, **options)
    remote = open_corpus(url, storage_options=s3, cache_dir=str(tmp_path / "cache"))
    local = open_corpus(tmp_path / "local")
    assert [remote.origin(i) for i in range(120)] == [local.origin(i) for i in range(120)]
    assert remote.origin(77).id == "k77" and remote.find_id("k5").tolist() == [5]
