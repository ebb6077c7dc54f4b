"""tools/bench_leaf.py keeps working (a smoke run of --quick)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest


def test_bench_leaf_quick_runs_and_reports_the_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    path = Path(__file__).resolve().parents[2] / "tools" / "bench_leaf.py"
    spec = importlib.util.spec_from_file_location("bench_leaf", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_leaf"] = module
    try:
        spec.loader.exec_module(module)
        assert module.main(["--quick", "--rounds", "1", "--steps", "2"]) == 0
    finally:
        del sys.modules["bench_leaf"]
    out = capsys.readouterr().out
    assert "dense (context, targets, loss_mask): stream_fit" in out
    assert "pairs (context, next_tokens): stream_fit" in out
    assert "target overhead <= 10%" in out and "peak RSS" in out
