"""Issue #9: ``torchrun --nproc_per_node 2 -m mixle.cli train`` (gloo, CPU), killed and resumed.

The whole job (launcher and both ranks) is SIGKILLed at a random step and resumed; the
final weights and optimizer state equal an uninterrupted 2-rank run's bit for bit, and
the metrics log lists, for every step, both ranks' batches: distinct, consecutive, the
same as the uninterrupted run's.
"""

from __future__ import annotations

import random
import signal
from pathlib import Path

import pytest

from mixle.train import read_checkpoint
from tests.torchrun_launch import torchrun_command
from tests.train._helpers import (
    assert_bitwise_equal,
    final_tensors,
    last_step,
    run_until,
    step_records,
)

STEPS = 24


def _torchrun(corpus: Path, run: Path, objective: str) -> list[str]:
    return torchrun_command(
        2,
        "-m",
        "mixle.cli",
        "train",
        str(corpus),
        *("--d-model", "32", "--n-layer", "1", "--n-head", "2", "--block", "32"),
        *("--batch-size", "4", "--threads", "1", "--log-every", "0", "--no-progress"),
        *("--steps", str(STEPS), "--checkpoint-dir", str(run), "--checkpoint-every", "3"),
        *("--holdout", "8", "--eval-every", "12", "--eval-batches", "4"),
        *("--objective", objective),
        # The per-rank layout: each rank's own cursor (the global layout is in test_elastic).
        *("--layout", "per-rank"),
        "--resume",
    )


@pytest.mark.parametrize("objective", ["packed", pytest.param("windows", marks=pytest.mark.slow)])
def test_two_rank_torchrun_job_killed_and_resumed_is_exact(
    text_corpus: Path, tmp_path: Path, objective: str
) -> None:
    reference = tmp_path / "reference"
    run_until(_torchrun(text_corpus, reference, objective), reference / "metrics.jsonl", None, 0)
    run = tmp_path / "killed"
    target = random.Random().randint(4, STEPS - 8)
    code, killed = run_until(
        _torchrun(text_corpus, run, objective), run / "metrics.jsonl", target, signal.SIGKILL
    )
    stopped_at = last_step(run / "metrics.jsonl")
    assert killed and code == -signal.SIGKILL, (target, stopped_at, code)
    run_until(_torchrun(text_corpus, run, objective), run / "metrics.jsonl", None, 0)
    context = f"killed at step {stopped_at} (target {target})"

    records = step_records(run / "metrics.jsonl")
    assert records == step_records(reference / "metrics.jsonl"), context
    assert [r[0] for r in records] == list(range(1, STEPS + 1))
    for rank in (0, 1):
        ids = [tuple(r[4][rank][:2]) for r in records]
        assert ids == [(0, i) for i in range(STEPS)], context  # consecutive, none skipped
    hashes = [batch[2] for r in records for batch in r[4]]
    assert len(set(hashes)) == len(hashes)  # the ranks never see the same batch
    assert_bitwise_equal(final_tensors(reference), final_tensors(run))
    checkpoint = read_checkpoint(str(run / f"step-{STEPS:08d}"), rank=1, world_size=2)
    assert checkpoint.rank_state["stream"]["stream"]["rank"] == 1
