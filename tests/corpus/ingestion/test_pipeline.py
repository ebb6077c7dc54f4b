"""Ingest determinism, bad input, overwrite and (in-process) resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mixle.corpus.ingestion.pipeline as ingest_module
from mixle.corpus import IngestOptions, ingest, open_corpus
from mixle.corpus.ingestion.pipeline import run_ingest
from mixle.corpus.ingestion.records import RECORD_DIGEST_KEY, record_digest
from mixle.corpus.storage.publish import PUBLISH_NAME
from mixle.errors import ArgumentError, CorpusExistsError, IngestError
from tests.corpus.ingest_helpers import random_docs, read_all, tree_bytes, write_jsonl


@pytest.fixture
def mixed_jsonl(tmp_path: Path) -> Path:
    """Several units; only a late one needs uint32 (exercises the dtype rewrite)."""
    docs = random_docs(11, 400)
    docs[350] = np.array([1, 70_000, 2])
    return write_jsonl(tmp_path / "mixed.jsonl", docs)


def test_output_is_byte_identical_for_any_worker_count_and_run(
    tmp_path: Path, mixed_jsonl: Path
) -> None:
    options: dict[str, Any] = {"unit_size": 4096, "shard_size": 1024}
    ingest(mixed_jsonl, tmp_path / "w1", workers=1, **options)
    ingest(mixed_jsonl, tmp_path / "w2", workers=2, **options)
    ingest(mixed_jsonl, tmp_path / "w1-again", workers=1, **options)
    reference = tree_bytes(tmp_path / "w1")
    assert tree_bytes(tmp_path / "w2") == reference
    assert tree_bytes(tmp_path / "w1-again") == reference
    assert open_corpus(tmp_path / "w1").manifest["dtype"] == "uint32"
    assert read_all(tmp_path / "w1")[350] == [1, 70_000, 2]


def test_bad_records_name_file_line_and_position(tmp_path: Path) -> None:
    cases = {
        '{"input_ids": [1, 2, -5]}': r"line 2: token id -5 at position 2 is negative",
        '{"input_ids": [1, 2.5]}': r"line 2: token id 2.5 at position 1 is not an integer",
        '{"input_ids": [1, true]}': r"line 2: token id True at position 1 is not an integer",
        '{"ids": [1]}': r"line 2: missing field 'input_ids' or 'tokens'",
        '{"input_ids": [1, 2': r"line 2, column 21: malformed JSON",
        '{"input_ids": "abc"}': r"line 2: token ids must be a JSON list",
        '{"input_ids": [1, 99999999999999999999]}': r"line 2: token id 99999999999999999999 at position 1 is outside",
    }
    for number, (line, expected) in enumerate(cases.items()):
        source = tmp_path / f"bad{number}.jsonl"
        source.write_text('{"input_ids": [1]}\n' + line + "\n")
        with pytest.raises(IngestError, match=rf"bad{number}\.jsonl {expected}"):
            ingest(source, tmp_path / "out")
        assert not (tmp_path / "out").exists()


def test_out_of_vocabulary_id_is_an_error(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", [np.array([1, 2]), np.array([3, 50, 4])])
    with pytest.raises(
        IngestError, match=r"a\.jsonl line 2: token id 50 at position 1 is not below 50"
    ):
        ingest(tmp_path / "a.jsonl", tmp_path / "out", vocab_size=50)


def test_first_error_in_input_order_is_reported_for_any_workers(tmp_path: Path) -> None:
    docs = random_docs(12, 300)
    lines = [json.dumps({"input_ids": d.tolist()}) for d in docs]
    lines[120] = '{"input_ids": [-1]}'
    lines[250] = '{"input_ids": [-2]}'
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    for workers in (1, 2):
        with pytest.raises(IngestError, match=r"a\.jsonl line 121: token id -1 "):
            ingest(tmp_path / "a.jsonl", tmp_path / "out", workers=workers, unit_size=1024)
        assert not (tmp_path / "out").exists()


def test_error_leaves_previous_corpus_untouched(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "good.jsonl", random_docs(13, 20))
    ingest(tmp_path / "good.jsonl", tmp_path / "out")
    before = tree_bytes(tmp_path / "out")
    (tmp_path / "bad.jsonl").write_text('{"input_ids": [-1]}\n')
    with pytest.raises(IngestError):
        ingest(tmp_path / "bad.jsonl", tmp_path / "out", overwrite=True)
    assert tree_bytes(tmp_path / "out") == before


def test_skip_writes_rejects_and_counts_them(tmp_path: Path) -> None:
    docs = random_docs(14, 200)
    lines = [json.dumps({"input_ids": d.tolist()}) for d in docs]
    bad = {10: '{"input_ids": [5, -1]}', 150: "not json", 199: '{"x": 1}'}
    for index, text in bad.items():
        lines[index] = text
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    summary = ingest(
        tmp_path / "a.jsonl", tmp_path / "out", on_error="skip", unit_size=1024, workers=2
    )
    assert summary.skipped == 3 and summary.documents == 197
    kept = [d.tolist() for i, d in enumerate(docs) if i not in bad]
    assert read_all(tmp_path / "out") == kept
    assert summary.rejects is not None
    rejects = [json.loads(line) for line in Path(summary.rejects).read_text().splitlines()]
    assert [r["where"].rsplit(" line ", 1)[1].split(",")[0] for r in rejects] == [
        "11",
        "151",
        "200",
    ]
    assert "negative" in rejects[0]["reason"] and "malformed JSON" in rejects[1]["reason"]
    assert open_corpus(tmp_path / "out").manifest["metadata"]["source"]["skipped_documents"] == 3


def test_existing_corpus_needs_overwrite_and_stale_shards_are_removed(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "big.jsonl", random_docs(15, 300))
    write_jsonl(tmp_path / "small.jsonl", random_docs(16, 3))
    ingest(tmp_path / "big.jsonl", tmp_path / "out", shard_size=256)
    with pytest.raises(CorpusExistsError, match="--overwrite"):
        ingest(tmp_path / "small.jsonl", tmp_path / "out")
    summary = ingest(tmp_path / "small.jsonl", tmp_path / "out", overwrite=True)
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == [
        "manifest.json",
        "origins.bin",
        "shard-00000.offsets",
        "shard-00000.tokens",
    ]
    assert summary.documents == 3


class _Interrupt(BaseException):
    """Stands in for a Ctrl-C / crash after some units."""


def _interrupt_after(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    real = ingest_module.convert_unit
    calls = {"n": 0}

    def flaky(*args: Any) -> dict[str, Any]:
        if calls["n"] == count:
            raise _Interrupt
        calls["n"] += 1
        return real(*args)

    monkeypatch.setattr(ingest_module, "convert_unit", flaky)


def test_resume_after_interruption_equals_uninterrupted_run(
    tmp_path: Path, mixed_jsonl: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    options: dict[str, Any] = {"unit_size": 4096, "shard_size": 1024}
    ingest(mixed_jsonl, tmp_path / "reference", **options)
    with monkeypatch.context() as patch:
        _interrupt_after(patch, 3)
        with pytest.raises(_Interrupt):
            ingest(mixed_jsonl, tmp_path / "out", **options)
    assert not (tmp_path / "out" / "manifest.json").exists()
    with pytest.raises(CorpusExistsError, match="--resume"):
        ingest(mixed_jsonl, tmp_path / "out", **options)
    with pytest.raises(ArgumentError, match="shard_size in interrupted ingest: 1024 / now: 2048"):
        ingest(mixed_jsonl, tmp_path / "out", resume=True, unit_size=4096, shard_size=2048)
    summary = ingest(mixed_jsonl, tmp_path / "out", resume=True, **options)
    assert summary.resumed_units == 3
    assert tree_bytes(tmp_path / "out") == tree_bytes(tmp_path / "reference")


def test_resume_of_an_interrupted_overwrite_keeps_old_corpus_until_publish(
    tmp_path: Path, mixed_jsonl: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_jsonl(tmp_path / "old.jsonl", random_docs(17, 5))
    ingest(tmp_path / "old.jsonl", tmp_path / "out")
    old_manifest = (tmp_path / "out" / "manifest.json").read_bytes()
    with monkeypatch.context() as patch:
        _interrupt_after(patch, 2)
        with pytest.raises(_Interrupt):
            ingest(mixed_jsonl, tmp_path / "out", overwrite=True, unit_size=4096)
    assert (tmp_path / "out" / "manifest.json").read_bytes() == old_manifest
    ingest(mixed_jsonl, tmp_path / "out", resume=True, unit_size=4096)
    ingest(mixed_jsonl, tmp_path / "reference", unit_size=4096)
    assert tree_bytes(tmp_path / "out") == tree_bytes(tmp_path / "reference")


def test_resume_redoes_a_unit_whose_shards_are_damaged(
    tmp_path: Path, mixed_jsonl: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:
        _interrupt_after(patch, 2)
        with pytest.raises(_Interrupt):
            ingest(mixed_jsonl, tmp_path / "out", unit_size=4096)
    shard = tmp_path / "out" / ".mixle-ingest" / "unit-000001" / "shard-00000.tokens"
    shard.write_bytes(shard.read_bytes()[:-2])
    summary = ingest(mixed_jsonl, tmp_path / "out", unit_size=4096, resume=True)
    assert summary.resumed_units == 1
    ingest(mixed_jsonl, tmp_path / "reference", unit_size=4096)
    assert tree_bytes(tmp_path / "out") == tree_bytes(tmp_path / "reference")


def test_resume_after_a_finished_ingest_is_a_no_op(tmp_path: Path, mixed_jsonl: Path) -> None:
    first = ingest(mixed_jsonl, tmp_path / "out", unit_size=4096)
    before = tree_bytes(tmp_path / "out")
    # As if killed after the manifest was written, while removing the work directory.
    (tmp_path / "out" / ".mixle-ingest" / "unit-000000").mkdir(parents=True)
    again = ingest(mixed_jsonl, tmp_path / "out", unit_size=4096, resume=True)
    assert tree_bytes(tmp_path / "out") == before
    assert (again.documents, again.tokens, again.shards) == (
        first.documents,
        first.tokens,
        first.shards,
    )
    assert again.resumed_units == again.units
    with pytest.raises(CorpusExistsError, match="--overwrite"):
        ingest(mixed_jsonl, tmp_path / "out", unit_size=8192, resume=True)


def test_ingest_options_validate_and_normalize_once() -> None:
    options = IngestOptions(workers=np.int64(2), vocab_size=300, append_eos=299)
    assert options.workers == 2 and type(options.workers) is int
    assert options.fixed_dtype == "uint16" and options.fields == ("input_ids", "tokens")
    assert IngestOptions(tokenizer="bytes").fields == ("text",)
    with pytest.raises(ArgumentError, match="`layout` must be one of"):
        IngestOptions(layout="tar")
    with pytest.raises(ArgumentError, match="`append_eos` must be below `vocab_size` 300"):
        IngestOptions(vocab_size=300, append_eos=300)
    with pytest.raises(AttributeError):
        options.workers = 3  # type: ignore[misc]


def test_ingest_keywords_and_options_object_give_the_same_corpus(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", random_docs(3, 200))
    ingest(source, tmp_path / "a", shard_size=4096, vocab_size=1000)
    run_ingest(source, tmp_path / "b", IngestOptions(shard_size=4096, vocab_size=1000))
    a, b = open_corpus(tmp_path / "a"), open_corpus(tmp_path / "b")
    assert a.fingerprint == b.fingerprint


# The local pipeline's unit records (done.json) are sealed; resume checks the seal. In
# mixed_jsonl, the later units' line origins follow the earlier units' ``lines``.
_RECORD_OPTIONS: dict[str, Any] = {"unit_size": 4096, "shard_size": 1024}


def _interrupted(source: Path, out: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Ingest ``source`` into ``out``, killed after three units; its work directory."""
    with monkeypatch.context() as patch:
        _interrupt_after(patch, 3)
        with pytest.raises(_Interrupt):
            ingest(source, out, **_RECORD_OPTIONS)
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


