"""The input-format registry: detection, registration rules, the generated docs table
and ``--help``, an extra format end to end, and the origins readers give."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mixle.cli import main
from mixle.corpus import INPUT_FORMATS, InputFormat, format_names, input_formats, register_format
from mixle.corpus.ingestion.formats import detect_format, formats_table, get_format, registry
from mixle.corpus.ingestion.input_readers import ReadOptions, read_unit, record_origins
from mixle.corpus.ingestion.inputs import plan_units, resolve_inputs
from mixle.corpus.ingestion.units import line_base
from mixle.errors import ArgumentError
from tests.corpus.ingest_helpers import random_docs, read_all, write_jsonl, write_megatron
from tests.corpus.ingestion.csv_format import CsvIdsFormat

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def csv_registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The CSV format registered for one test (the registry is restored after it)."""
    monkeypatch.setattr(registry, "_REGISTRY", registry._REGISTRY.copy())
    register_format(CsvIdsFormat())
    yield


def _write_csv(path: Path, docs: list[np.ndarray]) -> Path:
    path.write_text("".join(",".join(map(str, doc.tolist())) + "\n" for doc in docs))
    return path


def test_builtin_formats_are_registered_in_their_documented_order() -> None:
    assert INPUT_FORMATS == ("jsonl", "parquet", "npy", "npz", "megatron", "text")
    assert format_names()[: len(INPUT_FORMATS)] == INPUT_FORMATS
    assert [fmt.name for fmt in input_formats()] == list(format_names())


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("a.jsonl", "jsonl"),
        ("A.NDJSON", "jsonl"),
        ("a.jsonl.gz", "jsonl"),
        ("a.jsonl.zst", "jsonl"),
        ("a.ndjson.gz", "jsonl"),
        ("dir/a.parquet", "parquet"),
        ("a.npz", "npz"),
        ("a.tokens.npy", "npz"),
        ("a.offsets.npy", "npy"),
        ("a.npy", "npy"),
        ("p.bin", "megatron"),
        ("p.idx", "megatron"),
        ("a.txt", "text"),
        ("a.text", "text"),
        ("README.md", "text"),
        ("a.log", None),
        ("a.gz", None),
        ("a.csv", None),
    ],
)
def test_detection_takes_the_longest_registered_extension(name: str, expected: str | None) -> None:
    assert detect_format(name) == expected


def test_register_format_validates_name_extensions_and_type(csv_registered: None) -> None:
    with pytest.raises(ArgumentError, match="'csv' is already registered; pass replace=True"):
        register_format(CsvIdsFormat())
    assert register_format(CsvIdsFormat(), replace=True).name == "csv"

    class Clash(CsvIdsFormat):
        name = "tsv"
        extensions = (".tsv", ".jsonl")

    with pytest.raises(ArgumentError, match=r"extension '.jsonl' is already the format 'jsonl'"):
        register_format(Clash())

    class Upper(CsvIdsFormat):
        name = "tsv"
        extensions = (".TSV",)

    with pytest.raises(ArgumentError, match=r"lower-case '.ending'.*Got '.TSV' instead"):
        register_format(Upper())

    class BadName(CsvIdsFormat):
        name = "Tab Separated"

    with pytest.raises(ArgumentError, match=r"lower-case word.*Got 'Tab Separated' instead"):
        register_format(BadName())
    with pytest.raises(
        ArgumentError, match=r"must be an InputFormat instance. Got the class CsvIdsFormat instead"
    ):
        register_format(CsvIdsFormat)  # type: ignore[arg-type]
    assert "tsv" not in format_names()
    with pytest.raises(ArgumentError, match=r"must be one of jsonl, .*csv. Got 'tsv' instead"):
        get_format("tsv")


def test_docs_inputs_table_is_the_generated_one() -> None:
    page = (ROOT / "docs" / "ingest.md").read_text(encoding="utf-8")
    assert formats_table() in page, (
        "docs/ingest.md's inputs table differs from the registry; paste "
        "mixle.corpus.ingestion.formats.formats_table() there:\n" + formats_table()
    )


@pytest.mark.parametrize("fmt", input_formats(), ids=lambda fmt: fmt.name)
def test_every_extension_is_named_in_its_docs_row(fmt: InputFormat) -> None:
    for ending in fmt.extensions:
        assert f"{ending}`" in fmt.doc.files, f"{fmt.name}: {ending} missing from {fmt.doc.files}"


