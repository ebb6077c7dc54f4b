"""``mixle train --mixture --objective windows``: a windows mixture run, killed and resumed.

Every step's windows come from the sources the mixture's schedule assigns; the metrics
log carries the per-source accounting (in windows: one trained target each), and a run
SIGKILLed mid-way and resumed trains on exactly the batches of an uninterrupted run,
ending with the same weights bit for bit.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mixle.train import read_metrics
from tests.train._helpers import (
    ROOT,
    assert_bitwise_equal,
    cli,
    cli_env,
    final_tensors,
    run_until,
    step_records,
    write_mixture,
)

STEPS = 24


@pytest.fixture(scope="module")
def mix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("mixture-windows")
    return write_mixture(directory, documents=(64, 6), seed=3, extra="max_epochs = 3\n")


def _command(mix: Path, run: Path) -> list[str]:
    return cli(
        *("--mixture", str(mix), "--objective", "windows"),
        *("--d-model", "32", "--n-layer", "1", "--n-head", "2", "--block", "32"),
        *("--batch-size", "4", "--threads", "1", "--log-every", "0", "--no-progress"),
        *("--steps", str(STEPS), "--checkpoint-dir", str(run), "--checkpoint-every", "4"),
        "--resume",
    )


def test_windows_mixture_run_killed_and_resumed_is_exact(mix: Path, tmp_path: Path) -> None:
    reference = tmp_path / "reference"
    run_until(_command(mix, reference), reference / "metrics.jsonl", None, 0)
    run = tmp_path / "killed"
    metrics = run / "metrics.jsonl"
    _, killed = run_until(_command(mix, run), metrics, 9, signal.SIGKILL)
    assert killed
    run_until(_command(mix, run), metrics, None, 0)
    assert step_records(metrics) == step_records(reference / "metrics.jsonl")
    assert_bitwise_equal(final_tensors(reference), final_tensors(run))
    records = read_metrics(str(metrics))
    steps = [r for r in records if r["type"] == "step"]
    assert [r["tokens"] for r in steps] == [4] * STEPS  # one target per window
    for step, record in enumerate(steps[-STEPS:], 1):
        assert record["mixture"]["big"]["rows"] == record["mixture"]["big"]["tokens"] == 3 * step
        assert record["mixture"]["small"]["rows"] == step
    starts = [r for r in records if r["type"] == "start"]
    assert starts[-1]["cursor"][1] > 0  # the resumed run started at its saved window


def test_inspect_prints_the_windows_budget(mix: Path) -> None:
    def inspect(steps: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                *(sys.executable, "-m", "mixle.cli", "inspect", "--mixture", str(mix)),
                *("--objective", "windows", "--steps", str(steps), "--block", "32"),
                *("--batch-size", "4"),
            ],
            env=cli_env(),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )

    done = inspect(100)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].endswith("100 steps x 4 windows x block 32")
    assert lines[2].split()[:3] == ["big", "300", "300"]
    assert lines[3].split()[:3] == ["small", "100", "100"]
    over = inspect(100_000)
    assert over.returncode == 1 and "source 'small' needs" in over.stderr
