"""``mixle train --block-schedule`` (issue #27, item 1): context length per phase.

The model is built for the largest block, every step logs its phase and block (metrics
and console), the tokens per step stay constant across the switch, and a run stopped
before the switch and resumed after it is bitwise the uninterrupted one.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from mixle.cli import main
from mixle.errors import ArgumentError
from mixle.train import read_metrics, train
from tests.train._helpers import assert_bitwise_equal, final_tensors, step_records, tiny_config
from tests.train.test_kill_resume import _kill_and_resume

_SCHEDULE = "16:0.5,64"  # 4 x 16 tokens a step, then 1 x 64


def _run(corpus: Path, run: Path, steps: int, **changes: Any) -> list[str]:
    lines: list[str] = []
    changes.setdefault("block_schedule", _SCHEDULE)
    config = tiny_config(
        corpus,
        block=16,
        steps=steps,
        checkpoint_dir=str(run),
        checkpoint_every=1000,
        log_every=1,
        **changes,
    )
    train(config, log=lines.append)
    return lines


def test_the_schedule_switches_blocks_and_logs_each_step(text_corpus: Path, tmp_path: Path) -> None:
    lines = _run(text_corpus, tmp_path / "run", steps=8)
    steps = [
        r for r in read_metrics(str(tmp_path / "run" / "metrics.jsonl")) if r["type"] == "step"
    ]
    assert [(r["phase"], r["block"]) for r in steps] == [(0, 16)] * 4 + [(1, 64)] * 4
    assert {r["tokens"] for r in steps} == {64}  # 4 x 16 = 1 x 64 targets a step
    assert [r["batches"][0][1] for r in steps] == [64 * k for k in range(8)]  # token cursor
    progress = [line for line in lines if line.startswith("step ")]
    assert progress[0].endswith("| phase 0 block 16") and progress[-1].endswith(
        "| phase 1 block 64"
    )


def test_stopped_before_the_switch_and_resumed_after_it_is_bitwise(
    text_corpus: Path, tmp_path: Path
) -> None:
    # A token count: the boundary does not move with --steps (a fraction would, and a
    # resume with other --steps would be refused as another schedule).
    by_tokens = {"block_schedule": "16:256,64"}
    _run(text_corpus, tmp_path / "reference", steps=8, **by_tokens)
    _run(text_corpus, tmp_path / "split", steps=3, **by_tokens)  # phase 0 only
    _run(text_corpus, tmp_path / "split", steps=8, resume=True, **by_tokens)
    assert step_records(tmp_path / "split" / "metrics.jsonl") == step_records(
        tmp_path / "reference" / "metrics.jsonl"
    )
    assert_bitwise_equal(final_tensors(tmp_path / "reference"), final_tensors(tmp_path / "split"))


def test_resume_with_another_schedule_is_refused_by_field(
    text_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["train", str(text_corpus), "--d-model", "16", "--n-layer", "1", "--n-head", "2"]
    base += ["--block", "16", "--batch-size", "4", "--threads", "1", "--no-progress"]
    base += ["--checkpoint-dir", str(tmp_path / "run"), "--steps", "4"]
    assert main([*base, "--block-schedule", "16:0.5,64"]) == 0
    capsys.readouterr()
    assert main([*base, "--block-schedule", "16:0.25,64", "--resume"]) == 2
    assert "block_schedule in checkpoint" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"layout": "per-rank", "length_buckets": "100"},
            r"length_buckets='100' \(needs None with layout='per-rank'\)",
        ),
        ({"objective": "windows"}, r"objective='windows' \(needs 'packed'\)"),
        ({"packing": "best_fit"}, r"packing='best_fit' \(needs 'concatenate'\)"),
        ({"block": 32}, r"block=32 \(needs the schedule's first block, 16\)"),
        ({"steps": None}, "fractions of the run's tokens: give --steps"),
        ({"block_schedule": "16:0.5,0"}, "phase 1 `block` must be a positive integer"),
        ({"block_schedule": "16:0.5,32:0.4,64"}, "phase 1 `until` 0.4 is not after"),
    ],
)
def test_bad_schedules_are_refused_before_any_batch(
    text_corpus: Path, changes: dict[str, Any], message: str
) -> None:
    config: dict[str, Any] = {"block": 16, "block_schedule": _SCHEDULE, "steps": 8, **changes}
    with pytest.raises(ArgumentError, match=message):
        tiny_config(text_corpus, **config)


def test_cli_bad_schedule_is_one_line_exit_2(
    text_corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", str(text_corpus), "--block-schedule", "64:zz,256"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "phase 0 '64:zz' must read [BATCHx]BLOCK[:UNTIL]" in err[0]


@pytest.mark.slow
def test_sigkilled_run_resumes_bitwise_across_the_switch(text_corpus: Path, tmp_path: Path) -> None:
    # --block 32 --batch-size 4: 128 tokens a step, then 1 row of 128 after 50% of 90 steps.
    _kill_and_resume(
        text_corpus,
        tmp_path,
        [signal.SIGKILL, signal.SIGKILL, signal.SIGKILL],
        every=5,
        extra=("--block-schedule", "32:0.5,128"),
    )
    steps = [
        r for r in read_metrics(str(tmp_path / "killed" / "metrics.jsonl")) if r["type"] == "step"
    ]
    assert {r["block"] for r in steps} == {32, 128}
