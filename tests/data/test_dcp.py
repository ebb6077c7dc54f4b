"""Loader state through ``torch.distributed.checkpoint`` under torchrun (gloo, CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mixle.data import DcpLoaderState, StreamingCorpus
from mixle.errors import ArgumentError, StateMismatchError
from tests._torchrun import ROOT, run_torchrun

JOB = ROOT / "tests" / "data" / "dcp_job.py"


def _run(tmp: Path, name: str, nproc: int, *args: str) -> list[dict]:
    folders = run_torchrun(JOB, *map(str, args), output=tmp / name, nproc=nproc)
    return [json.loads((folder / "batches.json").read_text()) for folder in folders]


def _global_rows(results: list[dict]) -> list[list[list[int]]]:
    """Each step's global batch: the ranks' rows in rank order."""
    steps = zip(*(result["batches"] for result in results), strict=True)
    return [[row for rows in step for row in rows] for step in steps]


def test_global_layout_resumes_exactly_across_world_sizes_2_1_2(tmp_path: Path) -> None:
    first, second = tmp_path / "ckpt-2", tmp_path / "ckpt-1"
    # Saved after 2 steps on 2 ranks; resumed on 1 (which saves one step later), then on 2.
    uninterrupted = _global_rows(_run(tmp_path, "a", 2, "global", "-", first, 2, 4))
    one = _global_rows(_run(tmp_path, "b", 1, "global", first, second, 1, 2))
    assert one == uninterrupted[1:3]
    two = _global_rows(_run(tmp_path, "c", 2, "global", second, "-", 0, 3))
    assert two == uninterrupted[1:4]


def test_per_rank_layout_resumes_on_same_size_and_refuses_another(tmp_path: Path) -> None:
    saved = tmp_path / "ckpt"
    uninterrupted = _run(tmp_path, "a", 2, "per-rank", "-", saved, 2, 2)
    resumed = _run(tmp_path, "b", 2, "per-rank", saved, "-", 0, 2)
    assert resumed == uninterrupted
    (refused,) = _run(tmp_path, "c", 1, "per-rank", saved, "-", 0, 1)
    assert "dp_world_size in checkpoint: 2 / in job: 1" in refused["error"]


def _corpus(layout: str) -> StreamingCorpus:
    documents = [np.arange(1, 9, dtype=np.int64)] * 6
    return StreamingCorpus(documents, rank=0, world_size=1, block=4, batch_size=2, layout=layout)


def test_bad_states_and_arguments_are_refused_by_name() -> None:
    per_rank = DcpLoaderState(_corpus("per-rank"), dp_rank=0, dp_world_size=1)
    glob = DcpLoaderState(_corpus("global"), dp_rank=0, dp_world_size=1)
    assert (per_rank.key, glob.key) == ("dp_rank_0", "global")
    with pytest.raises(StateMismatchError, match="layout in checkpoint: 'global'"):
        per_rank.load_state_dict({**glob.state_dict(), "dp_rank_0": "{}"})
    with pytest.raises(StateMismatchError, match="lacks the field"):
        glob.load_state_dict({"layout": "global", "dp_world_size": 1})
    with pytest.raises(StateMismatchError, match="not valid JSON"):
        glob.load_state_dict({"layout": "global", "dp_world_size": 1, "global": "{"})
    with pytest.raises(ArgumentError, match="dp_rank"):
        DcpLoaderState(_corpus("global"), dp_rank=1, dp_world_size=1)
    with pytest.raises(ArgumentError, match="together"):
        DcpLoaderState(_corpus("global"), dp_rank=0)
    glob.load_state_dict(glob.state_dict())
