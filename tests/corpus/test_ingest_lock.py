"""One writer per ingest output (issue #18): a second ``mixle ingest`` into an output
another live process is writing fails at once naming that pid, never deletes its work
(even with ``--overwrite``) and is never told to ``--resume`` it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mixle.corpus import verify_corpus
from mixle.corpus.ingestion.output_guard import LOCK_NAME
from tests.corpus.hardening_helpers import ROOT, run_mixle

_HOLDER = """
import os, sys, time
from mixle.corpus.ingestion.output_guard import hold_output
out = sys.argv[1]
with hold_output(out):
    os.makedirs(os.path.join(out, ".mixle-ingest"), exist_ok=True)
    open(os.path.join(out, ".mixle-ingest", "work-of-the-holder"), "w").close()
    print("ready", flush=True)
    time.sleep(600)
"""


def _start_holder(out: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(out)],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
    return holder


def _input(tmp_path: Path, lines: int = 3) -> Path:
    path = tmp_path / "a.jsonl"
    path.write_text("".join(json.dumps({"input_ids": [i, i + 1]}) + "\n" for i in range(lines)))
    return path


def test_second_writer_gets_in_use_by_pid_and_deletes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    holder = _start_holder(out)
    try:
        for extra in ([], ["--overwrite"], ["--resume"]):
            result = run_mixle("ingest", str(_input(tmp_path)), str(out), *extra)
            assert result.returncode == 2, result.stderr
            assert f"in use by pid {holder.pid}" in result.stderr
            assert "Traceback" not in result.stderr and "--resume to continue" not in result.stderr
            assert (out / ".mixle-ingest" / "work-of-the-holder").exists()
    finally:
        holder.kill()
        holder.communicate()
    # The kernel released the dead holder's lock: the output is usable again.
    result = run_mixle("ingest", str(_input(tmp_path)), str(out), "--overwrite")
    assert result.returncode == 0, result.stderr
    assert verify_corpus(out).ok and not (out / LOCK_NAME).exists()


def test_two_real_ingests_with_overwrite(tmp_path: Path) -> None:
    source = _input(tmp_path, lines=400_000)
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    first = subprocess.Popen(
        [sys.executable, "-m", "mixle.cli", "ingest", str(source), str(out), "--overwrite"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (out / LOCK_NAME).exists():
            assert first.poll() is None and time.monotonic() < deadline, (
                "first ingest never started"
            )
            time.sleep(0.01)
        second = run_mixle("ingest", str(source), str(out), "--overwrite")
        finished_first = first.poll() is not None
        _, errors = first.communicate(timeout=300)
        assert first.returncode == 0, errors
    finally:
        if first.poll() is None:
            first.send_signal(signal.SIGKILL)
        first.communicate()
    if not finished_first:  # the usual case: the second ran while the first held the lock
        assert second.returncode == 2 and f"in use by pid {first.pid}" in second.stderr
    assert verify_corpus(out).ok


# --- Every entry point takes the lock (issue #32, class 6) --------------------------

_TASK_HOLDER = """
import os, sys, time
from mixle.corpus.ingestion.output_guard import hold_output
out, shared = sys.argv[1], sys.argv[2] == "shared"
with hold_output(out, shared=shared):
    os.makedirs(os.path.join(out, ".mixle-ingest"), exist_ok=True)
    open(os.path.join(out, ".mixle-ingest", "work-of-the-holder"), "w").close()
    print("ready", flush=True)
    time.sleep(600)
