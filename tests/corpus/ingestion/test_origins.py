"""The origins sidecar (``origins.bin``): every document's input file and record, written
at ingest by every executor, kept by ``merge``, read by ``open_corpus(...).origin(i)``
and checked by ``verify``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.corpus import (
    CorpusWriter,
    IngestOptions,
    commit_ingest,
    convert_corpus,
    ingest,
    merge_corpora,
    open_corpus,
    plan_ingest,
    run_unit,
    verify_corpus,
)
from mixle.corpus.format.origins import (
    ORIGINS_NAME,
    Origin,
    OriginRuns,
    OriginsTable,
    coalesce_runs,
    encode_origins,
)
from mixle.errors import CorpusFormatError
from tests.corpus.ingestion.distributed_helpers import OPTIONS, run_cli

#: Many units per file (each JSONL file is cut into several) and many shards.
SMALL = dict(OPTIONS, unit_size=600)


def _numbered_jsonl(path: Path, lines: int, bad: frozenset[int] = frozenset()) -> str:
    """A JSONL file whose line ``n`` holds the one-id document ``[n]`` (or junk at ``bad``)."""
    with open(path, "w", encoding="utf-8") as handle:
        for number in range(lines):
            handle.write("{not json\n" if number in bad else json.dumps({"input_ids": [number]}))
            handle.write("" if number in bad else "\n")
    return str(path)


def _inputs(tmp_path: Path) -> list[str]:
    return [
        _numbered_jsonl(tmp_path / "a.jsonl", 300),
        _numbered_jsonl(tmp_path / "b.jsonl", 120),
    ]


def _expected(inputs: list[str], lines: list[int]) -> list[Origin]:
    return [
        Origin(path, "line", n)
        for path, count in zip(inputs, lines, strict=True)
        for n in range(count)
    ]


def test_every_document_names_its_file_and_line_for_any_worker_count(tmp_path: Path) -> None:
    inputs = _inputs(tmp_path)
    ingest(inputs, tmp_path / "one", workers=1, **SMALL)
    ingest(inputs, tmp_path / "two", workers=2, **SMALL)
    corpus = open_corpus(tmp_path / "two")
    assert len(plan_ingest(inputs, IngestOptions(**SMALL)).units) > 4
    assert [corpus.origin(i) for i in range(len(corpus))] == _expected(inputs, [300, 120])
    assert corpus.origin(-1) == Origin(inputs[1], "line", 119)
    one = (tmp_path / "one" / ORIGINS_NAME).read_bytes()
    assert one == (tmp_path / "two" / ORIGINS_NAME).read_bytes()
    # One run per input file: far below the 8 bytes a document of the target.
    assert len(one) / len(corpus) < 1
    with pytest.raises(IndexError, match="420"):
        corpus.origin(420)


def test_skipped_records_keep_the_lines_of_the_others(tmp_path: Path) -> None:
    bad = frozenset({0, 7, 8, 150, 299})
    path = _numbered_jsonl(tmp_path / "a.jsonl", 300, bad)
    ingest([path], tmp_path / "out", on_error="skip", **SMALL)
    corpus = open_corpus(tmp_path / "out")
    kept = [n for n in range(300) if n not in bad]
    assert [corpus.origin(i).record for i in range(len(corpus))] == kept
    assert [int(corpus[i][0]) for i in range(len(corpus))] == kept


def test_a_task_array_writes_the_sidecar_of_the_local_run(tmp_path: Path) -> None:
    inputs = _inputs(tmp_path)
    ingest(inputs, tmp_path / "local", **SMALL)
    plan = plan_ingest(inputs, IngestOptions(**SMALL))
    for index in reversed(range(len(plan.units))):
        run_unit(plan, index, tmp_path / "tasks")
    commit_ingest(tmp_path / "tasks")
    local = (tmp_path / "local" / ORIGINS_NAME).read_bytes()
    assert (tmp_path / "tasks" / ORIGINS_NAME).read_bytes() == local
    assert open_corpus(tmp_path / "tasks").origin(305) == Origin(inputs[1], "line", 5)


def test_other_formats_name_their_records(tmp_path: Path) -> None:
    for number in range(3):
        np.save(tmp_path / f"doc-{number}.npy", np.arange(number + 1, dtype=np.int64))
    ingest([str(tmp_path / "*.npy")], tmp_path / "npy", vocab_size=100)
    corpus = open_corpus(tmp_path / "npy")
    assert [corpus.origin(i) for i in range(3)] == [
        Origin(str(tmp_path / f"doc-{n}.npy"), "file", 0) for n in range(3)
    ]
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pyarrow.table({"input_ids": [[n] for n in range(50)]})
    pq.write_table(table, tmp_path / "rows.parquet", row_group_size=8)
    ingest([str(tmp_path / "rows.parquet")], tmp_path / "pq", vocab_size=100)
    rows = open_corpus(tmp_path / "pq")
    assert [rows.origin(i) for i in range(50)] == [
        Origin(str(tmp_path / "rows.parquet"), "row", n) for n in range(50)
    ]


def test_a_corpus_without_a_sidecar_has_no_origins(tmp_path: Path) -> None:
    with CorpusWriter(tmp_path / "c", vocab_size=10) as writer:
        writer.add_many([np.array([1, 2])])
    corpus = open_corpus(tmp_path / "c")
    assert corpus.origin(0) is None
    assert verify_corpus(tmp_path / "c").to_dict()["origins"] is None


@pytest.mark.parametrize("damage", ["missing", "truncated", "forged"])
def test_verify_names_a_damaged_sidecar_and_the_corpus_still_reads(
    tmp_path: Path, damage: str
) -> None:
    out = tmp_path / "out"
    ingest(_inputs(tmp_path), out, **SMALL)
    sidecar = out / ORIGINS_NAME
    data = sidecar.read_bytes()
    if damage == "missing":
        sidecar.unlink()
    elif damage == "truncated":
        sidecar.write_bytes(data[:-8])
    else:
        sidecar.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    report = verify_corpus(out, raise_errors=False)
    assert not report.ok and report.origins_error is not None
    assert ORIGINS_NAME in str(report.origins_error)
    assert all(shard.ok for shard in report.shards)
    corpus = open_corpus(out)
    assert int(corpus[5][0]) == 5
    with pytest.raises(CorpusFormatError, match=ORIGINS_NAME):
        corpus.origin(5)
    result = run_cli("verify", str(out), check=False)
    assert result.returncode == 1
    assert f"FAIL  {ORIGINS_NAME}" in result.stdout and "Traceback" not in result.stderr


def test_merge_keeps_the_origins_when_every_input_has_them(tmp_path: Path) -> None:
    inputs = _inputs(tmp_path)
    ingest(inputs[:1], tmp_path / "a", **SMALL)
    ingest(inputs[1:], tmp_path / "b", **SMALL)
    merge_corpora([tmp_path / "a", tmp_path / "b", tmp_path / "a"], tmp_path / "m")
    merged = open_corpus(tmp_path / "m")
    expected = _expected(inputs, [300, 120]) + _expected(inputs[:1], [300])
    assert [merged.origin(i) for i in range(len(merged))] == expected
    assert verify_corpus(tmp_path / "m").ok
    with CorpusWriter(tmp_path / "plain", vocab_size=1000) as writer:
        writer.add_many([np.array([1])])
    merge_corpora([tmp_path / "a", tmp_path / "plain"], tmp_path / "m2")
    assert open_corpus(tmp_path / "m2").origin(0) is None
    assert not (tmp_path / "m2" / ORIGINS_NAME).exists()


def test_merge_refuses_an_input_whose_sidecar_is_damaged(tmp_path: Path) -> None:
    path = _numbered_jsonl(tmp_path / "a.jsonl", 20)
    ingest([path], tmp_path / "a", **SMALL)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    (tmp_path / "b" / ORIGINS_NAME).write_bytes(b"junk")
    with pytest.raises(CorpusFormatError, match=ORIGINS_NAME):
        merge_corpora([tmp_path / "a", tmp_path / "b"], tmp_path / "m")
    assert not (tmp_path / "m").exists()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 5)), min_size=1, max_size=40
    ),  # (input, record step) per document
)
def test_runs_give_back_every_documents_origin(steps: list[tuple[int, int]]) -> None:
    inputs = np.array([item for item, _ in steps], dtype=np.int64)
    records = np.cumsum([step for _, step in steps]).astype(np.int64)
    half = len(steps) // 2
    runs = coalesce_runs(
        OriginRuns.joined(
            [
                OriginRuns.of_documents(inputs[:half], records[:half]),
                OriginRuns.of_documents(inputs[half:], records[half:], half),
            ]
        )
    )
    names = [("f0", "line"), ("f1", "row"), ("f2", "file")]
    table = OriginsTable(encode_origins(names, runs, len(steps)), len(steps), "test")
    assert [table.origin(d) for d in range(len(steps))] == [
        Origin(*names[int(i)], int(r)) for i, r in zip(inputs, records, strict=True)
    ]
    assert np.all(np.diff(table.runs.first) > 0)


def test_a_sidecar_of_another_corpus_is_refused(tmp_path: Path) -> None:
    data = encode_origins([("f", "line")], OriginRuns.of_documents([0, 0], [0, 1]), 2)
    with pytest.raises(CorpusFormatError, match="the corpus has 3"):
        OriginsTable(data, 3, "x/origins.bin")
    with pytest.raises(CorpusFormatError, match="header"):
        OriginsTable(data[:10], 2, "x/origins.bin")


def test_a_raw_copy_keeps_the_sidecar(tmp_path: Path) -> None:
    inputs = _inputs(tmp_path)
    ingest(inputs, tmp_path / "out", **SMALL)
    convert_corpus(tmp_path / "out", tmp_path / "copy", layout="raw")
    copy = open_corpus(tmp_path / "copy")
    assert copy.origin(301) == Origin(inputs[1], "line", 1)
    assert verify_corpus(tmp_path / "copy").ok
