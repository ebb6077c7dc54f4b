"""``mixle train --mixture`` and ``mixle inspect --mixture``: budgets, accounting, resume."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mixle.errors import ArgumentError, CheckpointError
from mixle.train import read_metrics, train
from tests.train._helpers import (
    ROOT,
    assert_bitwise_equal,
    cli,
    cli_env,
    final_tensors,
    last_step,
    run_until,
    step_records,
    tiny_config,
    write_text_corpus,
)

STEPS = 40


def _write_mix(
    directory: Path, corpora: Path, *, phases: str = "", text_weight: float = 0.25
) -> Path:
    """``directory/mix.toml`` over ``corpora/big`` (weight 0.75) and ``corpora/small``."""
    mix = directory / "mix.toml"
    mix.write_text(
        "[[source]]\n"
        'name = "big"\n'
        f'path = "{corpora / "big"}"\n'
        "weight = 0.75\n\n"
        "[[source]]\n"
        'name = "small"\n'
        f'path = "{corpora / "small"}"\n'
        f"weight = {text_weight}\n"
        "max_epochs = 40\n" + phases
    )
    return mix


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("mixture")
    write_text_corpus(directory / "big", documents=96, seed=1)
    write_text_corpus(directory / "small", documents=8, seed=2)
    return directory


def _command(mix: Path, run: Path, *extra: str) -> list[str]:
    return cli(
        "--mixture",
        str(mix),
        *("--d-model", "32", "--n-layer", "1", "--n-head", "2", "--block", "32"),
        *("--batch-size", "4", "--threads", "1", "--log-every", "0", "--no-progress"),
        *("--steps", str(STEPS), "--checkpoint-dir", str(run), "--checkpoint-every", "4"),
        "--resume",
        *extra,
    )


def test_killed_and_resumed_mixture_run_is_exact(corpora: Path, tmp_path: Path) -> None:
    mix = _write_mix(tmp_path, corpora)
    reference = tmp_path / "reference"
    run_until(_command(mix, reference), reference / "metrics.jsonl", None, 0)
    run = tmp_path / "killed"
    metrics = run / "metrics.jsonl"
    for sig, target in ((signal.SIGKILL, 9), (signal.SIGTERM, 21)):
        _, killed = run_until(_command(mix, run), metrics, target, sig)
        assert killed
    run_until(_command(mix, run), metrics, None, 0)
    assert step_records(metrics) == step_records(reference / "metrics.jsonl")
    assert_bitwise_equal(final_tensors(reference), final_tensors(run))
    shares = [r["mixture"] for r in read_metrics(str(metrics)) if r["type"] == "step"]
    expected = [
        r["mixture"] for r in read_metrics(str(reference / "metrics.jsonl")) if r["type"] == "step"
    ]
    assert shares == expected and len(shares) == STEPS
    final = shares[-1]
    assert final["big"]["rows"] == 3 * STEPS * 4 // 4 and final["small"]["rows"] == STEPS
    end = [r for r in read_metrics(str(metrics)) if r["type"] == "end"][-1]
    assert end["summary"]["mixture"] == final
    assert last_step(metrics) == STEPS


def test_appending_a_phase_continues_and_any_other_change_is_refused(
    corpora: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    mix = _write_mix(tmp_path, corpora)
    config = tiny_config(mix, mixture=str(mix), steps=10, checkpoint_dir=str(run))
    train(config, log=lambda _: None)
    appended = "\n[[phase]]\nstart_row = 40\nweights = { big = 0.5, small = 0.5 }\n"
    _write_mix(tmp_path, corpora, phases=appended)
    plot = tmp_path / "loss.png"
    summary = train(config.replace(steps=20, resume=True, plot=str(plot)), log=lambda _: None)
    shares = tmp_path / "loss.mixture.png"  # per-source token shares by step
    assert shares.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert summary.mixture is not None
    assert summary.mixture["small"]["rows"] == 10 + 20  # 1 of 4 rows, then 2 of 4
    _write_mix(tmp_path, corpora, text_weight=0.5)
    with pytest.raises(CheckpointError, match="phases in checkpoint"):
        train(config.replace(steps=30, resume=True), log=lambda _: None)


def test_budget_is_checked_before_training(corpora: Path, tmp_path: Path) -> None:
    mix = _write_mix(tmp_path, corpora)
    config = tiny_config(mix, mixture=str(mix), steps=100_000, checkpoint_dir=str(tmp_path / "r"))
    with pytest.raises(
        ArgumentError, match=r"source 'small' needs [\d.]+ epochs .* max_epochs is 40"
    ):
        train(config, log=lambda _: None)
    assert not (tmp_path / "r").exists() or not list((tmp_path / "r").glob("step-*"))


def test_mixture_config_needs_steps_and_the_global_layout(tmp_path: Path) -> None:
    mix = str(tmp_path / "mix.toml")
    with pytest.raises(ArgumentError, match="steps=None"):
        tiny_config(mix, mixture=mix)
    with pytest.raises(ArgumentError, match="layout='per-rank'"):
        tiny_config(mix, mixture=mix, steps=3, objective="windows", layout="per-rank")
    assert tiny_config(mix, mixture=mix, steps=3, objective="windows").objective == "windows"


def _inspect(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mixle.cli", "inspect", *args],
        env=cli_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_inspect_prints_the_budget_table_and_flags_an_exceeded_maximum(
    corpora: Path, tmp_path: Path
) -> None:
    mix = _write_mix(tmp_path, corpora)
    done = _inspect("--mixture", str(mix), "--steps", "100", "--block", "32", "--batch-size", "4")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].split() == ["source", "rows", "tokens", "epochs", "max_epochs"]
    assert lines[2].split()[:2] == ["big", "300"] and lines[3].split()[:2] == ["small", "100"]
    over = _inspect("--mixture", str(mix), "--steps", "100000", "--block", "32")
    assert over.returncode == 1
    assert "EXCEEDS max_epochs" in over.stdout
    assert "source 'small' needs" in over.stderr and "max_epochs is 40" in over.stderr