"""

_FLAGS = ["--vocab-size", "1000", "--unit-size", "64", "-q"]


def _start(out: Path, mode: str) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", _TASK_HOLDER, str(out), mode],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
    return holder


def _stop(holder: subprocess.Popen[str]) -> None:
    holder.kill()
    holder.communicate()


def _corpus_at(tmp_path: Path) -> Path:
    """An output holding a committed corpus (what --overwrite would replace)."""
    out = tmp_path / "out"
    assert run_mixle("ingest", str(_input(tmp_path)), str(out), *_FLAGS).returncode == 0
    return out


@pytest.mark.parametrize(
    "mode",
    ["plan", "dask", "commit", "local"],
    ids=["--plan", "--executor dask", "--commit", "local"],
)
def test_overwrite_or_commit_while_a_task_runs_is_refused_and_removes_nothing(
    tmp_path: Path, mode: str
) -> None:
    out = _corpus_at(tmp_path)
    plan = tmp_path / "plan.json"
    source = str(_input(tmp_path))
    assert run_mixle("ingest", source, "--write-plan", str(plan), *_FLAGS).returncode == 0
    commands = {
        "plan": ["--plan", str(plan), str(out), "--overwrite"],
        "dask": [source, str(out), "--executor", "dask", "--overwrite", "--workers", "1", *_FLAGS],
        "commit": ["--commit", str(out)],
        "local": [source, str(out), "--overwrite", *_FLAGS],
    }
    holder = _start(out, "shared")  # a running task of a task array
    try:
        result = run_mixle("ingest", *commands[mode])
        assert result.returncode == 2, result.stderr
        assert (
            "OutputInUseError" in result.stderr and f"in use by pid {holder.pid}" in result.stderr
        )
        assert result.stderr.count("\n") == 1
        assert (out / ".mixle-ingest" / "work-of-the-holder").exists()
        assert (out / "manifest.json").exists() and verify_corpus(out).ok
    finally:
        _stop(holder)


@pytest.mark.parametrize("mode", ["task", "plan task", "dask"])
def test_the_task_and_dask_paths_take_the_lock(tmp_path: Path, mode: str) -> None:
    out = tmp_path / "out"
    source = str(_input(tmp_path))
    plan = tmp_path / "plan.json"
    assert run_mixle("ingest", source, "--write-plan", str(plan), *_FLAGS).returncode == 0
    commands = {
        "task": [source, str(out), "--task", "0/2", *_FLAGS],
        "plan task": ["--plan", str(plan), str(out), "--task", "1/2", "-q"],
        "dask": [source, str(out), "--executor", "dask", "--workers", "1", *_FLAGS],
    }
    holder = _start(out, "exclusive")  # a local ingest writing the output
    try:
        result = run_mixle("ingest", *commands[mode])
        assert result.returncode == 2, result.stderr
        assert f"in use by pid {holder.pid}" in result.stderr
        assert sorted(os.listdir(out / ".mixle-ingest")) == ["work-of-the-holder"]
    finally:
        _stop(holder)


def test_tasks_of_one_plan_share_the_output(tmp_path: Path) -> None:
    out = tmp_path / "out"
    source = str(_input(tmp_path, lines=40))
    holder = _start(out, "shared")  # another task of the same array, still running
    try:
        result = run_mixle("ingest", source, str(out), "--task", "0/2", *_FLAGS)
        assert result.returncode == 0, result.stderr
    finally:
        _stop(holder)
    assert run_mixle("ingest", source, str(out), "--task", "1/2", *_FLAGS).returncode == 0
    assert run_mixle("ingest", "--commit", str(out), "-q").returncode == 0
    assert verify_corpus(out).ok and not (out / LOCK_NAME).exists()


def test_a_lock_held_shared_is_not_taken_exclusively_in_the_same_process(tmp_path: Path) -> None:
    from mixle.corpus.ingestion.output_guard import hold_output
    from mixle.errors import OutputInUseError

    out = str(tmp_path / "out")
    with hold_output(out, shared=True):
        with hold_output(out, shared=True):  # re-entrant
            pass
        with pytest.raises(OutputInUseError, match="this process's own task"), hold_output(out):
            pass
    with hold_output(out), hold_output(out), hold_output(out, shared=True):
        pass  # the exclusive holder may run units and commit in-process
    assert not os.path.exists(out)


def test_two_plans_racing_to_claim_an_output_cannot_both_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mixle.corpus import IngestOptions, plan_ingest
    from mixle.corpus.ingestion import units
    from mixle.corpus.ingestion.area import OutputArea
    from mixle.errors import IngestError

    source = str(_input(tmp_path, lines=40))
    first = plan_ingest([source], IngestOptions(vocab_size=1000, unit_size=64))
    second = plan_ingest([source], IngestOptions(vocab_size=1000, unit_size=128))
    area = OutputArea(str(tmp_path / "out"))
    units.ensure_plan(first, area)
    recorded = (tmp_path / "out" / ".mixle-ingest" / "plan.json").read_bytes()
    real = units.read_output_plan
    looked: list[bool] = []

    def racing(out: OutputArea) -> object:
        if not looked:  # the second task looked before the first one wrote
            looked.append(True)
            return None
        return real(out)

    monkeypatch.setattr(units, "read_output_plan", racing)
    with pytest.raises(IngestError, match="different plan"):
        units.ensure_plan(second, area)
    assert (tmp_path / "out" / ".mixle-ingest" / "plan.json").read_bytes() == recorded
