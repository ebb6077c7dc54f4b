"""Distributed ingestion into an object store, beyond ``on_error="raise"`` (moto S3).

* ``--on-error skip`` with units written straight to ``s3://``: every unit uploads its
  rejects, the commit merges them into ``OUTPUT/rejects.jsonl``; corpus and rejects
  equal those of a local run.
* ``mixle ingest --commit URL`` and ``mixle merge`` take ``--storage-option``.
* ``mixle merge --dtype`` widens on an object store: only the narrower corpus's shards
  are rewritten, the others are copied server-side (same digests).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mixle.cli import main
from mixle.corpus import CorpusWriter, ingest, open_corpus, publish_corpus
from mixle.corpus.storage.fs import filesystem
from tests.corpus._remote_fixtures import *  # noqa: F403
from tests.corpus.ingestion.distributed_helpers import (
    OPTIONS,
    make_inputs,
    run_tasks_into,
    s3_objects,
    tree,
)

SKIP = dict(OPTIONS, on_error="skip")


def _endpoint(s3: dict[str, Any]) -> list[str]:
    return ["--storage-option", f"client_kwargs.endpoint_url={s3['client_kwargs']['endpoint_url']}"]


def _inputs_with_bad_records(tmp_path: Path) -> list[str]:
    paths = make_inputs(tmp_path)
    bad = tmp_path / "in-2.jsonl"
    rng = np.random.default_rng(3)
    with open(bad, "w", encoding="utf-8") as handle:
        for line in range(120):
            if line % 17 == 5:
                handle.write('{"input_ids": [1, -1]}\n')
            elif line % 23 == 7:
                handle.write("not json\n")
            else:
                ids = rng.integers(0, 1000, size=int(rng.integers(0, 30))).tolist()
                handle.write(json.dumps({"input_ids": ids}) + "\n")
    return [*paths, str(bad)]


def test_skip_with_tasks_into_s3_then_the_commit_command_equal_the_local_run(
    tmp_path: Path, s3: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    inputs = _inputs_with_bad_records(tmp_path)
    local = tmp_path / "local"
    summary = ingest(inputs, local, **SKIP)
    assert summary.skipped == 12
    url = f"s3://corpora/{uuid.uuid4().hex}"
    run_tasks_into(inputs, url, s3, SKIP)
    fs = filesystem("s3", s3)
    assert not fs.exists(f"{url}/manifest.json")
    assert not fs.exists(f"{url}/rejects.jsonl")  # nothing published before the commit
    capsys.readouterr()
    assert main(["ingest", "--commit", url, *_endpoint(s3)]) == 0
    assert "skipped: 12" in capsys.readouterr().out
    objects = s3_objects(url, s3)
    assert objects == tree(local)
    reasons = [json.loads(line)["where"] for line in objects["rejects.jsonl"].splitlines()]
    assert reasons[0] == f"{inputs[2]} line 6"
    assert not fs.exists(f"{url}/.mixle-ingest")


def test_the_commit_command_takes_storage_options_and_refuses_malformed_ones(
    tmp_path: Path, s3: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"s3://corpora/{uuid.uuid4().hex}"
    ingest(make_inputs(tmp_path), url, task="0/1", storage_options=s3, **OPTIONS)
    with pytest.raises(SystemExit) as exited:
        main(["ingest", "--commit", url, "--storage-option", "nonsense", "-q"])
    assert exited.value.code == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err
    clash = ["--storage-option", "client_kwargs=1", *_endpoint(s3)]
    assert main(["ingest", "--commit", url, *clash, "-q"]) == 2
    assert "client_kwargs already has a value" in capsys.readouterr().err
    assert not filesystem("s3", s3).exists(f"{url}/manifest.json")
    assert main(["ingest", "--commit", url, *_endpoint(s3), "-q"]) == 0
    assert filesystem("s3", s3).exists(f"{url}/manifest.json")


def _corpus(path: Path, seed: int, vocab: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    docs = [rng.integers(0, vocab, size=int(n)) for n in rng.integers(0, 50, size=300)]
    with CorpusWriter(path, vocab_size=vocab, shard_max_bytes=1500) as writer:
        writer.add_many(docs)
    return docs


def test_merge_widens_on_s3_rewriting_only_the_narrower_shards(
    tmp_path: Path, s3: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    narrow = _corpus(tmp_path / "narrow", 1, 1000)  # uint16
    wide = _corpus(tmp_path / "wide", 2, 100_000)  # uint32
    urls = []
    for name in ("narrow", "wide"):
        url = f"s3://corpora/{uuid.uuid4().hex}"
        publish_corpus(tmp_path / name, url, storage_options=s3)
        urls.append(url)
    out = f"s3://corpora/{uuid.uuid4().hex}"
    assert main(["merge", *urls, out, *_endpoint(s3), "-q"]) == 2  # dtypes differ
    assert "different dtypes" in capsys.readouterr().err
    assert (
        main(["merge", *urls, out, "--dtype", "uint32", "--vocab-size", "100000", *_endpoint(s3)])
        == 0
    )
    merged = open_corpus(out, storage_options=s3, cache_dir=str(tmp_path / "cache"))
    assert merged.manifest["dtype"] == "uint32"
    assert [doc.tolist() for doc in merged] == [doc.tolist() for doc in narrow + wide]
    local_narrow = open_corpus(tmp_path / "narrow").manifest["shards"]
    local_wide = open_corpus(tmp_path / "wide").manifest["shards"]
    shards = merged.manifest["shards"]
    for entry, source in zip(shards[: len(local_narrow)], local_narrow, strict=True):
        assert entry["tokens_sha256"] != source["tokens_sha256"]  # rewritten
        assert entry["tokens_bytes"] > source["tokens_bytes"]
    for entry, source in zip(shards[len(local_narrow) :], local_wide, strict=True):
        assert entry["tokens_sha256"] == source["tokens_sha256"]  # copied as it was
        assert entry["offsets_sha256"] == source["offsets_sha256"]
    local_merge = tmp_path / "merged-local"
    assert (
        main(
            [
                "merge",
                str(tmp_path / "narrow"),
                str(tmp_path / "wide"),
                str(local_merge),
                "--dtype",
                "uint32",
                "--vocab-size",
                "100000",
                "-q",
            ]
        )
        == 0
    )
    objects, files = s3_objects(out, s3), tree(local_merge)
    # Same shard files as a local merge; the manifests differ only in the names of the
    # merged corpora (URLs here) recorded under metadata.merged_from.
    assert {k: v for k, v in objects.items() if k != "manifest.json"} == {
        k: v for k, v in files.items() if k != "manifest.json"
    }
    assert merged.fingerprint == open_corpus(local_merge).fingerprint
