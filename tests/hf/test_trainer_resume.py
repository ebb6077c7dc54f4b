"""Issue #30 item 3: ``transformers.Trainer`` killed with SIGKILL mid-run and resumed with
``resume_from_checkpoint`` sees exactly the batches an uninterrupted run sees, under one
process and under ``torchrun --nproc_per_node 2`` (gloo, CPU), and across a change of
world size (a 2-process checkpoint resumed by one process).

Each run is ``tests/hf/trainer_job.py`` (a tiny Llama from a config); it records the
``input_ids``/labels of every micro-batch as the model sees them. The SIGKILL'd
two-process tests are ``slow`` (over a minute on the shared test machine); their short
form in the default suite resumes in a second ``Trainer`` within one torchrun launch.
"""

from __future__ import annotations

import itertools
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests._torchrun import ROOT, launch_env, torchrun_command
from tests.hf.corpus import BATCH_SIZE, global_corpus

pytest.importorskip("transformers", reason="needs transformers (mixle[hf])")

from mixle.hf import GlobalRowDataset
from mixle.hf.trainer import (
    IGNORE_INDEX,
    TRAINER_SETTINGS,
    LoaderStateCallback,
    causal_lm_collate,
)
from tests.hf.trainer_job import ACCUMULATION, MAX_STEPS, SAVE_STEPS, tiny_model

JOB = ROOT / "tests" / "hf" / "trainer_job.py"
KILL_AT = 5  # after the checkpoint at step SAVE_STEPS, before the next one
MICRO = MAX_STEPS * ACCUMULATION


