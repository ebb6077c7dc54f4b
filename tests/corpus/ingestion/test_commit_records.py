"""Forged or special unit records never reach a published corpus (issue #32, classes 5, 10).

The commit publishes from the units' completion records (``done.json``); each is
checked against the unit's own manifest and the file sizes, so a record with a key
missing or mistyped, counts that disagree with its shards, a ``skipped`` count of
another rejects list, or JSON nested 100k deep is one :class:`IngestError` naming the
unit and the field, and nothing is published. What no file shows (``lines``) is sealed
by the record's own ``record_sha256``; records written without it still commit. A record or manifest that is a FIFO
or a link to ``/dev/zero`` is refused without blocking or reading forever.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mixle.cli import main
from mixle.corpus import IngestOptions, commit_ingest, plan_ingest, run_unit
from mixle.corpus.ingestion.records import RECORD_DIGEST_KEY, record_digest, seal_record
from mixle.errors import IngestError
from tests.corpus.hardening_helpers import deadline
from tests.corpus.ingestion.distributed_helpers import OPTIONS, tree

WORK = ".mixle-ingest"
UNIT = "unit-000001"

Forge = Callable[[dict[str, Any]], Any]


def _set(key: str, value: Any) -> Forge:
    def forge(record: dict[str, Any]) -> dict[str, Any]:
        record[key] = value
        return record

    return forge


def _drop(key: str) -> Forge:
    def forge(record: dict[str, Any]) -> dict[str, Any]:
        del record[key]
        return record

    return forge


def _shard_field(key: str, value: Any) -> Forge:
    def forge(record: dict[str, Any]) -> dict[str, Any]:
        record["shards"][0][key] = value
        return record

    return forge


def _more_documents(record: dict[str, Any]) -> dict[str, Any]:
    record["documents"] += 5
    return record


def _drop_shard(record: dict[str, Any]) -> dict[str, Any]:
    record["shards"] = record["shards"][1:]
    return record


FORGERIES: dict[str, tuple[Forge, str]] = {
    "missing shards": (_drop("shards"), r"lacks the keys \['shards'\]"),
    "shards not a list": (_set("shards", {"a": 1}), r"field 'shards' holds dict entries"),
    "shard dropped": (_drop_shard, r"field 'shards' holds \d+ entries, the unit's manifest \d+"),
    "tokens_bytes mistyped": (
        _shard_field("tokens_bytes", "1024"),
        r"shard 0 field 'tokens_bytes' is '1024'",
    ),
    "tokens_bytes wrong": (_shard_field("tokens_bytes", 2), r"shard 0 field 'tokens_bytes' is 2"),
    "skipped mistyped": (_set("skipped", "0"), r"field 'skipped' is '0', not a count"),
    "skipped negative": (_set("skipped", -1), r"field 'skipped' is -1, not a count"),
    "skipped under raise": (_set("skipped", 3), r"field 'skipped' is 3, but the plan stops"),
    "missing skipped": (_drop("skipped"), r"lacks the keys \['skipped'\]"),
    "documents disagree": (_more_documents, r"field 'documents' is \d+, its shards hold \d+"),
    "dtype other": (_set("dtype", "int64"), r"field 'dtype' is 'int64', the plan's is 'uint16'"),
    "not an object": (lambda record: [record], r"done\.json is list, not a JSON object"),
}


@pytest.fixture
def units_done(tmp_path: Path, inputs: list[str]) -> Path:
    """An output whose units have all run (not committed)."""
    plan = plan_ingest(inputs, IngestOptions(**OPTIONS))
    out = tmp_path / "out"
    for index in range(len(plan.units)):
        run_unit(plan, index, out)
    return out


@pytest.mark.parametrize("name", list(FORGERIES))
def test_a_forged_record_is_refused_naming_unit_and_field(units_done: Path, name: str) -> None:
    forge, expected = FORGERIES[name]
    done = units_done / WORK / UNIT / "done.json"
    record = forge(json.loads(done.read_text()))
    done.write_text(json.dumps(record))
    if name == "not an object":
        expected = r"different plan"  # no plan id to be had: foreign, by name
    with pytest.raises(IngestError, match=expected) as caught:
        commit_ingest(units_done)
    assert UNIT in str(caught.value)
    assert not (units_done / "manifest.json").exists()


def test_a_deeply_nested_record_is_one_named_error(
    units_done: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (units_done / WORK / UNIT / "done.json").write_text("[" * 100_000)
    code = main(["ingest", "--commit", str(units_done), "-q"])
    error = capsys.readouterr().err
    assert code == 2 and error.count("\n") == 1
    assert "IngestError" in error and UNIT in error and "nested" in error
    assert not (units_done / "manifest.json").exists()


def test_a_skip_record_must_match_its_rejects_list(tmp_path: Path, inputs: list[str]) -> None:
    with open(inputs[0], "a") as handle:
        handle.write('{"input_ids": [1, -2]}\n')
    options = dict(OPTIONS, on_error="skip")
    plan = plan_ingest(inputs, IngestOptions(**options))
    out = tmp_path / "out"
    records = [run_unit(plan, index, out) for index in range(len(plan.units))]
    index = next(record["unit"] for record in records if record["skipped"])
    done = out / WORK / f"unit-{index:06d}" / "done.json"
    record = json.loads(done.read_text())
    done.write_text(json.dumps(seal_record(dict(record, skipped=record["skipped"] + 1))))
    with pytest.raises(
        IngestError, match=r"rejects\.jsonl: holds 1 skipped records, the unit's record says 2"
    ):
        commit_ingest(out)
    assert not (out / "manifest.json").exists()


def test_an_intact_output_still_commits_to_the_local_corpus(
    units_done: Path, local_run: Path
) -> None:
    commit_ingest(units_done)
    assert tree(units_done) == tree(local_run)


@pytest.mark.parametrize("file", ["done.json", "manifest.json"])
def test_a_fifo_record_is_refused_without_hanging(units_done: Path, file: str) -> None:
    path = units_done / WORK / UNIT / file
    path.unlink()
    os.mkfifo(path)
    with deadline(10), pytest.raises(IngestError, match=r"FIFO"):
        commit_ingest(units_done)
    assert not (units_done / "manifest.json").exists()


@pytest.mark.parametrize("file", ["done.json", "manifest.json"])
def test_a_record_linked_to_dev_zero_is_refused_without_reading(
    units_done: Path, file: str
) -> None:
    path = units_done / WORK / UNIT / file
    path.unlink()
    path.symlink_to("/dev/zero")
    with deadline(10), pytest.raises(IngestError, match=r"character device"):
        commit_ingest(units_done)
    assert not (units_done / "manifest.json").exists()


def test_a_task_redoes_a_unit_whose_record_is_forged(
    tmp_path: Path, inputs: list[str], units_done: Path, local_run: Path
) -> None:
    done = units_done / WORK / UNIT / "done.json"
    done.write_text(json.dumps(_drop("shards")(json.loads(done.read_text()))))
    plan = plan_ingest(inputs, IngestOptions(**OPTIONS))
    record = run_unit(plan, 1, units_done)  # converted again, not trusted
    assert "shards" in record
    commit_ingest(units_done)
    assert tree(units_done) == tree(local_run)


@pytest.mark.parametrize("dtype", ["0041,u2", "float64", "(2,)u2"])
def test_a_unit_manifest_with_a_strange_dtype_is_refused_by_name(
    units_done: Path, dtype: str
) -> None:
    path = units_done / WORK / UNIT / "manifest.json"
    manifest = json.loads(path.read_text())
    path.write_text(json.dumps(dict(manifest, dtype=dtype)))
    with pytest.raises(IngestError, match=rf"unit {UNIT} manifest\.json.*dtype"):
        commit_ingest(units_done)
    assert not (units_done / "manifest.json").exists()


def _records(out: Path) -> list[Path]:
    return sorted((out / WORK).glob("unit-*/done.json"))


def test_a_unit_writes_a_record_sealed_by_its_digest(units_done: Path) -> None:
    for done in _records(units_done):
        record = json.loads(done.read_text())
        assert record[RECORD_DIGEST_KEY] == record_digest(record)
        assert len(record[RECORD_DIGEST_KEY]) == 64


@pytest.mark.parametrize("lines", [0, 1, 10**6])
def test_a_record_whose_lines_were_edited_is_refused_naming_unit_and_field(
    units_done: Path, lines: int, capsys: pytest.CaptureFixture[str]
) -> None:
    done = units_done / WORK / UNIT / "done.json"
    record = json.loads(done.read_text())
    assert record["lines"] != lines
    done.write_text(json.dumps(dict(record, lines=lines)))
    code = main(["ingest", "--commit", str(units_done), "-q"])
    error = capsys.readouterr().err
    assert code == 2 and error.count("\n") == 1
    assert f"unit {UNIT}: done.json field 'record_sha256' does not match" in error
    assert not (units_done / "manifest.json").exists()


def test_records_written_without_the_digest_still_commit(units_done: Path, local_run: Path) -> None:
    for done in _records(units_done):  # as an older mixle wrote them
        record = json.loads(done.read_text())
        del record[RECORD_DIGEST_KEY]
        done.write_text(json.dumps(record))
    commit_ingest(units_done)
    assert tree(units_done) == tree(local_run)


def test_a_record_stripped_of_its_digest_among_sealed_ones_is_refused(units_done: Path) -> None:
    done = units_done / WORK / UNIT / "done.json"
    record = json.loads(done.read_text())
    del record[RECORD_DIGEST_KEY]
    done.write_text(json.dumps(dict(record, lines=0)))  # would move later units' origins
    with pytest.raises(
        IngestError, match=rf"unit {UNIT}: done.json lacks the field 'record_sha256'"
    ):
        commit_ingest(units_done)
    assert not (units_done / "manifest.json").exists()
