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
