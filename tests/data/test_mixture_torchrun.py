"""Issue #14 under a real launch: ``torchrun`` ranks (gloo, CPU) stream one mixture.

Two processes stream the packed and the windows form of one three-source mixture with a
phase: each rank gets its contiguous slice of every global batch (their concatenation is
the single-process global batch), the per-source accounting and the saved state are the
same on every rank and match the source ids received, and a job of three processes with
another batch size, resumed from the state saved mid-way, continues exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests._torchrun import ROOT, run_torchrun
from tests.data.mixture_case import OBJECTIVES, build
from tests.data.resume_helpers import assert_items_equal

SCRIPT = ROOT / "tests" / "data" / "torchrun_mixture_check.py"
GLOBAL = 6  # rows (or windows) per global batch: 2 x 3, then 3 x 2
STEPS, SAVE_AT = 8, 5


def _steps(out: Path, objective: str, world_size: int, steps: int) -> list[tuple[np.ndarray, ...]]:
    """Every step's global batch: the ranks' parts concatenated in rank order."""
    parts = [np.load(out / f"{objective}-rank{r}.npz") for r in range(world_size)]
    fields = len([key for key in parts[0].files if key.endswith("-0")])
    return [
        tuple(np.concatenate([part[f"{i}-{step}"] for part in parts]) for i in range(fields))
        for step in range(steps)
    ]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    first = tmp_path_factory.mktemp("two-ranks")
    run_torchrun(
        SCRIPT, str(first), "3", str(STEPS), str(SAVE_AT), output=first / "ranks", timeout=180
    )
    resumed = tmp_path_factory.mktemp("three-ranks")
    run_torchrun(
        SCRIPT,
        *(str(resumed), "2", str(STEPS - SAVE_AT), "0", str(first)),
        output=resumed / "ranks",
        nproc=3,
        timeout=180,
    )
    return first, resumed


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_each_rank_gets_its_slice_of_every_global_batch(
    jobs: tuple[Path, Path], objective: str
) -> None:
    first, _ = jobs
    reference = build(objective, rank=0, world_size=1, batch_size=GLOBAL)
    for step, batch in enumerate(_steps(first, objective, 2, STEPS)):
        assert_items_equal(batch, reference.rows_at(step * GLOBAL, (step + 1) * GLOBAL))
    with np.load(first / f"{objective}-rank1.npz") as rank1:
        expected = reference.rows_at(3, 6)  # rank 1 of 2 takes rows [3, 6) of step 0
        assert_items_equal(tuple(rank1[f"{i}-0"] for i in range(len(expected))), expected)


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_accounting_and_state_are_exact_and_the_same_on_every_rank(
    jobs: tuple[Path, Path], objective: str
) -> None:
    first, _ = jobs
    reports = [json.loads((first / f"{objective}-rank{r}.json").read_text()) for r in range(2)]
    assert all(r["same_everywhere"] for r in reports)
    assert reports[0]["accounting"] == reports[1]["accounting"]
    assert reports[0]["state"]["row"] == SAVE_AT * GLOBAL
    batches = _steps(first, objective, 2, STEPS)
    sources = np.concatenate([b[-1] for b in batches])
    for index, (name, rows, real, _) in enumerate(reports[0]["accounting"]):
        mine = sources == index
        assert rows == int(mine.sum()) > 0, name
        if objective == "packed":
            mask = np.concatenate([b[2] for b in batches])
            assert real == int(mask[mine].sum())
        else:
            assert real == rows


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_resumed_on_three_ranks_continues_exactly(jobs: tuple[Path, Path], objective: str) -> None:
    first, resumed = jobs
    reference = build(objective, rank=0, world_size=1, batch_size=GLOBAL)
    got = _steps(resumed, objective, 3, STEPS - SAVE_AT)
    for step, batch in enumerate(got, SAVE_AT):
        assert_items_equal(batch, reference.rows_at(step * GLOBAL, (step + 1) * GLOBAL))
    before = _steps(first, objective, 2, STEPS)[SAVE_AT:]
    for a, b in zip(got, before, strict=True):
        assert_items_equal(a, b)
    report = json.loads((resumed / f"{objective}-rank2.json").read_text())
    assert report["world_size"] == 3 and report["same_everywhere"]
