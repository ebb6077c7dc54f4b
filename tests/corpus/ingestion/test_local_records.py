"""The local pipeline's unit records (``done.json``) are sealed; resume checks the seal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mixle.corpus.ingestion.pipeline as ingest_module
from mixle.corpus import ingest
from mixle.corpus.ingestion.records import RECORD_DIGEST_KEY, record_digest
from mixle.corpus.storage.publish import PUBLISH_NAME
from tests.corpus.ingest_helpers import random_docs, tree_bytes, write_jsonl

_OPTIONS: dict[str, Any] = {"unit_size": 4096, "shard_size": 1024}


class _Interrupt(BaseException):
    """Stands in for a crash."""


@pytest.fixture
def mixed_jsonl(tmp_path: Path) -> Path:
    """Several units of one file (later units' line origins follow earlier ``lines``);
    only a late one needs uint32, so the earlier ones are widened."""
    docs = random_docs(11, 400)
    docs[350] = np.array([1, 70_000, 2])
    return write_jsonl(tmp_path / "mixed.jsonl", docs)


def _interrupt_after(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    real = ingest_module.convert_unit
    calls = {"n": 0}

    def flaky(*args: Any) -> dict[str, Any]:
        if calls["n"] == count:
            raise _Interrupt
        calls["n"] += 1
        return real(*args)

    monkeypatch.setattr(ingest_module, "convert_unit", flaky)


def _interrupted(source: Path, out: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Ingest ``source`` into ``out``, killed after three units; the work directory."""
    with monkeypatch.context() as patch:
        _interrupt_after(patch, 3)
        with pytest.raises(_Interrupt):
            ingest(source, out, **_OPTIONS)
    return out / ".mixle-ingest"


def _records(work: Path) -> dict[str, dict[str, Any]]:
    return {
        path.parent.name: json.loads(path.read_text()) for path in sorted(work.glob("*/done.json"))
    }


def test_local_records_are_sealed(
    tmp_path: Path, mixed_jsonl: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = _records(_interrupted(mixed_jsonl, tmp_path / "out", monkeypatch))
    assert len(records) == 3
    for record in records.values():
        assert record[RECORD_DIGEST_KEY] == record_digest(record)


def test_resume_reconverts_a_unit_whose_lines_were_edited(
    tmp_path: Path, mixed_jsonl: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingest(mixed_jsonl, tmp_path / "reference", **_OPTIONS)
    work = _interrupted(mixed_jsonl, tmp_path / "out", monkeypatch)
    path = work / "unit-000000" / "done.json"
    record = json.loads(path.read_text())
    path.write_text(json.dumps(dict(record, lines=record["lines"] + 5)))
    summary = ingest(mixed_jsonl, tmp_path / "out", resume=True, **_OPTIONS)
    assert summary.resumed_units == 2
    assert tree_bytes(tmp_path / "out") == tree_bytes(tmp_path / "reference")  # origins too


def test_an_older_unsealed_record_still_resumes(
    tmp_path: Path, mixed_jsonl: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingest(mixed_jsonl, tmp_path / "reference", **_OPTIONS)
    work = _interrupted(mixed_jsonl, tmp_path / "out", monkeypatch)
    for path in work.glob("*/done.json"):
        record = json.loads(path.read_text())
        del record[RECORD_DIGEST_KEY]
        path.write_text(json.dumps(record))
    summary = ingest(mixed_jsonl, tmp_path / "out", resume=True, **_OPTIONS)
    assert summary.resumed_units == 3
    assert tree_bytes(tmp_path / "out") == tree_bytes(tmp_path / "reference")


def test_widening_reseals_records_and_they_resume(
    tmp_path: Path, mixed_jsonl: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingest(mixed_jsonl, tmp_path / "reference", **_OPTIONS)

    def crash(*args: Any) -> None:
        raise _Interrupt

    with monkeypatch.context() as patch:  # killed after widening, before publishing
        patch.setattr(ingest_module, "publish_units", crash)
        with pytest.raises(_Interrupt):
            ingest(mixed_jsonl, tmp_path / "out", **_OPTIONS)
    work = tmp_path / "out" / ".mixle-ingest"
    (work / PUBLISH_NAME).unlink()  # as if killed before the publish plan was written
    records = _records(work)
    assert {record["dtype"] for record in records.values()} == {"uint32"}
    assert any("shards" in record for record in records.values())  # some were widened
    for record in records.values():
        assert record[RECORD_DIGEST_KEY] == record_digest(record)
    summary = ingest(mixed_jsonl, tmp_path / "out", resume=True, **_OPTIONS)
    assert summary.resumed_units == summary.units
    assert tree_bytes(tmp_path / "out") == tree_bytes(tmp_path / "reference")
