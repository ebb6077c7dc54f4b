"""A commit stopped at any point leaves no corpus or the complete one, and the next
``mixle ingest --commit`` finishes it byte-identically to a local run.

Once the publish plan is saved, the commit deletes the units' records while it moves
the shards (and removes the work directory with several threads): from then on the
saved plan alone must be enough to finish.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mixle.corpus import IngestOptions, commit_ingest, ingest, plan_ingest, run_unit
from mixle.corpus.storage import publish as publishing
from mixle.corpus.storage.publish import remove_tree
from tests.corpus.ingestion.distributed_helpers import OPTIONS, ROOT, make_inputs, tree


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(finished units of a plan, never committed; the local run of the same inputs)."""
    base = tmp_path_factory.mktemp("commit-crash")
    inputs = make_inputs(base)
    local = base / "local"
    ingest(inputs, local, **OPTIONS)
    plan = plan_ingest(inputs, IngestOptions(**OPTIONS))
    units = base / "units"
    for unit in plan.units:
        run_unit(plan, unit.index, units)
    assert len(plan.units) > 10
    return units, local


@pytest.fixture
def copied(tmp_path: Path, prepared: tuple[Path, Path]) -> tuple[Path, Path]:
    """(a fresh copy of the prepared units to commit; the local run)."""
    units, local = prepared
    out = tmp_path / "out"
    shutil.copytree(units, out)
    return out, local


def test_a_commit_that_fails_after_the_records_are_gone_is_finished_by_the_next(
    copied: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    out, local = copied

    def fail(*args: object, **kwargs: object) -> None:
        raise OSError("disk full (injected)")

    monkeypatch.setattr(publishing, "commit_manifest", fail)
    with pytest.raises(OSError, match="injected"):
        commit_ingest(out)
    assert not (out / "manifest.json").exists()
    left = {p.name for p in (out / ".mixle-ingest").rglob("*")}
    assert "done.json" not in left  # the records were deleted: only the plan remains
    monkeypatch.undo()
    commit_ingest(out)
    assert tree(out) == tree(local)


@pytest.mark.parametrize("delay", [0.0, 0.3, 0.8, 1.5])
def test_a_commit_killed_at_any_moment_is_finished_by_the_next(
    copied: tuple[Path, Path], delay: float
) -> None:
    out, local = copied
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    process = subprocess.Popen(
        [sys.executable, "-m", "mixle.cli", "ingest", "--commit", str(out), "-q"], env=env
    )
    time.sleep(delay)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    manifest = out / "manifest.json"
    if manifest.exists():  # finished before the kill: complete already
        published = {k: v for k, v in tree(out).items() if not k.startswith(".mixle-ingest")}
        assert published == tree(local)
    commit_ingest(out)
    assert tree(out) == tree(local)


def test_a_commit_killed_while_removing_the_work_directory_is_cleaned_by_the_next(
    copied: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    out, local = copied
    monkeypatch.setattr(publishing, "remove_tree", lambda path: None)  # "killed" there
    commit_ingest(out)
    assert (out / ".mixle-ingest-done").is_dir()
    monkeypatch.undo()
    commit_ingest(out)  # already committed: reports it and removes the leftovers
    assert tree(out) == tree(local)


def test_remove_tree_removes_nested_directories_and_ignores_a_missing_one(tmp_path: Path) -> None:
    root = tmp_path / "work"
    for unit in range(40):
        (root / f"unit-{unit}" / "deep").mkdir(parents=True)
        (root / f"unit-{unit}" / "done.json").write_text("{}")
        (root / f"unit-{unit}" / "deep" / "x").write_bytes(b"x")
    (root / "plan.json").write_text("{}")
    remove_tree(str(root))
    assert not root.exists()
    remove_tree(str(root))  # gone already: nothing to do
