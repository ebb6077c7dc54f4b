"""Smoke test of ``tools/bench_workers.py`` (DataLoader scaling, issues #17 and #31, item 5).

Speed-ups on a shared 2-core machine are measurements, not asserted; the test checks
that every configuration ran and produced positive figures, and that the report states
the ratio against the 1.6x target.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from tests.tools._run import run_tool


def test_quick_run_reports_every_configuration(tmp_path: Path) -> None:
    figures = tmp_path / "workers.json"
    result = run_tool(
        "bench_workers.py", "--quick", "--workdir", str(tmp_path / "work"), "--json", str(figures)
    )
    report = json.loads(figures.read_text())
    configs = report["configs"]
    assert {"corpus, 0 workers", "corpus, 1 worker", "corpus, 2 workers"} <= set(configs)
    assert {"StreamLoader, 1 worker", "StreamLoader, 2 workers"} <= set(configs)
    assert {"StreamLoader copying, 1 worker", "StreamLoader copying, 2 workers"} <= set(configs)
    assert {"corpus through the pipe, 1 worker", "corpus through the pipe, 2 workers"} <= set(
        configs
    )
    for name, values in configs.items():
        assert values["rate"] > 0 and values["main_cpu_us"] > 0, name
        if not name.endswith("0 workers"):
            assert values["worker_cpu_us"] >= 0, name
    keys = (
        "speedup",
        "copying_speedup",
        "dataloader_speedup",
        "pipe_speedup",
        "transport_speedup",
        "cpu_ceiling",
    )
    for key in (*keys, "batch_at_us"):
        assert math.isfinite(report[key]) and report[key] > 0, key
    assert "target >= 1.6x" in result.stdout and "Bound on 2 free cores" in result.stdout
    assert not (tmp_path / "work").exists()
