"""Every ingest path writes the scale sidecars, byte for byte the same.

``block_offsets.bin`` and ``document_offsets.bin`` depend only on the documents'
cumulative offsets, so a single-process ingest, a parallel one, a task array committed
later (on local disk or in moto S3), a merge and a ``CorpusWriter`` of the same
documents give identical files. The default thresholds (2^24 documents, 1,024 shards)
are lowered here so that a small corpus gets both; the rule itself is
``mixle.corpus.format.scale_sidecars.wanted_sidecars``.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mixle.corpus.format.block_offsets as block_module
import mixle.corpus.format.document_offsets as document_module
import mixle.corpus.storage.publish as publish_module
from mixle.corpus import (
    BLOCK_OFFSETS_NAME,
    DOCUMENT_OFFSETS_NAME,
    CorpusWriter,
    add_sidecars,
    commit_ingest,
    ingest,
    merge_corpora,
    open_corpus,
    verify_corpus,
)
from mixle.corpus.storage.fs import filesystem
from tests.corpus._remote_fixtures import *  # noqa: F403
from tests.corpus.ingest_helpers import random_docs, write_jsonl
from tests.corpus.ingestion.distributed_helpers import run_tasks_into, s3_objects, tree

SIDECARS = (BLOCK_OFFSETS_NAME, DOCUMENT_OFFSETS_NAME)
#: Many units and shards; block boundaries (every 4096th document) fall inside shards.
OPTIONS = {"unit_size": 32 * 1024, "shard_size": 4096, "vocab_size": 1000}


@pytest.fixture(autouse=True)
def low_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both sidecars by default from 1 document and 2 shards (read when the rule runs)."""
    monkeypatch.setattr(block_module, "BLOCK_OFFSETS_MIN_DOCUMENTS", 1)
    monkeypatch.setattr(document_module, "DOCUMENT_OFFSETS_MIN_SHARDS", 2)


def make_inputs(folder: Path, seed: int = 3, files: int = 3, count: int = 3000) -> list[str]:
    paths = []
    for number in range(files):
        docs = random_docs(seed + number, count, max_len=12)
        paths.append(str(write_jsonl(folder / f"in-{number}.jsonl", docs)))
    return paths


def all_documents(inputs: list[str]) -> list[np.ndarray]:
    """The documents of ``make_inputs``'s files, in corpus order."""
    import json

    docs = []
    for path in inputs:
        with open(path, encoding="utf-8") as handle:
            docs += [np.array(json.loads(line)["input_ids"], dtype=np.int64) for line in handle]
    return docs


def sidecar_bytes(path: Path) -> dict[str, bytes]:
    return {name: (path / name).read_bytes() for name in SIDECARS}


def reference_sidecars(tmp_path: Path, docs: list[np.ndarray]) -> dict[str, bytes]:
    """The sidecars of a CorpusWriter of ``docs`` (other shard boundaries, same bytes)."""
    path = tmp_path / "writer"
    with CorpusWriter(path, vocab_size=1000, shard_max_bytes=10_000) as writer:
        writer.add_many(docs)
    return sidecar_bytes(path)


def test_parallel_and_task_array_ingests_write_the_single_process_sidecars(
    tmp_path: Path,
) -> None:
    inputs = make_inputs(tmp_path)
    single, parallel, tasks = tmp_path / "single", tmp_path / "parallel", tmp_path / "tasks"
    ingest(inputs, single, workers=1, **OPTIONS)
    ingest(inputs, parallel, workers=2, **OPTIONS)
    for task in ("0/2", "1/2"):
        ingest(inputs, tasks, task=task, **OPTIONS)
    assert not any((tasks / name).exists() for name in SIDECARS)  # nothing before the commit
    commit_ingest(tasks)
    three = tmp_path / "three"
    for task in ("2/3", "0/3", "1/3"):  # any count, any finishing order
        ingest(inputs, three, task=task, **OPTIONS)
    commit_ingest(three)
    corpus = open_corpus(single)
    assert len(corpus.parsed_manifest.shards) > 2 and len(corpus) > 2 * 4096
    expected = sidecar_bytes(single)
    assert sidecar_bytes(parallel) == expected
    assert sidecar_bytes(tasks) == expected
    assert sidecar_bytes(three) == expected
    assert tree(parallel) == tree(single) == tree(tasks) == tree(three)
    assert expected == reference_sidecars(tmp_path, all_documents(inputs))
    metadata = corpus.parsed_manifest.metadata
    assert {"block_offsets", "document_offsets"} <= set(metadata)
    assert verify_corpus(single).ok


