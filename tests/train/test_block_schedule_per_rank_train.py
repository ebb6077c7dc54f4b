"""``mixle train --block-schedule --layout per-rank`` (issue #27, item 1): each rank's own
stream in phases.

Every step logs its phase and block, the tokens per step stay constant across the
switch, each rank's cursor counts tokens of its own stream, a run stopped before the
switch and resumed after it is bitwise the uninterrupted one (in process, SIGKILLed
CLI runs, and a two-rank torchrun job, in which both ranks switch at the same step),
and ``mixle show`` rebuilds every step's batches with the digests the run logged.
"""

from __future__ import annotations

import random
import signal
from pathlib import Path
from typing import Any

import pytest

from mixle.provenance import resolve_run, show_step
from mixle.train import read_metrics, train
from tests._torchrun import torchrun_command
from tests.train._helpers import (
    assert_bitwise_equal,
    final_tensors,
    last_step,
    run_until,
    step_records,
    tiny_config,
)
from tests.train.test_kill_resume import _kill_and_resume


def _run(corpus: Path, run: Path, steps: int, schedule: str, **changes: Any) -> list[str]:
    lines: list[str] = []
    config = tiny_config(
        corpus,
        block=16,
        steps=steps,
        layout="per-rank",
        block_schedule=schedule,
        checkpoint_dir=str(run),
        checkpoint_every=1000,
        log_every=1,
        **changes,
    )
    train(config, log=lines.append)
    return lines


def _steps(run: Path) -> list[dict[str, Any]]:
    return [r for r in read_metrics(str(run / "metrics.jsonl")) if r["type"] == "step"]


def _assert_shown_as_trained(run: Path) -> None:
    spec = resolve_run(str(run))
    for record in _steps(run):
        digests = [digest for _, _, digest in record["batches"]]
        assert [r.digest for r in show_step(spec, record["step"]).ranks] == digests, record


def test_the_schedule_switches_each_ranks_stream_and_logs_each_step(
    text_corpus: Path, tmp_path: Path
) -> None:
    lines = _run(text_corpus, tmp_path / "run", 8, "16:0.5,64")
    steps = _steps(tmp_path / "run")
    assert [(r["phase"], r["block"]) for r in steps] == [(0, 16)] * 4 + [(1, 64)] * 4
    assert {r["tokens"] for r in steps} == {64}  # 4 x 16 = 1 x 64 targets a step
    assert [r["batches"][0][1] for r in steps] == [64 * k for k in range(8)]  # token cursor
    progress = [line for line in lines if line.startswith("step ")]
    assert progress[0].endswith("| phase 0 block 16")
    assert progress[-1].endswith("| phase 1 block 64")
    _assert_shown_as_trained(tmp_path / "run")


def test_stopped_before_the_switch_and_resumed_after_it_is_bitwise(
    text_corpus: Path, tmp_path: Path
) -> None:
    schedule = "16:256,64"  # a token count: the boundary does not move with --steps
    _run(text_corpus, tmp_path / "reference", 8, schedule)
    _run(text_corpus, tmp_path / "split", 3, schedule)  # phase 0 only
    lines = _run(text_corpus, tmp_path / "split", 8, schedule, resume=True)
    assert any("(epoch 0, token 192)" in line for line in lines), lines
    assert step_records(tmp_path / "split" / "metrics.jsonl") == step_records(
        tmp_path / "reference" / "metrics.jsonl"
    )
    assert_bitwise_equal(final_tensors(tmp_path / "reference"), final_tensors(tmp_path / "split"))


@pytest.mark.slow
def test_sigkilled_per_rank_run_resumes_bitwise_across_the_switch(
    text_corpus: Path, tmp_path: Path
) -> None:
    _kill_and_resume(
        text_corpus,
        tmp_path,
        [signal.SIGKILL, signal.SIGTERM, signal.SIGKILL],
        every=5,
        extra=("--layout", "per-rank", "--block-schedule", "32:0.5,128"),
    )
    steps = _steps(tmp_path / "killed")
    assert {r["block"] for r in steps} == {32, 128}


STEPS = 24


def _torchrun(corpus: Path, run: Path) -> list[str]:
    return torchrun_command(
        2,
        "-m",
        "mixle.cli",
        "train",
        str(corpus),
        *("--d-model", "32", "--n-layer", "1", "--n-head", "2", "--block", "16"),
        *("--batch-size", "4", "--threads", "1", "--log-every", "0", "--no-progress"),
        *("--steps", str(STEPS), "--checkpoint-dir", str(run), "--checkpoint-every", "3"),
        *("--layout", "per-rank", "--block-schedule", "16:0.5,32:0.75,64"),
        "--resume",
        monitor_interval=0.1,
    )


@pytest.mark.slow
def test_two_rank_job_switches_together_and_resumes_exactly(
    text_corpus: Path, tmp_path: Path
) -> None:
    reference = tmp_path / "reference"
    run_until(_torchrun(text_corpus, reference), reference / "metrics.jsonl", None, 0)
    run = tmp_path / "killed"
    target = random.Random().randint(4, STEPS - 8)
    code, killed = run_until(
        _torchrun(text_corpus, run), run / "metrics.jsonl", target, signal.SIGKILL
    )
    stopped_at = last_step(run / "metrics.jsonl")
    assert killed and code == -signal.SIGKILL, (target, stopped_at, code)
    run_until(_torchrun(text_corpus, run), run / "metrics.jsonl", None, 0)
    context = f"killed at step {stopped_at} (target {target})"
    records = step_records(run / "metrics.jsonl")
    assert records == step_records(reference / "metrics.jsonl"), context
    steps = _steps(run)
    # 2 ranks x 4 x 16 tokens a step: both ranks at the same token of their own stream,
    # the phases switching at steps 13 and 19 (half and three quarters of 24 steps).
    assert all(r["batches"][0][:2] == r["batches"][1][:2] for r in steps), context
    assert [r["block"] for r in steps] == [16] * 12 + [32] * 6 + [64] * 6
    assert all(0 < r["tokens"] <= 128 for r in steps)
    assert_bitwise_equal(final_tensors(reference), final_tensors(run))
    _assert_shown_as_trained(run)
