"""``mixle train --vsl-buckets``: variable-sequence-length steps, resumed bitwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from mixle.cli import main
from mixle.errors import ArgumentError, CheckpointError
from mixle.train import read_metrics, train
from tests.train._helpers import assert_bitwise_equal, final_tensors, step_records, tiny_config


def _steps(metrics: Path) -> list[dict[str, object]]:
    return [r for r in read_metrics(str(metrics)) if r["type"] == "step"]


def test_cli_trains_on_buckets_with_constant_tokens_per_step(
    text_corpus: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    args = ["train", str(text_corpus), "--d-model", "16", "--n-layer", "1", "--n-head", "2"]
    args += ["--block", "32", "--batch-size", "2", "--steps", "8", "--log-every", "0"]
    args += ["--checkpoint-dir", str(run), "--threads", "1", "--no-progress"]
    args += ["--vsl-buckets", "8", "--vsl-curriculum", "grow_p2"]
    assert main(args) == 0
    steps = _steps(run / "metrics.jsonl")
    lengths = {r["sequence_length"] for r in steps}
    assert lengths <= {8, 16, 32} and len(lengths) > 1
    assert all(0 < int(r["tokens"]) <= 2 * 32 for r in steps)  # type: ignore[call-overload]


# The bandit folds its rewards every 64 steps: the slow case resumes after the first folding.
@pytest.mark.parametrize(
    ("curriculum", "stop", "steps"),
    [
        ("grow_p2", 3, 7),
        ("bandit", 3, 7),
        pytest.param("bandit", 66, 70, marks=pytest.mark.slow),
    ],
)
def test_killed_and_resumed_run_is_bitwise_equal(
    text_corpus: Path, tmp_path: Path, curriculum: str, stop: int, steps: int
) -> None:
    options = {"vsl_buckets": 8, "vsl_curriculum": curriculum, "checkpoint_every": stop}
    whole = tmp_path / "whole"
    train(tiny_config(text_corpus, steps=steps, checkpoint_dir=str(whole), **options))
    part = tmp_path / "part"
    train(tiny_config(text_corpus, steps=stop, checkpoint_dir=str(part), **options))
    train(tiny_config(text_corpus, steps=steps, checkpoint_dir=str(part), resume=True, **options))
    assert step_records(part / "metrics.jsonl") == step_records(whole / "metrics.jsonl")
    assert_bitwise_equal(final_tensors(part), final_tensors(whole))
    # Another curriculum's cursor is refused, naming the field.
    with pytest.raises(CheckpointError, match=f"curriculum in checkpoint: '{curriculum}'"):
        train(
            tiny_config(
                text_corpus,
                steps=steps + 2,
                checkpoint_dir=str(part),
                resume=True,
                **{**options, "vsl_curriculum": "natural"},
            )
        )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"vsl_buckets": 12}, r"`vsl_buckets` must be a power of two with vsl_buckets\. Got 12"),
        ({"vsl_buckets": 64}, "would name no bucket"),
        ({"vsl_buckets": 8, "block": 48}, r"`block` must be a power of two"),
        ({"vsl_buckets": 8, "layout": "per-rank"}, r"layout='per-rank' \(needs 'global'\)"),
        ({"vsl_curriculum": "grow_p2"}, "needs vsl_buckets"),
    ],
)
def test_bad_vsl_options_are_named(
    text_corpus: Path, changes: dict[str, object], message: str
) -> None:
    with pytest.raises(ArgumentError, match=message):
        tiny_config(text_corpus, **changes)


def test_cli_bad_vsl_buckets_exit_2(text_corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", str(text_corpus), "--vsl-buckets", "24"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "`vsl_buckets` must be a power of two" in err[0]
