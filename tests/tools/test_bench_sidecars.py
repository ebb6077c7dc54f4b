"""``tools/bench_sidecars.py``, short form: both corpora built, timed and deleted."""

from __future__ import annotations

from pathlib import Path

from tests.tools._run import run_tool


def test_short_run_prints_both_corpora_and_cleans_up(tmp_path: Path) -> None:
    work = tmp_path / "work"
    result = run_tool(
        "bench_sidecars.py", "--documents", "9000", "--shards", "8", "--rounds", "1",
        "--work", str(work),
    )  # fmt: skip
    lines = result.stdout.splitlines()
    assert any(line.startswith("large ") and "sidecar 80 bytes" in line for line in lines)
    assert any(line.startswith("many ") and "ratio" in line for line in lines)
    assert not work.exists()
