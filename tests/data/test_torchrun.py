"""Issue #5: two torchrun ranks (gloo, CPU) get disjoint, complete shards and equal batch counts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_torchrun_ranks_are_disjoint_complete_and_even(tmp_path: Path) -> None:
    output = tmp_path / "ranks.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            str(ROOT / "tests" / "data" / "torchrun_check.py"),
            str(output),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    ranks = json.loads(output.read_text())
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["world_size"] == 2 for r in ranks)
    first, second = (set(r["indices"]) for r in ranks)
    assert not first & second
    assert first | second == set(range(ranks[0]["num_documents"]))
    assert ranks[0]["batches"] == ranks[1]["batches"] == ranks[0]["num_batches"] > 0
    for r in ranks:
        assert set(r["seen"]) <= set(r["indices"])