def _run(output: Path, *flags: str, nproc: int = 1) -> int:
    """Run the job (directly, or under torchrun with ``nproc`` ranks); its exit status."""
    script = (str(JOB), str(output), *flags)
    command = [sys.executable, *script] if nproc == 1 else torchrun_command(nproc, *script)
    done = subprocess.run(
        command, env=launch_env(), capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode not in (0, -signal.SIGKILL) and "--kill-at" not in flags:
        raise AssertionError(done.stderr[-3000:])
    return done.returncode


def _seen(output: Path, rank: int) -> list[dict[str, Any]]:
    lines = (output / f"seen-{rank}.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _expected(rank: int, world: int, skip_rows: int = 0) -> list[dict[str, Any]]:
    """Rank ``rank``'s micro-batches of an uninterrupted run, read from the stream itself."""
    corpus = global_corpus(rank=0, world_size=1, batch_size=BATCH_SIZE * world)
    rows = GlobalRowDataset(corpus)
    items = itertools.islice(rows, skip_rows, None)
    batches = []
    for _ in range(MICRO):
        whole = [next(items) for _ in range(BATCH_SIZE * world)]
        mine = whole[rank * BATCH_SIZE : (rank + 1) * BATCH_SIZE]
        batch = causal_lm_collate(mine)
        batches.append(
            {"input_ids": batch["input_ids"].tolist(), "labels": batch["labels"].tolist()}
        )
    return batches


def _micro(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"input_ids": line["input_ids"], "labels": line["labels"]} for line in lines]


def _killed_and_resumed(output: Path, nproc: int) -> None:
    status = _run(output, "--kill-at", str(KILL_AT), nproc=nproc)
    assert status != 0, "the job was to be killed"
    assert sorted(p.name for p in (output / "run").iterdir()) == [f"checkpoint-{SAVE_STEPS}"]
    assert _run(output, "--resume", nproc=nproc) == 0


def _assert_resumed_exactly(output: Path, rank: int, world: int) -> None:
    seen = _seen(output, rank)
    before = KILL_AT * ACCUMULATION
    steps = [line["step"] for line in seen]
    resumed = list(range(SAVE_STEPS + 1, MAX_STEPS + 1))
    assert steps == [s for s in range(1, KILL_AT + 1) for _ in range(ACCUMULATION)] + [
        s for s in resumed for _ in range(ACCUMULATION)
    ]
    expected = _expected(rank, world)
    assert _micro(seen[:before]) == expected[:before]
    assert _micro(seen[before:]) == expected[SAVE_STEPS * ACCUMULATION :]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(an uninterrupted run, a run killed at step KILL_AT and resumed), one process."""
    whole, killed = tmp_path_factory.mktemp("whole"), tmp_path_factory.mktemp("killed")
    assert _run(whole) == 0
    _killed_and_resumed(killed, nproc=1)
    return whole, killed


def test_uninterrupted_run_sees_the_global_stream(one_process: tuple[Path, Path]) -> None:
    whole, _ = one_process
    assert [line["step"] for line in _seen(whole, 0)] == [
        s for s in range(1, MAX_STEPS + 1) for _ in range(ACCUMULATION)
    ]
    assert _micro(_seen(whole, 0)) == _expected(0, 1)


def test_killed_run_resumes_with_the_uninterrupted_batches(one_process: tuple[Path, Path]) -> None:
    whole, killed = one_process
    _assert_resumed_exactly(killed, 0, 1)
    resumed = _micro(_seen(killed, 0))[KILL_AT * ACCUMULATION :]
    assert resumed == _micro(_seen(whole, 0))[SAVE_STEPS * ACCUMULATION :]


def test_checkpoint_holds_the_row_cursor(one_process: tuple[Path, Path]) -> None:
    _, killed = one_process
    saved = json.loads(
        (killed / "run" / f"checkpoint-{SAVE_STEPS}" / "trainer_state.json").read_text()
    )
    attributes = saved["stateful_callbacks"]["LoaderStateCallback"]["attributes"]
    assert attributes["global_step"] == SAVE_STEPS
    state = attributes["loader_state"]
    assert (state["version"], state["epoch"], state["row"]) == (
        2,
        0,
        SAVE_STEPS * ACCUMULATION * BATCH_SIZE,
    )
    assert state["stream"]["layout"] == "global"


def test_two_process_stop_and_resume_is_exact(tmp_path: Path) -> None:
    """The default suite's short form of the two tests below: both ranks' batches across a
    checkpoint resumed by a second Trainer, in one torchrun launch (no SIGKILL)."""
    assert _run(tmp_path, "--stop-and-resume", nproc=2) == 0
    for rank in (0, 1):
        seen = _seen(tmp_path, rank)
        assert [line["step"] for line in seen] == [
            s for s in range(1, MAX_STEPS + 1) for _ in range(ACCUMULATION)
        ]
        assert _micro(seen) == _expected(rank, 2)


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A torchrun job of 2 ranks killed at step KILL_AT and resumed."""
    killed = tmp_path_factory.mktemp("killed2")
    _killed_and_resumed(killed, nproc=2)
    return killed


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_two_process_run_resumes_exactly(two_processes: Path, rank: int) -> None:
    _assert_resumed_exactly(two_processes, rank, 2)


@pytest.mark.slow
def test_two_process_checkpoint_resumes_on_one_process(two_processes: Path, tmp_path: Path) -> None:
    shutil.copytree(
        two_processes / "run" / f"checkpoint-{SAVE_STEPS}",
        tmp_path / "run" / f"checkpoint-{SAVE_STEPS}",
    )
    assert _run(tmp_path, "--resume") == 0
    seen = _seen(tmp_path, 0)
    assert seen[0]["step"] == SAVE_STEPS + 1
    # The next row after the checkpoint comes first, now in global batches of BATCH_SIZE.
    rows_done = SAVE_STEPS * ACCUMULATION * BATCH_SIZE * 2
    expected = _expected(0, 1, skip_rows=rows_done)
    assert _micro(seen) == expected[: len(seen)]


# ---------------------------------------------------------------- unit checks


def _arguments(tmp_path: Path, **overrides: Any) -> Any:
    from transformers import TrainingArguments

    settings = {**TRAINER_SETTINGS, **overrides}
    return TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=BATCH_SIZE,
        use_cpu=True,
        report_to=[],
        **settings,
    )


class _Loader:
    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset


