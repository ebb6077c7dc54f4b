"""A plan written as a file (``--write-plan``) and units run from it (``--plan``).

Tasks that run from one plan file produce the corpus of a plain local run, byte for
byte; a plan file that is not JSON, of another format version, or that no longer
matches its inputs or the given options is refused before any unit runs, naming the
file, with exit status 2.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mixle.cli import main
from mixle.corpus import IngestOptions, IngestPlan, commit_ingest, ingest, plan_ingest
from mixle.corpus.ingestion.plan import PLAN_VERSION
from mixle.errors import ArgumentError, IngestError
from tests.corpus.ingestion.distributed_helpers import OPTIONS, run_cli, tree

WORK = ".mixle-ingest"
FLAGS = ["--unit-size", "2048", "--shard-size", "1024", "--vocab-size", "1000", "-q"]


@pytest.fixture
def plan_file(tmp_path: Path, inputs: list[str]) -> Path:
    path = tmp_path / "plan.json"
    assert main(["ingest", *inputs, *FLAGS, "--write-plan", str(path)]) == 0
    return path


def test_write_plan_writes_the_plan_of_the_inputs_and_converts_nothing(
    tmp_path: Path, inputs: list[str], plan_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = plan_ingest(inputs, IngestOptions(**OPTIONS))
    written = IngestPlan.read(plan_file)
    assert written.plan_id == expected.plan_id
    assert json.loads(plan_file.read_text())["version"] == PLAN_VERSION
    assert sorted(os.listdir(tmp_path)) == ["in-0.jsonl", "in-1.jsonl", "plan.json"]
    assert "--plan-out" in _help(capsys)  # the alias is listed too


def _help(capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["ingest", "--help"])
    return capsys.readouterr().out


def test_two_task_processes_from_a_plan_file_then_commit_equal_the_local_run(
    tmp_path: Path, plan_file: Path, local_run: Path
) -> None:
    out = tmp_path / "tasks"
    for task in ("0/2", "1/2"):
        run_cli("ingest", "--plan", str(plan_file), str(out), "--task", task, "-q")
    assert not (out / "manifest.json").exists()
    run_cli("ingest", "--commit", str(out), "-q")
    assert tree(out) == tree(local_run)


def test_a_plan_file_without_task_runs_every_unit_in_a_pool_and_commits(
    tmp_path: Path, plan_file: Path, local_run: Path
) -> None:
    out = tmp_path / "pool"
    assert main(["ingest", "--plan", str(plan_file), str(out), "--workers", "2", "-q"]) == 0
    assert tree(out) == tree(local_run)


def test_the_library_runs_a_plan_object_and_refuses_other_inputs(
    tmp_path: Path, inputs: list[str], local_run: Path
) -> None:
    plan = plan_ingest(inputs, IngestOptions(**OPTIONS))
    out = tmp_path / "lib"
    ingest(inputs, out, plan=plan, task="0/1")
    assert not (out / "manifest.json").exists()
    commit_ingest(out)
    assert tree(out) == tree(local_run)
    with pytest.raises(ArgumentError, match=r"inputs in the plan: .* / given"):
        ingest(inputs[:1], tmp_path / "other", plan=plan, task="0/1")


def _fails(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(args) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1, error  # one line, no traceback
    return error


def test_a_plan_file_that_is_not_json_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    error = _fails(["ingest", "--plan", str(bad), str(tmp_path / "out"), "--task", "0/2"], capsys)
    assert str(bad) in error and "cannot read the ingest plan" in error
    assert not (tmp_path / "out").exists()


def test_a_plan_file_of_another_version_is_refused_naming_it(
    tmp_path: Path, plan_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    value = json.loads(plan_file.read_text())
    value["version"] = PLAN_VERSION + 1
    plan_file.write_text(json.dumps(value))
    error = _fails(["ingest", "--plan", str(plan_file), str(tmp_path / "out")], capsys)
    assert str(plan_file) in error and f"version {PLAN_VERSION + 1}" in error
    with pytest.raises(IngestError, match="plan format version"):
        IngestPlan.read(plan_file)


def test_a_plan_file_missing_a_key_is_refused_naming_it(
    tmp_path: Path, plan_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    value = json.loads(plan_file.read_text())
    del value["units"]
    plan_file.write_text(json.dumps(value))
    error = _fails(["ingest", "--plan", str(plan_file), str(tmp_path / "out")], capsys)
    assert str(plan_file) in error and "not an ingest plan" in error


def test_inputs_that_changed_since_the_plan_are_refused(
    tmp_path: Path, inputs: list[str], plan_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with open(inputs[1], "a", encoding="utf-8") as handle:
        handle.write('{"input_ids": [1, 2, 3]}\n')
    error = _fails(["ingest", "--plan", str(plan_file), str(tmp_path / "out")], capsys)
    assert "no longer the files the plan was made of" in error and inputs[1] in error
    assert not (tmp_path / "out").exists()


def test_inputs_or_options_that_differ_from_the_plan_are_refused_with_both_sides(
    tmp_path: Path, inputs: list[str], plan_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "out")
    error = _fails(["ingest", "--plan", str(plan_file), inputs[0], out], capsys)
    assert f"inputs in plan file {plan_file}" in error and "/ given" in error
    error = _fails(["ingest", "--plan", str(plan_file), out, "--vocab-size", "2000"], capsys)
    assert "vocab_size in plan file" in error and "1000 / given: 2000" in error


def test_bad_plan_mode_combinations_are_usage_errors(
    tmp_path: Path, inputs: list[str], plan_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "out")
    error = _fails(["ingest", "--plan", str(plan_file), "--commit", out], capsys)
    assert "--commit and --plan cannot be combined" in error
    error = _fails(["ingest", *inputs, "--write-plan", str(tmp_path / "p.json")], capsys)
    assert "--vocab-size" in error  # a plan runs distributed: the dtype must be fixed
    assert not (tmp_path / "p.json").exists()
