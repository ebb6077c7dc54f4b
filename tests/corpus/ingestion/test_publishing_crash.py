"""SIGKILL a real ``python -m mixle.cli ingest`` at random moments, then ``--resume``.

Properties checked at every kill point: the output holds no manifest (or, when
overwriting, exactly the previous one), and ``--resume`` yields byte for byte the
corpus of an uninterrupted run.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import mixle.corpus.storage.publish as publish_module
from mixle.corpus import ingest
from tests.corpus.ingest_helpers import random_docs, tree_bytes, write_jsonl

ROOT = Path(__file__).resolve().parents[3]
OPTIONS = ["--unit-size", "6KiB", "--shard-size", "2KiB", "--workers", "2", "--quiet"]


def _command(source: Path, output: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "mixle.cli", "ingest", str(source), str(output), *OPTIONS, *extra]


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


def _kill_at(command: list[str], delay: float) -> None:
    process = subprocess.Popen(command, cwd=ROOT, start_new_session=True)
    time.sleep(delay)
    # The whole group, as an OOM kill or power loss would take the workers too.
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@pytest.fixture(scope="module")
def crash_input(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("crash")
    source = write_jsonl(folder / "input.jsonl", random_docs(21, 1500, vocab=60_000))
    old = write_jsonl(folder / "old.jsonl", random_docs(22, 50))
    started = time.monotonic()
    result = _run(_command(source, folder / "reference"))
    duration = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    return {
        "source": source,
        "old": old,
        "reference": tree_bytes(folder / "reference"),
        "duration": duration,
    }


def _kill_and_resume(tmp_path: Path, crash_input: dict[str, Any], seed: int, kills: int) -> None:
    rng = random.Random(seed)
    source = crash_input["source"]
    for attempt in range(kills):
        output = tmp_path / f"out-{attempt}"
        overwrite = attempt % 2 == 1
        extra: list[str] = []
        old_manifest = None
        if overwrite:  # replacing an existing corpus: the old manifest must survive
            assert _run(_command(crash_input["old"], output)).returncode == 0
            old_manifest = (output / "manifest.json").read_bytes()
            extra = ["--overwrite"]
        delay = rng.uniform(0.3, max(crash_input["duration"], 0.6))
        _kill_at(_command(source, output, *extra), delay)
        manifest = output / "manifest.json"
        if manifest.exists():
            # The previous corpus, or the complete new one (killed while cleaning up).
            content = manifest.read_bytes()
            finished = content == crash_input["reference"]["manifest.json"]
            assert content == old_manifest or finished, f"kill at {delay:.2f}s left a new manifest"
        result = _run(_command(source, output, "--resume", *extra))
        assert result.returncode == 0, result.stderr
        assert tree_bytes(output) == crash_input["reference"], f"kill at {delay:.2f}s"


def test_sigkill_at_random_points_then_resume_matches_uninterrupted(
    tmp_path: Path, crash_input: dict[str, Any]
) -> None:
    _kill_and_resume(tmp_path, crash_input, seed=1, kills=3)


@pytest.mark.slow
def test_sigkill_soak(tmp_path: Path, crash_input: dict[str, Any]) -> None:
    _kill_and_resume(tmp_path, crash_input, seed=2, kills=16)


@pytest.mark.parametrize("moves_before_crash", [0, 3])
def test_crash_inside_publish_is_finished_by_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moves_before_crash: int
) -> None:
    source = write_jsonl(tmp_path / "a.jsonl", random_docs(23, 300))
    options: dict[str, Any] = {"unit_size": 2048, "shard_size": 1024}
    ingest(source, tmp_path / "reference", **options)
    write_jsonl(tmp_path / "old.jsonl", random_docs(24, 900))
    ingest(tmp_path / "old.jsonl", tmp_path / "out", shard_size=256)
    real = os.replace
    count = {"n": 0}

    def crashing_replace(src: str, dst: str) -> None:
        if ".mixle-ingest" in src and ".mixle-ingest" not in dst:
            if count["n"] == moves_before_crash:
                raise KeyboardInterrupt
            count["n"] += 1
        real(src, dst)

    with monkeypatch.context() as patch:
        patch.setattr(publish_module.os, "replace", crashing_replace)
        with pytest.raises(KeyboardInterrupt):
            ingest(source, tmp_path / "out", overwrite=True, **options)
    assert not (tmp_path / "out" / "manifest.json").exists()
    ingest(source, tmp_path / "out", resume=True, **options)
    assert tree_bytes(tmp_path / "out") == tree_bytes(tmp_path / "reference")
