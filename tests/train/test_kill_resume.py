"""Issue #9: a real ``python -m mixle.cli train`` killed at random steps resumes exactly.

The reference run trains uninterrupted. The other run is SIGKILLed (and once SIGTERMed,
which must checkpoint and exit 143) at randomly drawn steps and resumed with
``--resume`` each time. Final parameters and optimizer state must be bitwise equal, and
the metrics logs must list the same batches, in the same order, each step exactly once.
"""

from __future__ import annotations

import json
import random
import signal
from pathlib import Path

import pytest

from mixle.train import latest_checkpoint, read_metrics
from tests.train._helpers import (
    assert_bitwise_equal,
    cli,
    final_tensors,
    last_step,
    run_until,
    step_records,
)

STEPS = 90
_MODEL = ["--d-model", "32", "--n-layer", "1", "--n-head", "2", "--block", "32"]
_RUN = ["--batch-size", "4", "--threads", "1", "--log-every", "0", "--no-progress"]


def _command(corpus: Path, run: Path, every: int, extra: tuple[str, ...]) -> list[str]:
    return cli(
        str(corpus),
        *_MODEL,
        *_RUN,
        *extra,
        "--steps",
        str(STEPS),
        "--checkpoint-dir",
        str(run),
        "--checkpoint-every",
        str(every),
        "--keep-last",
        "2",
        "--resume",
    )


def _kill_and_resume(
    corpus: Path,
    tmp_path: Path,
    interruptions: list[int],
    every: int,
    extra: tuple[str, ...] = (),
) -> None:
    reference = tmp_path / "reference"
    run_until(_command(corpus, reference, every, extra), reference / "metrics.jsonl", None, 0)
    run = tmp_path / "killed"
    metrics = run / "metrics.jsonl"
    rng = random.Random()
    seed = rng.randrange(2**32)
    rng.seed(seed)
    kills = []
    for sig in interruptions:
        target = min(STEPS - 20, last_step(metrics) + rng.randint(2, 20))
        code, killed = run_until(_command(corpus, run, every, extra), metrics, target, sig)
        kills.append((sig, target, last_step(metrics), code))
        assert killed, f"the run finished before step {target} (seed {seed}, {kills})"
        if sig == signal.SIGTERM:
            # Graceful: finish the step, checkpoint it, exit 128 + SIGTERM.
            assert code == 128 + signal.SIGTERM, kills
            newest = latest_checkpoint(str(run))
            assert newest is not None and newest.endswith(f"step-{last_step(metrics):08d}")
    run_until(_command(corpus, run, every, extra), metrics, None, 0)
    context = f"seed {seed}, interruptions (signal, target, last logged step, exit): {kills}"
    starts = [r for r in read_metrics(str(metrics)) if r["type"] == "start"]
    # A kill before the first checkpoint restarts from scratch (and the log with it).
    assert 2 <= len(starts) <= len(interruptions) + 1, context
    assert starts[0]["resumed_from"] is None, context
    assert all(r["resumed_from"] for r in starts[1:]), context
    records = step_records(metrics)
    assert [r[0] for r in records] == list(range(1, STEPS + 1)), context
    assert records == step_records(reference / "metrics.jsonl"), context
    assert_bitwise_equal(final_tensors(reference), final_tensors(run))


def test_sigkilled_cli_run_resumes_bitwise_exactly(text_corpus: Path, tmp_path: Path) -> None:
    _kill_and_resume(
        text_corpus, tmp_path, [signal.SIGKILL, signal.SIGTERM, signal.SIGKILL], every=5
    )


def test_sigkilled_length_bandit_run_resumes_bitwise_exactly(
    text_corpus: Path, tmp_path: Path
) -> None:
    # 16 rows a step: an epoch is about 20 steps, so the bandit replans epochs on the
    # rewards it was given, and its state (and the last step's loss) must resume.
    _kill_and_resume(
        text_corpus,
        tmp_path,
        [signal.SIGKILL, signal.SIGKILL],
        every=5,
        extra=("--length-buckets", "100,180", "--batch-size", "16"),
    )
    reference, killed = (
        json.loads((Path(str(latest_checkpoint(str(run)))) / "rank-00000.json").read_text())
        for run in (tmp_path / "reference", tmp_path / "killed")
    )
    assert len(killed["stream"]["selector"]["planned"]) >= 3, killed["stream"]["selector"]
    # Every reward, to the bit: the weights of the epochs still to come.
    assert killed["stream"]["selector"] == reference["stream"]["selector"]
    assert killed["length_rewards"] == reference["length_rewards"]


@pytest.mark.slow
def test_many_sigkills_including_mid_checkpoint_resume_exactly(
    text_corpus: Path, tmp_path: Path
) -> None:
    # Checkpointing every step makes kills land inside checkpoint writes often.
    _kill_and_resume(text_corpus, tmp_path, [signal.SIGKILL] * 8, every=1)