def _begin(callback: LoaderStateCallback, args: Any, rows: Any, step: int = 0) -> None:
    from transformers import TrainerControl, TrainerState

    callback.on_train_begin(
        args, TrainerState(global_step=step), TrainerControl(), train_dataloader=_Loader(rows)
    )


def _rows(**kw: Any) -> GlobalRowDataset:
    return GlobalRowDataset(global_corpus(rank=0, world_size=1, **kw))


@pytest.mark.parametrize("name", sorted(TRAINER_SETTINGS))
def test_a_missing_setting_is_named(tmp_path: Path, name: str) -> None:
    args = _arguments(tmp_path, **{name: not TRAINER_SETTINGS[name]})
    with pytest.raises(ValueError, match=f"{name}={TRAINER_SETTINGS[name]}"):
        _begin(LoaderStateCallback(), args, _rows())


def test_a_global_batch_that_is_not_the_trainers_is_refused(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match=r"global batch \(6 rows\) must equal per_device_train_batch_size 3"
    ):
        _begin(LoaderStateCallback(), _arguments(tmp_path), _rows(batch_size=6))


def test_split_batches_makes_the_per_device_batch_the_global_one(tmp_path: Path) -> None:
    args = _arguments(tmp_path, accelerator_config={"split_batches": True})
    with pytest.raises(
        ValueError, match=r"per_device_train_batch_size 3 \(split_batches=True\) = 3"
    ):
        _begin(LoaderStateCallback(), args, _rows(batch_size=6))
    _begin(LoaderStateCallback(), args, _rows())


def test_a_per_rank_dataset_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"GlobalRowDataset\. Got a loader over list"):
        _begin(LoaderStateCallback(), _arguments(tmp_path), [1, 2])


def test_resuming_without_a_loader_state_is_refused(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match="resuming at step 3 from a checkpoint without a mixle loader state"
    ):
        _begin(LoaderStateCallback(), _arguments(tmp_path), _rows(), step=3)


def test_a_loader_state_of_another_stream_names_the_field(tmp_path: Path) -> None:
    saved = LoaderStateCallback()
    _begin(saved, _arguments(tmp_path), _rows())
    saved.global_step = 2
    restored = LoaderStateCallback()
    restored.loader_state, restored.global_step = saved.state()["attributes"].values()
    other = GlobalRowDataset(global_corpus(rank=0, world_size=1, block=16))
    with pytest.raises(ValueError, match="block"):
        _begin(restored, _arguments(tmp_path), other, step=2)


def test_a_loader_state_of_another_step_is_refused(tmp_path: Path) -> None:
    restored = LoaderStateCallback()
    restored.loader_state, restored.global_step = _rows().state_dict(), 4
    with pytest.raises(ValueError, match="global_step in checkpoint: 4 / trainer step: 2"):
        _begin(restored, _arguments(tmp_path), _rows(), step=2)


def test_collate_passes_every_target_unshifted() -> None:
    rows = list(itertools.islice(_rows(), 3))
    batch = causal_lm_collate(rows)
    targets = torch.stack([row["targets"] for row in rows])
    mask = torch.stack([row["loss_mask"] for row in rows])
    assert torch.equal(batch["input_ids"], torch.stack([row["context"] for row in rows]))
    assert torch.equal(batch["shift_labels"][mask], targets[mask])
    assert bool((batch["shift_labels"][~mask] == IGNORE_INDEX).all())
    assert torch.equal(batch["position_ids"], torch.stack([row["position_ids"] for row in rows]))


def test_collate_loss_counts_the_last_target_of_each_row() -> None:
    model = tiny_model()
    batch = causal_lm_collate(list(itertools.islice(_rows(), 3)))
    with torch.no_grad():
        loss = model(**batch).loss
        logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits
    labels = batch["shift_labels"]
    keep = labels != IGNORE_INDEX
    reference = torch.nn.functional.cross_entropy(logits[keep].float(), labels[keep])
    assert bool(keep[:, -1].any())
    np.testing.assert_allclose(float(loss), float(reference), rtol=1e-5)
