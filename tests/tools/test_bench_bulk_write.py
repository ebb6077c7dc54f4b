"""``tools/bench_bulk_write.py`` (issue #25 item 4, the bulk writer path): a small run.

Rates are measurements, not asserted; the tool itself compares the ``add_many`` and
``add_flat`` outputs byte for byte (and fails if they differ). What is checked here:
the run passes that check, prints both paths and the 10^9 projection, and deletes its
scratch directory.
"""

from __future__ import annotations

from pathlib import Path

from tests.tools._run import run_tool


def test_small_run_writes_identical_corpora_both_ways_and_cleans_up(tmp_path: Path) -> None:
    work = tmp_path / "work"
    args = ("--documents", "5000", "--chunk", "1500", "--rounds", "1", "--work", str(work))
    out = run_tool("bench_bulk_write.py", *args).stdout
    assert "5,000 documents" in out and "outputs byte-identical" in out
    assert "| `add_many` |" in out and "| `add_flat` |" in out
    assert "projected add_flat time for 10^9 such documents" in out
    assert not work.exists()
