"""``--id-field``: each document's id in the origins sidecar (version 2), written by every
executor, kept by ``merge``, read by ``origin(i).id`` and ``find_id``; version-1
sidecars (no ids) still read."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from mixle.corpus import (
    IngestOptions,
    commit_ingest,
    ingest,
    merge_corpora,
    open_corpus,
    plan_ingest,
    run_unit,
    verify_corpus,
)
from mixle.corpus.format.origin_ids import OriginIds
from mixle.corpus.format.origins import (
    ORIGINS_NAME,
    Origin,
    OriginRuns,
    OriginsTable,
    encode_origins,
    origins_reference,
)
from mixle.corpus.ingestion.plan import IngestPlan, plan_differences
from mixle.errors import ArgumentError, CorpusFormatError, IngestError
from tests.corpus.ingestion.distributed_helpers import OPTIONS

SMALL = dict(OPTIONS, unit_size=600)


def _records(path: Path, lines: int, name: str = "doc_id", skip: int = -1) -> str:
    """JSONL whose line ``n`` holds ``[n]`` and the id ``f"{stem}-{n}"`` (an int on odd
    lines, no id at all on line ``skip``)."""
    with open(path, "w", encoding="utf-8") as handle:
        for n in range(lines):
            record: dict[str, object] = {"input_ids": [n]}
            if n != skip:
                record[name] = n if n % 2 else f"{path.stem}-{n}"
            handle.write(json.dumps(record) + "\n")
    return str(path)


def _id(stem: str, n: int) -> str:
    return str(n) if n % 2 else f"{stem}-{n}"


def _two_inputs(tmp_path: Path) -> list[str]:
    return [_records(tmp_path / "a.jsonl", 300), _records(tmp_path / "b.jsonl", 120)]


@pytest.mark.slow
def test_two_workers_write_the_ids_of_one(tmp_path: Path) -> None:
    inputs = _two_inputs(tmp_path)
    ingest(inputs, tmp_path / "one", workers=1, id_field="doc_id", **SMALL)
    ingest(inputs, tmp_path / "two", workers=2, id_field="doc_id", **SMALL)
    data = (tmp_path / "one" / ORIGINS_NAME).read_bytes()
    assert data == (tmp_path / "two" / ORIGINS_NAME).read_bytes()


def test_every_document_has_its_id(tmp_path: Path) -> None:
    inputs = _two_inputs(tmp_path)
    ingest(inputs, tmp_path / "one", workers=1, id_field="doc_id", **SMALL)
    corpus = open_corpus(tmp_path / "one")
    expected = [
        Origin(path, "line", n, _id(Path(path).stem, n))
        for path, count in zip(inputs, [300, 120], strict=True)
        for n in range(count)
    ]
    assert [corpus.origin(i) for i in range(len(corpus))] == expected
    data = (tmp_path / "one" / ORIGINS_NAME).read_bytes()
    assert struct.unpack_from("<II", data, 8) == (2, 1)  # version 2, ids flag
    assert corpus.manifest["metadata"]["origins"]["version"] == 2
    assert corpus.find_id("b-4").tolist() == [304]
    assert corpus.find_id("7").tolist() == [7, 307]  # integers written in decimal
    assert corpus.find_id("nowhere").tolist() == []
    assert verify_corpus(tmp_path / "one").ok


def test_a_record_without_an_id_is_a_bad_record_naming_file_line_and_field(
    tmp_path: Path,
) -> None:
    path = _records(tmp_path / "a.jsonl", 40, skip=12)
    with pytest.raises(IngestError, match=r"a\.jsonl line 13: missing id field 'doc_id'"):
        ingest([path], tmp_path / "out", id_field="doc_id", **SMALL)
    assert not (tmp_path / "out" / ORIGINS_NAME).exists()
    ingest([path], tmp_path / "skip", id_field="doc_id", on_error="skip", **SMALL)
    corpus = open_corpus(tmp_path / "skip")
    assert len(corpus) == 39
    assert corpus.origin(12) == Origin(path, "line", 13, "13")
    rejects = (tmp_path / "skip" / "rejects.jsonl").read_text()
    assert "line 13" in rejects and "doc_id" in rejects


def test_an_id_of_another_type_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text('{"input_ids": [1], "doc_id": 1.5}\n{"input_ids": [2], "doc_id": true}\n')
    with pytest.raises(
        IngestError, match=r"line 1: id field 'doc_id' must be a string or an integer, got float"
    ):
        ingest([str(path)], tmp_path / "out", id_field="doc_id", vocab_size=10)
    ingest([str(path)], tmp_path / "skip", id_field="doc_id", vocab_size=10, on_error="skip")
    assert "got bool" in (tmp_path / "skip" / "rejects.jsonl").read_text()


def test_formats_without_fields_refuse_an_id_field(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("some text")
    with pytest.raises(ArgumentError, match=r"a\.txt is text input.*jsonl, parquet"):
        ingest([str(tmp_path / "a.txt")], tmp_path / "out", id_field="doc_id")


def test_parquet_rows_have_their_ids(tmp_path: Path) -> None:
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    ids = [f"row-{n}" for n in range(50)]
    ids[9] = None  # type: ignore[call-overload]
    table = pyarrow.table({"input_ids": [[n] for n in range(50)], "key": ids})
    pq.write_table(table, tmp_path / "rows.parquet", row_group_size=8)
    with pytest.raises(IngestError, match=r"rows\.parquet row 9: id field 'key' .* got null"):
        ingest([str(tmp_path / "rows.parquet")], tmp_path / "out", id_field="key", vocab_size=100)
    ingest(
        [str(tmp_path / "rows.parquet")],
        tmp_path / "pq",
        id_field="key",
        vocab_size=100,
        on_error="skip",
    )
    corpus = open_corpus(tmp_path / "pq")
    assert corpus.origin(9) == Origin(str(tmp_path / "rows.parquet"), "row", 10, "row-10")
    assert corpus.find_id("row-49").tolist() == [48]
    with pytest.raises(IngestError, match="no id column 'nope'"):
        ingest([str(tmp_path / "rows.parquet")], tmp_path / "x", id_field="nope", vocab_size=100)


def test_a_task_array_writes_the_ids_of_the_local_run(tmp_path: Path) -> None:
    inputs = [_records(tmp_path / "a.jsonl", 200)]
    options = dict(SMALL, id_field="doc_id")
    ingest(inputs, tmp_path / "local", **options)
    plan = plan_ingest(inputs, IngestOptions(**options))
    again = IngestPlan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again.unit_job().read.id_field == "doc_id"
    for index in reversed(range(len(plan.units))):
        run_unit(again, index, tmp_path / "tasks")
    commit_ingest(tmp_path / "tasks")
    local = (tmp_path / "local" / ORIGINS_NAME).read_bytes()
    assert (tmp_path / "tasks" / ORIGINS_NAME).read_bytes() == local
    without = plan_ingest(inputs, IngestOptions(**SMALL)).to_dict()
    assert plan_differences(plan.to_dict(), without) == [
        "id_field in the existing plan: 'doc_id' / now: None"
    ]
    assert "id_field" not in without["source"]["options"] and "id_field" not in without["job"]


def test_merge_keeps_ids_only_when_every_input_has_them(tmp_path: Path) -> None:
    a = _records(tmp_path / "a.jsonl", 30)
    b = _records(tmp_path / "b.jsonl", 20)
    ingest([a], tmp_path / "a", id_field="doc_id", **SMALL)
    ingest([b], tmp_path / "b", id_field="doc_id", **SMALL)
    ingest([b], tmp_path / "plain", **SMALL)
    merge_corpora([tmp_path / "a", tmp_path / "b"], tmp_path / "m")
    merged = open_corpus(tmp_path / "m")
    assert merged.origin(31) == Origin(b, "line", 1, "1")
    assert merged.find_id("b-0").tolist() == [30]
    merge_corpora([tmp_path / "a", tmp_path / "plain"], tmp_path / "m2")
    mixed = open_corpus(tmp_path / "m2")
    assert mixed.origin(31) == Origin(b, "line", 1, None)
    assert mixed.find_id("b-0") is None
    assert mixed.manifest["metadata"]["origins"]["version"] == 1


def test_a_version_1_sidecar_still_reads_and_has_no_ids() -> None:
    data = encode_origins([("f", "line")], OriginRuns.of_documents([0, 0], [4, 5]), 2)
    assert struct.unpack_from("<II", data, 8) == (1, 0)
    assert origins_reference(data)["version"] == 1
    table = OriginsTable(data, 2, "x/origins.bin")
    assert table.origin(1) == Origin("f", "line", 5, None)
    assert table.find_id("f") is None


def test_damaged_id_columns_are_refused_by_name() -> None:
    runs = OriginRuns.of_documents([0, 0, 0], [0, 1, 2])
    ids = OriginIds.of_strings(["x", "", "yz"])
    data = encode_origins([("f", "line")], runs, 3, ids)
    assert OriginsTable(data, 3, "w").origin(2).id == "yz"
    assert OriginsTable(data, 3, "w").origin(1).id == ""
    with pytest.raises(CorpusFormatError, match=r"w: .*truncated"):
        OriginsTable(data[: len(data) - 40], 3, "w")
    with pytest.raises(CorpusFormatError, match="w: its id offsets"):
        OriginsTable(data[:-1], 3, "w")
    flipped = bytearray(data)
    flipped[12] = 3  # an unknown flag
    with pytest.raises(CorpusFormatError, match="unknown flags"):
        OriginsTable(bytes(flipped), 3, "w")
    broken = data[:-2] + b"\xff\xfe"
    with pytest.raises(CorpusFormatError, match="document 2 is not UTF-8"):
        OriginsTable(broken, 3, "w").origin(2)


def test_find_scans_only_ids_of_the_same_length() -> None:
    values = [f"id{n % 7}" for n in range(200)] + ["id10", "", "id1"]
    column = OriginIds.of_strings(values)
    assert column.find("id1").tolist() == [n for n, v in enumerate(values) if v == "id1"]
    assert column.find("").tolist() == [201]
    joined = OriginIds.joined([column, OriginIds.of_strings(["id1"])])
    assert joined.find("id1")[-1] == len(values)
    keep = np.arange(len(values)) % 2 == 0
    assert (
        joined.select(np.append(keep, True)).find("id1").shape[0]
        == sum(1 for n, v in enumerate(values) if v == "id1" and n % 2 == 0) + 1
    )


def test_a_plan_file_with_a_bad_id_field_is_refused(tmp_path: Path) -> None:
    path = _records(tmp_path / "a.jsonl", 10)
    value = plan_ingest([path], IngestOptions(id_field="doc_id", vocab_size=100)).to_dict()
    assert value["source"]["options"]["id_field"] == value["job"]["id_field"] == "doc_id"
    wrong_type = json.loads(json.dumps(value))
    wrong_type["source"]["options"]["id_field"] = 5
    with pytest.raises(IngestError, match=r"source\.options\.id_field is 5"):
        IngestPlan.from_dict(wrong_type)
    other_job = json.loads(json.dumps(value))
    other_job["job"]["id_field"] = "other"
    with pytest.raises(IngestError, match=r"job\.id_field is 'other'"):
        IngestPlan.from_dict(other_job)
    no_job_key = json.loads(json.dumps(value))
    del no_job_key["job"]["id_field"]
    with pytest.raises(IngestError, match="missing \\['id_field'\\]"):
        IngestPlan.from_dict(no_job_key)