def test_task_array_into_s3_commits_the_local_sidecars_byte_for_byte(
    tmp_path: Path, s3: dict[str, Any]
) -> None:
    inputs = make_inputs(tmp_path)
    local = tmp_path / "local"
    ingest(inputs, local, **OPTIONS)
    url = f"s3://corpora/{uuid.uuid4().hex}"
    run_tasks_into(inputs, url, s3, OPTIONS)  # two spawned task processes
    fs = filesystem("s3", s3)
    assert not any(fs.exists(f"{url}/{name}") for name in SIDECARS)  # crash before commit: none
    commit_ingest(url, storage_options=s3)
    objects = s3_objects(url, s3)
    assert {name: objects[name] for name in SIDECARS} == sidecar_bytes(local)
    assert objects == tree(local)  # the manifest names them identically
    assert not fs.exists(f"{url}/.mixle-ingest")
    remote = open_corpus(url, storage_options=s3, cache_dir=str(tmp_path / "cache"))
    assert verify_corpus(url, storage_options=s3, cache_dir=str(tmp_path / "cache")).ok
    indices = np.arange(0, len(remote) + 1, 997, dtype=np.int64)
    assert np.array_equal(remote.token_offsets(indices), open_corpus(local).token_offsets(indices))


def test_block_offsets_alone_are_read_by_ranges_from_s3_units(
    tmp_path: Path, s3: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(document_module, "DOCUMENT_OFFSETS_MIN_SHARDS", 1 << 30)
    inputs = make_inputs(tmp_path, files=2)
    local = tmp_path / "local"
    ingest(inputs, local, **OPTIONS)
    url = f"s3://corpora/{uuid.uuid4().hex}"
    for task in ("0/2", "1/2"):
        ingest(inputs, url, task=task, storage_options=s3, **OPTIONS)
    commit_ingest(url, storage_options=s3)
    objects = s3_objects(url, s3)
    assert DOCUMENT_OFFSETS_NAME not in objects
    assert objects[BLOCK_OFFSETS_NAME] == (local / BLOCK_OFFSETS_NAME).read_bytes()
    assert objects == tree(local)


def test_dask_executor_commit_writes_the_sidecars(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    inputs = make_inputs(tmp_path, files=1)
    single, dask = tmp_path / "single", tmp_path / "dask"
    ingest(inputs, single, **OPTIONS)
    ingest(inputs, dask, executor="dask", workers=2, **OPTIONS)
    assert sidecar_bytes(dask) == sidecar_bytes(single)


def test_commit_killed_before_its_manifest_leaves_no_corpus_and_reruns_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inputs = make_inputs(tmp_path, files=2)
    single, tasks = tmp_path / "single", tmp_path / "tasks"
    ingest(inputs, single, **OPTIONS)
    for task in ("0/2", "1/2"):
        ingest(inputs, tasks, task=task, **OPTIONS)

    def killed(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt("killed before the manifest")

    monkeypatch.setattr(publish_module, "_commit_plan", killed)
    with pytest.raises(KeyboardInterrupt):
        commit_ingest(tasks)
    assert not (tasks / "manifest.json").exists()  # no corpus: its sidecars name nothing
    with pytest.raises(Exception, match="manifest"):
        open_corpus(tasks)
    monkeypatch.undo()
    monkeypatch.setattr(block_module, "BLOCK_OFFSETS_MIN_DOCUMENTS", 1)
    monkeypatch.setattr(document_module, "DOCUMENT_OFFSETS_MIN_SHARDS", 2)
    commit_ingest(tasks)  # the saved publish plan finishes the commit
    assert tree(tasks) == tree(single)
    assert verify_corpus(tasks).ok


def test_text_ingest_in_parallel_writes_the_same_sidecars(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    inputs = []
    for number in range(2):
        lines = [
            "".join(chr(97 + c) for c in rng.integers(0, 26, rng.integers(1, 6)))
            for _ in range(5000)
        ]
        path = tmp_path / f"text-{number}.txt"
        path.write_text("\n\n".join(lines) + "\n", encoding="utf-8")
        inputs.append(str(path))
    options = {"tokenizer": "bytes", "split": "paragraphs", "unit_size": 8192, "shard_size": 4096}
    single, parallel = tmp_path / "single", tmp_path / "parallel"
    ingest(inputs, single, workers=1, **options)
    ingest(inputs, parallel, workers=2, **options)
    assert len(open_corpus(single)) > 4096
    assert sidecar_bytes(parallel) == sidecar_bytes(single)
    assert tree(parallel) == tree(single)


def test_a_shape_that_calls_for_none_gets_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(block_module, "BLOCK_OFFSETS_MIN_DOCUMENTS", 1 << 24)
    monkeypatch.setattr(document_module, "DOCUMENT_OFFSETS_MIN_SHARDS", 1024)
    inputs = make_inputs(tmp_path, files=1, count=500)
    ingest(inputs, tmp_path / "out", workers=2, **OPTIONS)
    assert not any((tmp_path / "out" / name).exists() for name in SIDECARS)
    metadata = open_corpus(tmp_path / "out").parsed_manifest.metadata
    assert "block_offsets" not in metadata and "document_offsets" not in metadata


def test_overwrite_with_a_corpus_that_needs_none_removes_the_old_sidecars(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inputs = make_inputs(tmp_path, files=1)
    out = tmp_path / "out"
    ingest(inputs, out, **OPTIONS)
    assert all((out / name).exists() for name in SIDECARS)
    monkeypatch.setattr(block_module, "BLOCK_OFFSETS_MIN_DOCUMENTS", 1 << 24)
    monkeypatch.setattr(document_module, "DOCUMENT_OFFSETS_MIN_SHARDS", 1024)
    other = tmp_path / "other"
    other.mkdir()
    ingest(make_inputs(other, seed=9, files=1), out, overwrite=True, **OPTIONS)
    assert not any((out / name).exists() for name in SIDECARS)
    assert verify_corpus(out).ok


def test_merge_writes_the_sidecars_of_the_concatenation(tmp_path: Path, s3: dict[str, Any]) -> None:
    parts = []
    docs: list[np.ndarray] = []
    for number in range(2):
        folder = tmp_path / f"part{number}"
        folder.mkdir()
        inputs = make_inputs(folder, seed=10 * number, files=1)
        ingest(inputs, folder / "corpus", **OPTIONS)
        parts.append(folder / "corpus")
        docs += all_documents(inputs)
    merged = tmp_path / "merged"
    merge_corpora(parts, merged)
    expected = reference_sidecars(tmp_path, docs)
    assert sidecar_bytes(merged) == expected
    assert verify_corpus(merged).ok
    urls = []
    for part in parts:
        url = f"s3://corpora/{uuid.uuid4().hex}"
        add_sidecars(part, block_offsets=False, document_offsets=False)  # inputs without any
        from mixle.corpus import upload_corpus

        upload_corpus(part, url, s3)
        urls.append(url)
    out = f"s3://corpora/{uuid.uuid4().hex}"
    merge_corpora(urls, out, storage_options=s3)
    objects = s3_objects(out, s3)
    assert {name: objects[name] for name in SIDECARS} == expected
    assert verify_corpus(out, storage_options=s3, cache_dir=str(tmp_path / "cache")).ok


@pytest.mark.parametrize(
    "delay",
    [0.8, pytest.param(0.2, marks=pytest.mark.slow), pytest.param(2.0, marks=pytest.mark.slow)],
)
def test_a_commit_process_killed_at_any_moment_publishes_the_sidecars_next_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, delay: float
) -> None:
    """A real ``mixle ingest --commit`` process, SIGKILLed: no corpus, or the complete
    one naming its sidecars; the next commit publishes the single-process bytes. The
    shape (1,000+ tiny shards) calls for the document-offsets sidecar by the default
    rule, so the child process needs no patched threshold."""
    import os
    import signal
    import subprocess
    import sys

    from mixle.corpus import IngestOptions, plan_ingest, run_unit
    from tests.corpus.ingestion.distributed_helpers import ROOT

    monkeypatch.undo()  # the default rule, as in the child
    inputs = make_inputs(tmp_path, files=1, count=2600)
    options = {"unit_size": 16 * 1024, "shard_size": 32, "vocab_size": 1000}
    local = tmp_path / "local"
    ingest(inputs, local, **options)
    assert len(open_corpus(local).parsed_manifest.shards) >= 1024
    assert (local / DOCUMENT_OFFSETS_NAME).exists()
    plan = plan_ingest(inputs, IngestOptions(**options))
    out = tmp_path / "out"
    for unit in plan.units:
        run_unit(plan, unit.index, out)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    process = subprocess.Popen(
        [sys.executable, "-m", "mixle.cli", "ingest", "--commit", str(out), "-q"], env=env
    )
    import time

    time.sleep(delay)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    if (out / "manifest.json").exists():  # finished before the kill: complete already
        assert verify_corpus(out).ok
        assert (out / DOCUMENT_OFFSETS_NAME).read_bytes() == (
            local / DOCUMENT_OFFSETS_NAME
        ).read_bytes()
    else:
        with pytest.raises(Exception, match="manifest"):
            open_corpus(out)
    commit_ingest(out)
    assert tree(out) == tree(local)
    assert verify_corpus(out).ok
