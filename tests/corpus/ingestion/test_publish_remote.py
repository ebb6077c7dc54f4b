"""``ingest`` to an object store (moto S3 on loopback) and to the zarr layout.

The corpus is built in a staging directory and published shards first, manifest last;
the published corpus reads back exactly, a crash between staging and publishing is
finished by ``resume``, and an existing destination is never replaced silently.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mixle.corpus.ingestion.pipeline as ingest_module
from mixle.corpus import ingest, open_corpus
from mixle.errors import CorpusExistsError
from tests.corpus._remote_fixtures import *  # noqa: F403
from tests.corpus.ingest_helpers import random_docs, read_all, write_jsonl


def _expected(docs: list[np.ndarray]) -> list[list[int]]:
    return [[int(x) for x in doc] for doc in docs]


def test_ingest_to_s3_publishes_a_readable_corpus_and_cleans_staging(
    tmp_path: Path, s3: dict[str, Any]
) -> None:
    docs = random_docs(3, 150)
    source = write_jsonl(tmp_path / "a.jsonl", docs)
    url = f"s3://corpora/{uuid.uuid4().hex}"
    staging = tmp_path / "staging"
    summary = ingest(
        source,
        url,
        storage_options=s3,
        staging_dir=staging,
        unit_size=1024,
        shard_size=512,
    )
    assert summary.output == url
    assert not staging.exists()
    remote = open_corpus(url, storage_options=s3, cache_dir=str(tmp_path / "cache"))
    assert [[int(x) for x in doc] for doc in remote] == _expected(docs)
    assert remote.manifest["metadata"]["source"]["tool"] == "mixle ingest"
    with pytest.raises(CorpusExistsError, match="already holds a corpus"):
        ingest(source, url, storage_options=s3, staging_dir=staging)
    assert not staging.exists()  # refused before any work


def test_resume_finishes_a_publish_interrupted_after_staging(
    tmp_path: Path, s3: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = random_docs(4, 80)
    source = write_jsonl(tmp_path / "a.jsonl", docs)
    url = f"s3://corpora/{uuid.uuid4().hex}"
    staging = tmp_path / "staging"

    def crash(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt  # the process dies between staging and publishing

    with monkeypatch.context() as patch:
        patch.setattr(ingest_module, "publish_corpus", crash)
        with pytest.raises(KeyboardInterrupt):
            ingest(source, url, storage_options=s3, staging_dir=staging)
    assert (staging / "manifest.json").exists()
    with pytest.raises(Exception, match="manifest"):
        open_corpus(url, storage_options=s3, cache_dir=str(tmp_path / "cache"))
    ingest(source, url, storage_options=s3, staging_dir=staging, resume=True)
    remote = open_corpus(url, storage_options=s3, cache_dir=str(tmp_path / "cache"))
    assert [[int(x) for x in doc] for doc in remote] == _expected(docs)
    # Resuming once more is a no-op: the destination already holds this very corpus.
    ingest(source, url, storage_options=s3, staging_dir=staging, resume=True)


def test_ingest_with_zarr_layout_round_trips_locally(tmp_path: Path) -> None:
    docs = random_docs(5, 120)
    source = write_jsonl(tmp_path / "a.jsonl", docs)
    out = tmp_path / "corpus.zarr"
    summary = ingest(source, out, layout="zarr", staging_dir=tmp_path / "staging")
    assert summary.output == str(out) and summary.documents == 120
    assert (out / "zarr.json").exists() and not (out / "manifest.json").exists()
    assert read_all(out) == _expected(docs)
    with pytest.raises(CorpusExistsError):
        ingest(source, out, layout="zarr", staging_dir=tmp_path / "staging")
    ingest(source, out, layout="zarr", staging_dir=tmp_path / "staging", overwrite=True)
    assert read_all(out) == _expected(docs)
