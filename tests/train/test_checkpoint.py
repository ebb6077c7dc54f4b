"""Checkpoint files: atomic publication, pruning, validation, weights-only loading."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from mixle.errors import CheckpointError
from mixle.train import latest_checkpoint, list_checkpoints, read_checkpoint, write_checkpoint
from mixle.train.checkpoint import (
    check_identity,
    checkpoint_name,
    prune_checkpoints,
    remove_partial_checkpoints,
)

IDENTITY = {"run": {"d_model": 32, "seed": 0}, "corpus": {"fingerprint": "ab"}, "world_size": 1}


def _tensors(value: float = 1.0) -> dict[str, Any]:
    return {"model": {"w": torch.full((3,), value)}, "optimizer": {"state": {}, "param_groups": []}}


def _write(directory: Path, step: int, value: float = 1.0, **changes: Any) -> str:
    arguments: dict[str, Any] = {
        "rank": 0,
        "world_size": 1,
        "rank_state": {"stream": {"epoch": 0, "batch": step}},
        "tensors": _tensors(value),
        "meta": {"identity": IDENTITY},
    }
    arguments.update(changes)
    return write_checkpoint(str(directory), step, **arguments)


def test_round_trip(tmp_path: Path) -> None:
    path = _write(tmp_path, 7, value=2.5)
    assert path == str(tmp_path / "step-00000007")
    ckpt = read_checkpoint(path, rank=0, world_size=1, identity=IDENTITY)
    assert ckpt.step == 7 and ckpt.rank_state == {"stream": {"epoch": 0, "batch": 7}}
    assert torch.equal(ckpt.tensors["model"]["w"], torch.full((3,), 2.5))
    assert sorted(os.listdir(path)) == ["meta.json", "model.pt", "rank-00000.json"]


def test_names_sort_by_step_and_latest_is_newest(tmp_path: Path) -> None:
    for step in (3, 120, 45):
        _write(tmp_path, step)
    assert [s for s, _ in list_checkpoints(str(tmp_path))] == [3, 45, 120]
    assert latest_checkpoint(str(tmp_path)) == str(tmp_path / checkpoint_name(120))
    assert latest_checkpoint(str(tmp_path / "missing")) is None


def test_crash_before_rename_keeps_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path, 1)

    def crash(src: str, dst: str) -> None:
        raise OSError("simulated crash before publication")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated"):
        _write(tmp_path, 2, value=9.0)
    monkeypatch.undo()
    assert [s for s, _ in list_checkpoints(str(tmp_path))] == [1]
    assert os.path.isdir(tmp_path / ".tmp-step-00000002")  # the partial write is invisible
    assert remove_partial_checkpoints(str(tmp_path)) == [str(tmp_path / ".tmp-step-00000002")]
    read_checkpoint(str(tmp_path / "step-00000001"), rank=0, world_size=1)


def test_prune_keeps_newest(tmp_path: Path) -> None:
    for step in range(1, 6):
        _write(tmp_path, step)
    removed = prune_checkpoints(str(tmp_path), 2)
    assert [os.path.basename(p) for p in removed] == [checkpoint_name(s) for s in (1, 2, 3)]
    assert [s for s, _ in list_checkpoints(str(tmp_path))] == [4, 5]
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]


def test_existing_checkpoint_for_same_step_is_kept(tmp_path: Path) -> None:
    path = _write(tmp_path, 4, value=1.0)
    _write(tmp_path, 4, value=5.0)
    ckpt = read_checkpoint(path, rank=0, world_size=1)
    assert torch.equal(ckpt.tensors["model"]["w"], torch.ones(3))


def test_identity_difference_is_named_with_both_values(tmp_path: Path) -> None:
    path = _write(tmp_path, 1)
    other = {**IDENTITY, "run": {"d_model": 64, "seed": 0}, "corpus": {"fingerprint": "cd"}}
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(path, rank=0, world_size=1, identity=other)
    message = str(info.value)
    assert "run.d_model in checkpoint: 32 / in this run: 64" in message
    assert "corpus.fingerprint in checkpoint: 'ab' / in this run: 'cd'" in message
    assert "seed" not in message


def test_world_size_mismatch_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, 1)
    with pytest.raises(CheckpointError, match="written by 1 rank"):
        read_checkpoint(path, rank=0, world_size=2)


@pytest.mark.parametrize("name", ["model.pt", "rank-00000.json"])
def test_corrupt_file_is_detected_by_checksum(tmp_path: Path, name: str) -> None:
    path = Path(_write(tmp_path, 1))
    data = bytearray((path / name).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (path / name).write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=f"{name} is corrupt"):
        read_checkpoint(str(path), rank=0, world_size=1)


def test_missing_rank_file_is_detected(tmp_path: Path) -> None:
    path = Path(_write(tmp_path, 1))
    (path / "rank-00000.json").unlink()
    with pytest.raises(CheckpointError, match=r"rank-00000\.json is missing"):
        read_checkpoint(str(path), rank=0, world_size=1)


class _Payload:
    """Anything a weights-only load must refuse to construct."""


def test_pickled_objects_are_refused_even_with_matching_checksum(tmp_path: Path) -> None:
    path = Path(_write(tmp_path, 1))
    torch.save({"model": _Payload(), "optimizer": {}}, path / "model.pt")
    meta = json.loads((path / "meta.json").read_text())
    from mixle.train.checkpoint_checks import meta_sha256

    meta["files"]["model.pt"] = hashlib.sha256((path / "model.pt").read_bytes()).hexdigest()
    meta["meta_sha256"] = meta_sha256(meta)
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="weights-only"):
        read_checkpoint(str(path), rank=0, world_size=1)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.update(version=2), "version 2"),
        (lambda m: m.update(format="other"), "is not a mixle-checkpoint"),
        (lambda m: m.pop("step"), "no integer `step`"),
    ],
)
def test_malformed_metadata_is_refused(tmp_path: Path, edit: Any, message: str) -> None:
    path = Path(_write(tmp_path, 1))
    meta = json.loads((path / "meta.json").read_text())
    edit(meta)
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=message):
        read_checkpoint(str(path), rank=0, world_size=1)


def test_directory_without_metadata_is_not_a_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"has no meta\.json"):
        read_checkpoint(str(tmp_path), rank=0, world_size=1)


def test_non_json_rank_state_is_a_checkpoint_error(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="not JSON-serialisable"):
        _write(tmp_path, 1, rank_state={"x": object()})
    assert list_checkpoints(str(tmp_path)) == []


def test_check_identity_requires_a_record() -> None:
    with pytest.raises(CheckpointError, match="no identity record"):
        check_identity(None, IDENTITY, "somewhere")