def _resume_after_editing(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit: Any
) -> int:
    """Interrupt, ``edit(name, record)`` every record (``None``: leave it), resume; check
    the corpus (origins included) is an uninterrupted run's; the units resumed."""
    ingest(source, tmp_path / "reference", **_RECORD_OPTIONS)
    work = _interrupted(source, tmp_path / "out", monkeypatch)
    for name, record in _records(work).items():
        edited = edit(name, record)
        if edited is not None:
            (work / name / "done.json").write_text(json.dumps(edited))
    summary = ingest(source, tmp_path / "out", resume=True, **_RECORD_OPTIONS)
    assert tree_bytes(tmp_path / "out") == tree_bytes(tmp_path / "reference")
    return summary.resumed_units


def test_resume_reconverts_a_unit_whose_lines_were_edited(
    tmp_path: Path, mixed_jsonl: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def edit(name: str, record: dict[str, Any]) -> dict[str, Any] | None:
        return dict(record, lines=record["lines"] + 5) if name == "unit-000000" else None

    assert _resume_after_editing(mixed_jsonl, tmp_path, monkeypatch, edit) == 2


def test_an_older_unsealed_record_still_resumes(
    tmp_path: Path, mixed_jsonl: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unseal(name: str, record: dict[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in record.items() if key != RECORD_DIGEST_KEY}

    assert _resume_after_editing(mixed_jsonl, tmp_path, monkeypatch, unseal) == 3


def test_widening_reseals_records_and_they_resume(
    tmp_path: Path, mixed_jsonl: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingest(mixed_jsonl, tmp_path / "reference", **_RECORD_OPTIONS)

    def crash(*args: Any) -> None:
        raise _Interrupt

    with monkeypatch.context() as patch:  # killed after widening, before publishing
        patch.setattr(ingest_module, "publish_units", crash)
        with pytest.raises(_Interrupt):
            ingest(mixed_jsonl, tmp_path / "out", **_RECORD_OPTIONS)
    work = tmp_path / "out" / ".mixle-ingest"
    (work / PUBLISH_NAME).unlink()  # as if killed before the publish plan was written
    records = _records(work)
    assert {record["dtype"] for record in records.values()} == {"uint32"}
    assert any("shards" in record for record in records.values())  # some were widened
    for record in records.values():
        assert record[RECORD_DIGEST_KEY] == record_digest(record)
    summary = ingest(mixed_jsonl, tmp_path / "out", resume=True, **_RECORD_OPTIONS)
    assert summary.resumed_units == summary.units
    assert tree_bytes(tmp_path / "out") == tree_bytes(tmp_path / "reference")
