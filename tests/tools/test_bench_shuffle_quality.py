"""``tools/bench_shuffle_quality.py`` (issue #25 item 5), short form.

The figures are statistics of deterministic orders, so their ordering is asserted where
it follows from the construction: the full permutation mixes sources like independent
draws, a blocks window of few blocks mixes worse than one of many, and LitData's
chunk-local batches (one chunk per rank) worse than the permutation.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.tools._run import run_tool


def test_short_run_ranks_the_orders(tmp_path: Path) -> None:
    figures = tmp_path / "quality.json"
    run_tool(
        "bench_shuffle_quality.py",
        "--documents", "262144",
        "--global-batch", "256",
        "--chunk", "2048",
        "--canonical-nodes", "16",
        "--blocks", "256x8,64x256",
        "--json", str(figures),
    )  # fmt: skip
    report = json.loads(figures.read_text())
    permutation = report["permutation"]
    assert 0.85 < permutation["dispersion"] < 1.15
    assert 0.95 < permutation["distance_ratio"] < 1.05
    few = report["blocks B=256 W=8 (2,048 docs/window)"]
    many = report["blocks B=64 W=256 (16,384 docs/window)"]
    assert few["dispersion"] > 2 * many["dispersion"] > 2
    assert few["sources_per_batch"] <= 8 < many["sources_per_batch"]
    litdata = next(value for name, value in report.items() if name.startswith("litdata"))
    assert litdata["dispersion"] > 2 * permutation["dispersion"]
    mosaic = next(value for name, value in report.items() if name.startswith("mosaic"))
    assert mosaic["sources_per_batch"] > few["sources_per_batch"]
