"""Issue #5: two torchrun ranks (gloo, CPU) get disjoint, complete shards and equal batch counts."""

from __future__ import annotations

import json
from pathlib import Path

from tests._torchrun import ROOT, run_torchrun


def test_torchrun_ranks_are_disjoint_complete_and_even(tmp_path: Path) -> None:
    folders = run_torchrun(ROOT / "tests" / "data" / "torchrun_check.py", output=tmp_path)
    ranks = [json.loads((folder / "result.json").read_text()) for folder in folders]
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["world_size"] == 2 for r in ranks)
    first, second = (set(r["indices"]) for r in ranks)
    assert not first & second
    assert first | second == set(range(ranks[0]["num_documents"]))
    assert ranks[0]["batches"] == ranks[1]["batches"] == ranks[0]["num_batches"] > 0
    for r in ranks:
        assert set(r["seen"]) <= set(r["indices"])
        assert r["loader_matches"] and r["loader_batches"] == r["batches"]  # StreamLoader
