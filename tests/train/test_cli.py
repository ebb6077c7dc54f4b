"""``mixle train`` command line: argument mapping and error exit codes (in-process)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mixle.cli import main
from mixle.train import read_metrics


def test_cli_trains_and_writes_metrics(
    text_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    args = ["train", str(text_corpus), "--d-model", "16", "--n-layer", "1", "--n-head", "2"]
    args += ["--block", "16", "--batch-size", "2", "--steps", "6", "--log-every", "3"]
    args += ["--checkpoint-dir", str(run), "--threads", "1", "--objective", "windows"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "step 3/6 | loss" in out and "trained 6 step(s)" in out
    start = next(r for r in read_metrics(str(run / "metrics.jsonl")) if r["type"] == "start")
    assert start["config"]["objective"] == "windows" and start["config"]["d_model"] == 16


def test_cli_reports_checkpoint_mismatch_with_exit_code_2(
    text_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = str(tmp_path / "run")
    base = ["train", str(text_corpus), "--n-layer", "1", "--block", "16", "--batch-size", "2"]
    base += ["--checkpoint-dir", run, "--threads", "1", "--log-every", "0"]
    assert main([*base, "--steps", "2", "--d-model", "16"]) == 0
    assert main([*base, "--steps", "4", "--d-model", "32", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "CheckpointError" in err and "run.d_model in checkpoint: 16 / in this run: 32" in err


def test_cli_rejects_invalid_arguments(
    text_corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", str(text_corpus), "--block", "0"]) == 2
    assert "`block` must be a positive integer" in capsys.readouterr().err


def test_cli_missing_corpus_exit_code_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", str(tmp_path / "nope"), "--steps", "1"]) == 2
    assert "CorpusNotFoundError" in capsys.readouterr().err


def test_train_help_imports_no_torch() -> None:
    """``mixle train --help`` builds its flags from the config alone: torch (seconds to
    import) stays unloaded until training starts."""
    probe = (
        "import sys, contextlib, io\n"
        "from mixle.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['train', '--help'])\n"
        "from mixle.train import TrainConfig\n"
        "assert TrainConfig.__name__ == 'TrainConfig'\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"
