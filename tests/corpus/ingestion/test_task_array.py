"""Plan / run one unit / commit, and task-array mode (``--task i/n`` + ``--commit``).

The corpus must be byte-identical (every file, so the fingerprint too) to a local
run, for any number of tasks; commit must refuse unfinished, foreign and damaged
units by name, read no token bytes, and never leave a half-published corpus.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.corpus import (
    IngestOptions,
    IngestPlan,
    commit_ingest,
    ingest,
    open_corpus,
    plan_ingest,
    run_unit,
)
from mixle.errors import ArgumentError, CorpusExistsError, IngestError
from tests.corpus.ingestion.distributed_helpers import OPTIONS, make_inputs, run_cli, tree

WORK = ".mixle-ingest"


def _run_all(plan: IngestPlan, out: Path, order: list[int]) -> None:
    for index in order:
        run_unit(plan, index, out)


def test_plan_is_a_pure_function_and_round_trips_through_a_file(
    tmp_path: Path, inputs: list[str]
) -> None:
    one = plan_ingest(inputs, IngestOptions(workers=1, **OPTIONS))
    two = plan_ingest(inputs, IngestOptions(workers=7, **OPTIONS))
    assert one == two and one.plan_id == two.plan_id
    assert len(one.units) > 4
    one.write(tmp_path / "plan.json")
    again = IngestPlan.read(tmp_path / "plan.json")
    assert again == one and again.plan_id == one.plan_id
    other = plan_ingest(inputs, IngestOptions(**dict(OPTIONS, shard_size=2048)))
    assert other.plan_id != one.plan_id


def test_units_in_any_order_then_commit_equal_the_local_run(
    tmp_path: Path, inputs: list[str], local_run: Path
) -> None:
    plan = plan_ingest(inputs, IngestOptions(**OPTIONS))
    out = tmp_path / "units"
    _run_all(plan, out, list(reversed(range(len(plan.units)))))
    run_unit(plan, 2, out)  # a rerun of a finished unit changes nothing
    summary = commit_ingest(out)
    assert tree(out) == tree(local_run)
    assert open_corpus(out).fingerprint == open_corpus(local_run).fingerprint
    assert summary.documents == len(open_corpus(out))
    assert commit_ingest(out).documents == summary.documents  # a repeated commit is a no-op


@settings(max_examples=4, deadline=None)
@given(count=st.integers(1, 6))
def test_any_number_of_tasks_equals_the_local_run(
    tmp_path_factory: pytest.TempPathFactory, count: int
) -> None:
    base = tmp_path_factory.mktemp("tasks")
    inputs = make_inputs(base, seed=11)
    local = base / "local"
    ingest(inputs, local, workers=2, **OPTIONS)
    out = base / "array"
    options = IngestOptions(task=f"0/{count}", **OPTIONS)
    plan = plan_ingest(inputs, options)
    for index in range(count):
        ingest(inputs, out, task=(index, count), **OPTIONS)
        assert not (out / "manifest.json").exists()  # nothing visible before the commit
    assert plan.plan_id == IngestPlan.read(out / WORK / "plan.json").plan_id
    commit_ingest(out)
    assert tree(out) == tree(local)


def test_two_task_processes_and_the_commit_command_equal_the_single_run(
    tmp_path: Path, inputs: list[str], local_run: Path
) -> None:
    out = tmp_path / "array"
    flags = ["--unit-size", "2048", "--shard-size", "1024", "--vocab-size", "1000", "-q"]
    procs = [
        threading.Thread(
            target=run_cli, args=("ingest", *inputs, str(out), "--task", f"{i}/2", *flags)
        )
        for i in range(2)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    run_cli("ingest", "--commit", str(out), "-q")
    assert tree(out) == tree(local_run)


def test_the_same_unit_run_twice_concurrently_is_safe(
    tmp_path: Path, inputs: list[str], local_run: Path
) -> None:
    plan = plan_ingest(inputs, IngestOptions(**OPTIONS))
    out = tmp_path / "twice"
    everything = list(range(len(plan.units)))
    threads = [threading.Thread(target=_run_all, args=(plan, out, everything)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    commit_ingest(out)
    assert tree(out) == tree(local_run)


def test_commit_lists_the_units_that_have_not_finished(tmp_path: Path, inputs: list[str]) -> None:
    plan = plan_ingest(inputs, IngestOptions(**OPTIONS))
    out = tmp_path / "partial"
    _run_all(plan, out, [i for i in range(len(plan.units)) if i not in (1, 3)])
    with pytest.raises(
        IngestError, match=r"2 of \d+ work units have not finished: unit-000001, unit-000003"
    ):
        commit_ingest(out)
    assert not (out / "manifest.json").exists()
    result = run_cli("ingest", "--commit", str(out), check=False)
    assert result.returncode == 2 and "unit-000001, unit-000003" in result.stderr
    _run_all(plan, out, [1, 3])
    commit_ingest(out)
    assert len(open_corpus(out)) == 300


def test_units_of_another_plan_are_refused_by_name(tmp_path: Path, inputs: list[str]) -> None:
    plan = plan_ingest(inputs, IngestOptions(**OPTIONS))
    other = plan_ingest(inputs, IngestOptions(**dict(OPTIONS, shard_size=4096)))
    out = tmp_path / "mixed"
    run_unit(plan, 0, out)
    with pytest.raises(
        IngestError, match=r"different plan.*shard_size in the output's plan: 1024 / now: 4096"
    ):
        run_unit(other, 1, out)
    # A unit directory copied in from another plan's output.
    elsewhere = tmp_path / "elsewhere"
    run_unit(other, 1, elsewhere)
    _run_all(plan, out, list(range(1, len(plan.units))))
    shutil.rmtree(out / WORK / "unit-000001")
    shutil.copytree(elsewhere / WORK / "unit-000001", out / WORK / "unit-000001")
    with pytest.raises(IngestError, match=r"units from a different plan.*unit-000001 \(plan"):
        commit_ingest(out)
    assert not (out / "manifest.json").exists()


@pytest.mark.parametrize("damage", ["missing", "truncated", "digest"])
def test_commit_refuses_a_damaged_unit_naming_unit_and_file(
    tmp_path: Path, inputs: list[str], damage: str
) -> None:
    plan = plan_ingest(inputs, IngestOptions(**OPTIONS))
    out = tmp_path / damage
    _run_all(plan, out, list(range(len(plan.units))))
    unit = out / WORK / "unit-000002"
    record = json.loads((unit / "done.json").read_text())
    shard = record["shards"][0]["tokens"]
    if damage == "missing":
        (unit / shard).unlink()
        expected = f"unit unit-000002: shard file {shard} is missing"
    elif damage == "truncated":
        data = (unit / shard).read_bytes()
        (unit / shard).write_bytes(data[:-2])
        expected = f"unit unit-000002: shard file {shard} has {len(data) - 2} bytes"
    else:
        record["shards"][0]["tokens_sha256"] = "0" * 64
        (unit / "done.json").write_text(json.dumps(record))
        expected = f"unit unit-000002: shard file {shard} has another digest"
    with pytest.raises(IngestError, match=expected):
        commit_ingest(out)
    assert not (out / "manifest.json").exists()


def test_commit_reads_no_token_bytes(
    tmp_path: Path, inputs: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = plan_ingest(inputs, IngestOptions(**OPTIONS))
    out = tmp_path / "noread"
    _run_all(plan, out, list(range(len(plan.units))))
    opened: list[str] = []
    real_open = open

    def watching_open(file: object, *args: object, **kwargs: object) -> object:
        opened.append(os.fspath(file) if isinstance(file, str | os.PathLike) else str(file))
        return real_open(file, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr("builtins.open", watching_open)
    commit_ingest(out)
    monkeypatch.undo()
    assert not [name for name in opened if name.endswith((".tokens", ".offsets"))]
    assert len(open_corpus(out)) == 300


def test_distributed_mode_needs_the_dtype_up_front(tmp_path: Path, inputs: list[str]) -> None:
    with pytest.raises(ArgumentError, match=r"--vocab-size N .* or --dtype"):
        ingest(inputs, tmp_path / "x", task="0/2", unit_size=2048)
    result = run_cli("ingest", *inputs, str(tmp_path / "y"), "--task", "0/2", check=False)
    assert result.returncode == 2 and "--vocab-size" in result.stderr
    plan = plan_ingest(inputs, IngestOptions(unit_size=2048))
    with pytest.raises(ArgumentError, match="needs the token dtype"):
        run_unit(plan, 0, tmp_path / "z")
    with pytest.raises(ArgumentError, match="'i/n' with 0 <= i < n"):
        IngestOptions(task="2/2", vocab_size=10)


def test_units_refuse_an_output_that_holds_a_corpus(inputs: list[str], local_run: Path) -> None:
    plan = plan_ingest(inputs, IngestOptions(**OPTIONS))
    with pytest.raises(CorpusExistsError, match="already holds a corpus"):
        run_unit(plan, 0, local_run)


def test_a_bad_record_in_a_unit_names_the_file_and_line(tmp_path: Path) -> None:
    lines = [json.dumps({"input_ids": [1, 2, 3]}) for _ in range(200)]
    lines[150] = json.dumps({"input_ids": [1, 5000]})
    source = tmp_path / "bad.jsonl"
    source.write_text("\n".join(lines) + "\n")
    options = IngestOptions(**OPTIONS)
    plan = plan_ingest([str(source)], options)
    failing = next(
        unit.index
        for unit in plan.units
        if unit.start <= source.read_text().index("5000") < unit.stop
    )
    assert failing > 0  # the line number must count the lines of earlier units
    with pytest.raises(IngestError, match=rf"{source} line 151.*5000"):
        run_unit(plan, failing, tmp_path / "out")
    assert not list((tmp_path / "out" / WORK).glob("unit-*"))