def test_ingest_help_lists_every_format_with_its_extensions(
    csv_registered: None, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(["ingest", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "{jsonl,parquet,npy,npz,megatron,text,csv}" in text
    for fmt in input_formats():
        assert f"{fmt.name}: {' '.join(fmt.extensions)}" in text


def test_extra_format_is_ingested_end_to_end_by_the_cli(
    csv_registered: None, tmp_path: Path
) -> None:
    docs = [doc for doc in random_docs(3, 50) if doc.size]  # a blank CSV line is no document
    data = tmp_path / "data"
    data.mkdir()
    _write_csv(data / "a.csv", docs[:30])
    write_jsonl(data / "b.jsonl", docs[30:])
    (data / "notes.log").write_text("skipped: unknown extension in a directory\n")
    assert main(["ingest", str(data), str(tmp_path / "out"), "-q", "--workers", "1"]) == 0
    assert read_all(tmp_path / "out") == [doc.tolist() for doc in docs]
    assert [item.format for item in resolve_inputs([str(data)])] == ["csv", "jsonl"]


def test_extra_format_is_a_choice_of_input_format_and_names_bad_lines(
    csv_registered: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = tmp_path / "ids.txt"
    ids.write_text("1,2,3\n\n4,x\n")
    out = tmp_path / "out"
    code = main(["ingest", str(ids), str(out), "--input-format", "csv", "--workers", "1"])
    assert code == 2
    assert f"{ids} line 3: not comma-separated integers" in capsys.readouterr().err
    assert not out.exists() or not (out / "manifest.json").exists()
    skipped = ["--on-error", "skip", "--rejects", str(tmp_path / "rejects.jsonl")]
    code = main(["ingest", str(ids), str(out), "--input-format", "csv", "-q", *skipped])
    assert code == 0 and read_all(out) == [[1, 2, 3]]
    rejects = [json.loads(line) for line in (tmp_path / "rejects.jsonl").read_text().splitlines()]
    assert rejects == [{"where": f"{ids} line 3", "reason": "not comma-separated integers"}]


def test_extra_format_gets_its_docs_row(csv_registered: None) -> None:
    assert formats_table().splitlines()[-1] == (
        "| `csv` | `.csv` | one line of comma-separated ids | one per file |"
    )


def test_entry_point_format_runs_in_spawned_workers(tmp_path: Path) -> None:
    """An installed package's entry point is found by the CLI and by each spawned
    worker, which import mixle and never the code that defines the format."""
    site = tmp_path / "site"
    info = site / "mixle_csv_ids-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mixle-csv-ids\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[mixle_input_formats]\ncsv = tests.corpus.ingestion.csv_format:CsvIdsFormat\n"
    )
    docs = random_docs(5, 40)
    data = tmp_path / "data"
    data.mkdir()
    _write_csv(data / "a.csv", docs[:20])
    _write_csv(data / "b.csv", docs[20:])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(site)]))
    command = [sys.executable, "-m", "mixle.cli", "ingest", str(data), str(tmp_path / "out")]
    result = subprocess.run(
        [*command, "--workers", "2", "-q"], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert read_all(tmp_path / "out") == [doc.tolist() for doc in docs if doc.size]


# -- origins -------------------------------------------------------------------------
def _inputs(directory: Path) -> tuple[list[np.ndarray], dict[str, list[str]]]:
    """One input per built-in format, holding the same documents."""
    docs = [doc for doc in random_docs(11, 60, max_len=30) if doc.size]
    write_jsonl(directory / "a.jsonl", docs)
    pq.write_table(
        pa.table({"input_ids": [doc.tolist() for doc in docs]}),
        directory / "a.parquet",
        row_group_size=17,
    )
    (directory / "npy").mkdir()
    for index, doc in enumerate(docs):
        np.save(directory / "npy" / f"{index:03d}.npy", doc)
    offsets = np.concatenate(([0], np.cumsum([doc.size for doc in docs])))
    np.savez(directory / "a.npz", tokens=np.concatenate(docs), offsets=offsets)
    write_megatron(directory / "m", [[doc] for doc in docs], np.dtype(np.int32))
    return docs, {
        "jsonl": [str(directory / "a.jsonl")],
        "parquet": [str(directory / "a.parquet")],
        "npy": [str(directory / "npy")],
        "npz": [str(directory / "a.npz")],
        "megatron": [str(directory / "m")],
    }


@pytest.mark.parametrize("name", ["jsonl", "parquet", "npy", "npz", "megatron"])
def test_record_origins_name_the_file_and_record_of_every_document(
    tmp_path: Path, name: str
) -> None:
    docs, inputs = _inputs(tmp_path)
    files = resolve_inputs(inputs[name])
    options = ReadOptions(("input_ids", "tokens"), None, "none")
    seen = []
    for unit in plan_units(files, 97, 97):
        base = line_base(unit)
        for batch in read_unit(unit, options):
            origins = record_origins(unit, batch)
            assert origins.kind == get_format(name).record_kind
            assert origins.file.shape == origins.record.shape == batch.lengths.shape
            ends = np.cumsum(batch.lengths)
            for d, (file, record) in enumerate(zip(origins.file, origins.record, strict=True)):
                path = unit.files[int(file)]
                # JSONL lines count from the unit's first line; the line base makes
                # them lines of the file; other records are already the file's.
                record = int(record) + (base if name == "jsonl" else 0)
                # An npy document is its file; every other record indexes the documents.
                expected = np.load(path) if name == "npy" else docs[record]
                document = batch.tokens[int(ends[d] - batch.lengths[d]) : int(ends[d])]
                assert np.array_equal(document, expected), (name, path, record)
                seen.append((path, record))
    assert len(seen) == len(docs) and len(set(seen)) == len(docs)


def test_record_origins_of_text_are_the_first_line_of_each_paragraph(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\n\nthree\n\n\nfour\nfive\n")
    (tmp_path / "b.txt").write_text("six\n")
    files = resolve_inputs([str(tmp_path)])
    [unit] = plan_units(files, 1 << 20)
    [batch] = read_unit(unit, ReadOptions(("text",), None, "paragraphs"))
    origins = record_origins(unit, batch)
    found = [
        (Path(unit.files[f]).name, int(r))
        for f, r in zip(origins.file, origins.record, strict=True)
    ]
    assert found == [("a.txt", 0), ("a.txt", 3), ("a.txt", 6), ("b.txt", 0)]


def _installed(site: Path, entry_points: str) -> None:
    """A distribution in ``site`` declaring ``entry_points`` (an entry_points.txt body)."""
    info = site / "mixle_formats_test-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: mixle-formats-test\nVersion: 1.0\n"
    )
    (info / "entry_points.txt").write_text(entry_points)


def test_entry_point_formats_load_once_and_broken_ones_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry, "_REGISTRY", registry._REGISTRY.copy())
    monkeypatch.setattr(registry, "_entry_points_loaded", False)
    _installed(
        tmp_path,
        "[mixle_input_formats]\ncsv = tests.corpus.ingestion.csv_format:CsvIdsFormat\n"
        "broken = no_such_module_for_mixle:Format\n",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert get_format("jsonl").name == "jsonl"  # known names need no scan...
    assert detect_format("a.tokens.npy") == "npz"
    assert registry._entry_points_loaded is False
    with pytest.raises(ArgumentError, match=r"input format 'broken' \(entry point "):
        detect_format("a.csv")  # ...an unknown one loads them, and a broken plugin is named
    monkeypatch.setattr(registry, "_REGISTRY", registry._REGISTRY.copy())
    monkeypatch.setattr(registry, "_entry_points_loaded", False)
    (tmp_path / "mixle_formats_test-1.0.dist-info" / "entry_points.txt").write_text(
        "[mixle_input_formats]\ntsv = tests.corpus.ingestion.csv_format:CsvIdsFormat\n"
    )
    with pytest.raises(ArgumentError, match=r"must be the input format named 'tsv'. Got 'csv'"):
        get_format("tsv")


def test_an_entry_point_cannot_claim_names_a_loaded_format_detects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``x.ids.jsonl`` is JSONL before the entry points load; it stays JSONL after."""
    monkeypatch.setattr(registry, "_REGISTRY", registry._REGISTRY.copy())
    monkeypatch.setattr(registry, "_entry_points_loaded", False)
    _installed(tmp_path, "[mixle_input_formats]\nids = tests.corpus.ingestion.test_formats:Ids\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        ArgumentError, match=r"ending in '.ids.jsonl' are already the format 'jsonl'"
    ):
        format_names()


class Ids(CsvIdsFormat):
    """A format claiming names that JSONL detects (for the test above)."""

    name = "ids"
    extensions = (".ids.jsonl",)
