"""Malformed but re-sealed checkpoints (issue #18): whoever can edit a checkpoint can
recompute its digests, so every restored value is type-checked too, ``meta.json`` is
covered by ``meta_sha256`` and parsed with bounded depth; each case is a
``CheckpointError`` (CLI: exit 2, one line), never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from mixle._io import file_sha256
from mixle.errors import CheckpointError
from mixle.train import latest_checkpoint, read_checkpoint, write_checkpoint
from mixle.train.checkpoint_checks import meta_sha256

ROOT = Path(__file__).resolve().parents[2]


def _write(directory: Path) -> Path:
    return Path(
        write_checkpoint(
            str(directory),
            3,
            rank=0,
            world_size=1,
            rank_state={"stream": {"epoch": 0}},
            tensors={"model": {"w": torch.ones(3)}, "optimizer": {"state": {}}},
            meta={"identity": {"run": 1}, "progress": {"total_tokens": 12}},
        )
    )


def _reseal_meta(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    meta = json.loads((path / "meta.json").read_text())
    edit(meta)
    meta["files"] = {name: file_sha256(str(path / name)) for name in meta["files"]}
    meta["meta_sha256"] = meta_sha256(meta)
    (path / "meta.json").write_text(json.dumps(meta))


def _bare_tensor_model(path: Path) -> None:
    torch.save({"model": torch.ones(3), "optimizer": {}}, path / "model.pt")
    _reseal_meta(path, lambda m: None)


def _progress_list(path: Path) -> None:
    _reseal_meta(path, lambda m: m.update(progress=[1, 2]))


def _deep_meta(path: Path) -> None:
    _reseal_meta(path, lambda m: m.update(config="DEEP"))
    text = (path / "meta.json").read_text()
    (path / "meta.json").write_text(text.replace('"DEEP"', "[" * 100_000 + "]" * 100_000))


def _huge_step(path: Path) -> None:
    text = (path / "meta.json").read_text()
    (path / "meta.json").write_text(text.replace('"step": 3', '"step": ' + "9" * 5000))


def _edited_meta(path: Path) -> None:  # not re-sealed: meta_sha256 must catch it
    meta = json.loads((path / "meta.json").read_text())
    meta["progress"]["total_tokens"] = 10**9
    (path / "meta.json").write_text(json.dumps(meta))


CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "model-is-a-bare-tensor": (_bare_tensor_model, "'model' must be a state dict"),
    "progress-is-a-list": (_progress_list, "`progress` must be a JSON object"),
    "deeply-nested-meta": (_deep_meta, "nested"),
    "5000-digit-step": (_huge_step, "digits"),
    "meta-edited-not-resealed": (_edited_meta, "meta_sha256"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_resealed_checkpoint_is_a_checkpoint_error(tmp_path: Path, case: str) -> None:
    tamper, message = CASES[case]
    path = _write(tmp_path)
    tamper(path)
    with pytest.raises(CheckpointError, match=message):
        read_checkpoint(str(path), rank=0, world_size=1)


def test_meta_json_is_covered_by_its_digest(tmp_path: Path) -> None:
    path = _write(tmp_path)
    meta = json.loads((path / "meta.json").read_text())
    assert meta["meta_sha256"] == meta_sha256(meta)
    assert read_checkpoint(str(path), rank=0, world_size=1).meta["progress"]["total_tokens"] == 12


def _cli(corpus: Path, run: Path) -> list[str]:
    base = [sys.executable, "-m", "mixle.cli", "train", str(corpus), "--n-layer", "1"]
    base += ["--d-model", "16", "--block", "16", "--batch-size", "2", "--threads", "1"]
    return [*base, "--checkpoint-dir", str(run), "--log-every", "0"]


@pytest.fixture(scope="module")
def trained_run(text_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-step CLI run with its checkpoint: each case below tampers with a copy."""
    run = tmp_path_factory.mktemp("hostile") / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    first = subprocess.run(
        [*_cli(text_corpus, run), "--steps", "2"], env=env, capture_output=True, text=True
    )
    assert first.returncode == 0, first.stderr
    return run


@pytest.mark.parametrize(
    "case", ["model-is-a-bare-tensor", "progress-is-a-list", "deeply-nested-meta"]
)
def test_cli_resume_from_a_malformed_checkpoint_exits_2(
    text_corpus: Path, trained_run: Path, tmp_path: Path, case: str
) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    latest = latest_checkpoint(str(run))
    assert latest is not None
    tamper, message = CASES[case]
    tamper(Path(latest))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [*_cli(text_corpus, run), "--steps", "4", "--resume"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "CheckpointError" in result.stderr
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
