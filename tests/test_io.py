"""mixle._io: atomic, durable writes and file digests shared by the whole package."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from mixle._io import atomic_write, atomic_write_bytes, file_sha256, rename_durably


def test_atomic_write_replaces_the_file_whole(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_text("old")
    with atomic_write(str(target), "w") as handle:
        handle.write("new")
        assert target.read_text() == "old"  # invisible until the context exits
    assert target.read_text() == "new"
    assert os.listdir(tmp_path) == ["state.json"]


def test_failed_atomic_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "manifest.json"
    atomic_write_bytes(str(target), b"old")
    with pytest.raises(RuntimeError, match="boom"), atomic_write(str(target)) as handle:
        handle.write(b"half")
        raise RuntimeError("boom")
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["manifest.json"]


def test_atomic_write_fsyncs_the_file_and_then_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    atomic_write_bytes(str(tmp_path / "a.bin"), b"x")
    assert len(synced) == 2
    assert os.path.basename(synced[0]).startswith(".a.bin.tmp-")
    assert synced[1] == str(tmp_path)


def test_rename_durably_moves_directories_over_nothing(tmp_path: Path) -> None:
    (tmp_path / ".tmp-step").mkdir()
    (tmp_path / ".tmp-step" / "meta.json").write_text("{}")
    rename_durably(str(tmp_path / ".tmp-step"), str(tmp_path / "step"))
    assert (tmp_path / "step" / "meta.json").read_text() == "{}"


@pytest.mark.parametrize("size", [0, 1, (1 << 18) + 7, 3 << 20])
def test_file_sha256_matches_hashlib(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    (tmp_path / "f").write_bytes(data)
    assert file_sha256(str(tmp_path / "f")) == hashlib.sha256(data).hexdigest()
