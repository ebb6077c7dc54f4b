"""Ingest output uploads go through the store's retry policy (issue 28)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mixle.corpus.ingestion.area import OutputArea
from mixle.corpus.storage.remote import RemoteStore


def test_upload_directory_retries_a_transient_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = tmp_path / "unit"
    local.mkdir()
    (local / "a.tokens").write_bytes(b"abc")
    (local / "done.json").write_bytes(b"{}")
    area = OutputArea("memory://area-retries/out")
    assert isinstance(area.store, RemoteStore)
    fs = area.store.fs
    real = fs.put_file
    failures = {"left": 1}

    def flaky(source: str, target: str, **kwargs: Any) -> Any:
        if failures["left"]:
            failures["left"] -= 1
            raise ConnectionResetError("reset by peer")
        return real(source, target, **kwargs)

    monkeypatch.setattr(fs, "put_file", flaky)
    area.upload_directory(str(local), "units/u0", "done.json")
    assert failures["left"] == 0
    assert area.sizes("units/u0") == {"a.tokens": 3, "done.json": 2}
