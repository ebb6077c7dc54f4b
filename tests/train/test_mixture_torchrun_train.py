"""``torchrun --nproc_per_node 2 -m mixle.cli train --mixture`` (gloo, CPU), killed, resumed
on one process with another batch size: the job trains on exactly the global batches and
per-source accounting of an uninterrupted one-process run (packed and windows)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from mixle.train import read_metrics, train
from tests._torchrun import torchrun_command
from tests.train._helpers import cli, run_until, tiny_config, write_mixture

STEPS = 12


@pytest.fixture(scope="module")
def mix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    phase = "\n[[phase]]\nstart_row = 24\nweights = { big = 0.5, small = 0.5 }\n"
    return write_mixture(
        tmp_path_factory.mktemp("mixture-torchrun"), documents=(48, 6), seed=5, extra=phase
    )


def _options(mix: Path, run: Path, objective: str, batch_size: int) -> list[str]:
    return [
        *("--mixture", str(mix), "--objective", objective),
        *("--d-model", "32", "--n-layer", "1", "--n-head", "2", "--block", "32"),
        *("--batch-size", str(batch_size), "--threads", "1", "--log-every", "0"),
        *("--steps", str(STEPS), "--checkpoint-dir", str(run), "--checkpoint-every", "2"),
        *("--no-progress", "--resume"),
    ]


def _trajectory(metrics: Path) -> dict[int, tuple[str, dict[str, object]]]:
    return {
        r["step"]: (r["global_batch"], r["mixture"])
        for r in read_metrics(str(metrics))
        if r["type"] == "step"
    }


@pytest.mark.parametrize("objective", ["packed", pytest.param("windows", marks=pytest.mark.slow)])
def test_two_rank_mixture_job_killed_and_resumed_on_one_rank_is_exact(
    mix: Path, tmp_path: Path, objective: str
) -> None:
    reference = tmp_path / "reference"
    config = tiny_config(
        mix, mixture=str(mix), objective=objective, steps=STEPS, checkpoint_dir=str(reference)
    )
    train(config, log=lambda _: None)
    run = tmp_path / "job"
    job = torchrun_command(
        2, "-m", "mixle.cli", "train", *_options(mix, run, objective, 2), monitor_interval=0.1
    )
    _, killed = run_until(job, run / "metrics.jsonl", 5, signal.SIGKILL)
    assert killed
    run_until(cli(*_options(mix, run, objective, 4)), run / "metrics.jsonl", None, 0)
    got, want = _trajectory(run / "metrics.jsonl"), _trajectory(reference / "metrics.jsonl")
    assert sorted(got) == list(range(1, STEPS + 1))
    assert got == want
    records = read_metrics(str(run / "metrics.jsonl"))
    starts = [r for r in records if r["type"] == "start"]
    assert starts[0]["world_size"] == 2 and starts[-1]["world_size"] == 1
    assert starts[-1]["changed"] == {"world_size": [2, 1], "batch_size": [2, 4]}
    final = want[STEPS][1]
    assert final["small"]["rows"] == 6 + (STEPS - 6) * 2  # 1 of 4 rows, then 2 of 4 from row 24
