"""Edited ingest plan files are refused, not trusted (issue #32, classes 4, 5 and 10).

A plan's units must be the ones its own files and options imply: a deleted unit, a
duplicated or overlapping range, a negative start, a unit naming a file that is not
one of the plan's inputs, a job that the options do not imply are each refused before
any work, with one error naming the plan file, the unit (index) or key and the field.
A plan path that is a FIFO or a link to ``/dev/zero`` is refused, never read; a plan
nested 100k deep is a named error, not a ``RecursionError``.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mixle.cli import main
from mixle.corpus import IngestOptions, IngestPlan, ingest, plan_ingest
from mixle.errors import IngestError
from tests.corpus.hardening_helpers import deadline
from tests.corpus.ingestion.distributed_helpers import OPTIONS, tree

Edit = Callable[[dict[str, Any]], None]


def _renumber(plan: dict[str, Any]) -> None:
    for position, unit in enumerate(plan["units"]):
        unit["index"] = position


def _delete_unit(plan: dict[str, Any]) -> None:
    del plan["units"][5]
    _renumber(plan)


def _delete_last_unit(plan: dict[str, Any]) -> None:
    del plan["units"][-1]


def _duplicate_range(plan: dict[str, Any]) -> None:
    plan["units"].insert(4, copy.deepcopy(plan["units"][3]))
    _renumber(plan)


def _negative_start(plan: dict[str, Any]) -> None:
    plan["units"][0]["start"] = -100


def _overlap(plan: dict[str, Any]) -> None:
    plan["units"][4]["start"] -= 10


def _past_the_end(plan: dict[str, Any]) -> None:
    plan["units"][-1]["stop"] += 4096


def _moved_boundary(plan: dict[str, Any]) -> None:
    # Contiguous and in range, so only the units the inputs imply reveal it.
    plan["units"][0]["stop"] -= 100
    plan["units"][1]["start"] -= 100


def _foreign_file(plan: dict[str, Any], path: str) -> None:
    plan["units"][2]["path"] = path


def _foreign_input(plan: dict[str, Any], path: str) -> None:
    plan["files"][0]["path"] = path
    for unit in plan["units"]:
        if unit["input"] == 0:
            unit["path"] = path


def _job_dtype(plan: dict[str, Any]) -> None:
    plan["job"]["dtype"] = "float64"


def _job_eos(plan: dict[str, Any]) -> None:
    plan["job"]["append_eos"] = 7


def _options_dtype(plan: dict[str, Any]) -> None:
    plan["source"]["options"]["dtype"] = "float64"


EDITS: dict[str, tuple[Edit, str]] = {
    "deleted unit": (_delete_unit, r"unit 5 field 'start'"),
    "deleted last unit": (_delete_last_unit, r"unit \d+ field 'stop' is \d+; expected the file's"),
    "duplicated range": (_duplicate_range, r"unit 4 field 'start'"),
    "negative start": (_negative_start, r"unit 0 field 'start' is -100"),
    "overlapping range": (_overlap, r"unit 4 field 'start'"),
    "range past the end": (_past_the_end, r"unit \d+ field 'stop'"),
    "moved boundary": (
        _moved_boundary,
        r"unit 0 field 'stop' is \d+; expected \d+, as the plan's inputs",
    ),
    "job dtype float64": (_job_dtype, r"job\.dtype is 'float64'"),
    "job differs from options": (_job_eos, r"job\.append_eos is 7"),
    "options dtype float64": (_options_dtype, r"source\.options\.dtype is 'float64'"),
}


@pytest.fixture
def plan_dict(inputs: list[str]) -> dict[str, Any]:
    return plan_ingest(inputs, IngestOptions(**OPTIONS)).to_dict()


def _write(path: Path, plan: dict[str, Any]) -> Path:
    path.write_text(json.dumps(plan))
    return path


@pytest.mark.parametrize("name", list(EDITS))
def test_an_edited_plan_is_refused_naming_file_unit_and_field(
    tmp_path: Path, plan_dict: dict[str, Any], name: str
) -> None:
    edit, expected = EDITS[name]
    edit(plan_dict)
    path = _write(tmp_path / "plan.json", plan_dict)
    out = tmp_path / "out"
    with pytest.raises(IngestError, match=expected) as caught:
        ingest([], out, plan=str(path), task="0/1")
    assert str(path) in str(caught.value)
    assert not out.exists()  # refused before any work


@pytest.mark.parametrize("edit", [_foreign_file, _foreign_input])
def test_a_unit_naming_a_file_outside_the_plans_inputs_is_refused(
    tmp_path: Path, plan_dict: dict[str, Any], edit: Callable[[dict[str, Any], str], None]
) -> None:
    secret = tmp_path / "secret.jsonl"
    secret.write_text(json.dumps({"input_ids": [1, 2, 3]}) + "\n")
    edit(plan_dict, str(secret))
    path = _write(tmp_path / "plan.json", plan_dict)
    with pytest.raises(IngestError, match=r"unit \d+ field 'path'|changed|missing|new") as caught:
        ingest([], tmp_path / "out", plan=str(path))
    assert str(path) in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_the_intact_plan_still_gives_the_local_corpus(
    tmp_path: Path, plan_dict: dict[str, Any], local_run: Path
) -> None:
    path = _write(tmp_path / "plan.json", plan_dict)
    ingest([], tmp_path / "out", plan=str(path), workers=1)
    assert tree(tmp_path / "out") == tree(local_run)


def test_an_edited_plan_object_is_refused_too(inputs: list[str], tmp_path: Path) -> None:
    plan = plan_ingest(inputs, IngestOptions(**OPTIONS))
    edited = plan.to_dict()
    _moved_boundary(edited)
    with pytest.raises(IngestError, match=r"unit 0 field 'stop'"):
        ingest([], tmp_path / "out", plan=IngestPlan.from_dict(edited), task="0/1")


@pytest.mark.parametrize("nesting", ["[" * 100_000, '{"units": ' * 100_000], ids=["list", "object"])
def test_a_deeply_nested_plan_is_one_named_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], nesting: str
) -> None:
    path = tmp_path / "deep.json"
    path.write_text(nesting)
    code = main(["ingest", "--plan", str(path), str(tmp_path / "out"), "--task", "0/1", "-q"])
    error = capsys.readouterr().err
    assert code == 2 and error.count("\n") == 1
    assert "IngestError" in error and str(path) in error and "nested" in error


def test_the_cli_reports_an_edited_plan_on_one_line(
    tmp_path: Path, plan_dict: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    _job_dtype(plan_dict)
    path = _write(tmp_path / "plan.json", plan_dict)
    code = main(["ingest", "--plan", str(path), str(tmp_path / "out"), "-q"])
    error = capsys.readouterr().err
    assert code == 2 and error.count("\n") == 1
    assert "IngestError" in error and "job.dtype is 'float64'" in error and str(path) in error


def test_a_fifo_plan_is_refused_without_hanging(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    os.mkfifo(path)
    with deadline(10), pytest.raises(IngestError, match=r"FIFO"):
        IngestPlan.read(path)


def test_a_plan_linked_to_dev_zero_is_refused_without_reading(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.symlink_to("/dev/zero")
    with deadline(10), pytest.raises(IngestError, match=r"character device"):
        IngestPlan.read(path)


def test_a_fifo_plan_in_the_output_is_refused_without_hanging(
    tmp_path: Path, inputs: list[str]
) -> None:
    out = tmp_path / "out"
    (out / ".mixle-ingest").mkdir(parents=True)
    os.mkfifo(out / ".mixle-ingest" / "plan.json")
    with deadline(10), pytest.raises(IngestError, match=r"FIFO"):
        ingest(inputs, out, task="0/2", **OPTIONS)


def test_a_plan_object_with_a_forged_job_is_refused(inputs: list[str], tmp_path: Path) -> None:
    plan = plan_ingest(inputs, IngestOptions(**OPTIONS))
    forged = IngestPlan(plan.source, plan.files, plan.units, dict(plan.job, append_eos=3))
    with pytest.raises(IngestError, match=r"the plan is not an ingest plan.*job\.append_eos is 3"):
        ingest([], tmp_path / "out", plan=forged, task="0/1")
    assert not (tmp_path / "out").exists()
