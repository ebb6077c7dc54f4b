"""``tools/bench_fresh_imports.py``, short form: one round, this tree against itself.

The library commands' children assert that no heavy optional dependency was loaded, so
a facade that starts importing fsspec or pyarrow eagerly fails this run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.tools._run import ROOT, run_tool


@pytest.mark.slow
def test_one_round_reports_every_command(tmp_path: Path) -> None:
    figures = tmp_path / "imports.json"
    run_tool(
        "bench_fresh_imports.py",
        "--baseline", str(ROOT),
        "--rounds", "1",
        "--work", str(tmp_path / "work"),
        "--json", str(figures),
    )  # fmt: skip
    report = json.loads(figures.read_text())
    assert set(report) >= {"import mixle.corpus", "open_corpus(path)[0] + first batch"}
    assert all(row["cpu_s"] > 0 and row["baseline_cpu_s"] > 0 for row in report.values())
    # the lazy facade costs little over the interpreter alone (generous: loaded machines)
    assert report["import mixle.corpus"]["cpu_s"] < report["python -c pass"]["cpu_s"] + 0.1
