"""A checkpoint's step comes from its verified metadata, never its name alone; restored
fields are checked by name; the metrics log never blocks (issue #32 classes 5, 9, 10)."""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from mixle.errors import ArgumentError, CheckpointError
from mixle.train import latest_checkpoint, list_checkpoints, read_checkpoint, read_metrics, train
from mixle.train._rng import get_rng_state, seed_everything, set_rng_state
from mixle.train.checkpoint import misnamed_checkpoints, prune_checkpoints, write_checkpoint
from mixle.train.metrics import MetricsLog
from tests.corpus.hardening_helpers import deadline
from tests.train._helpers import step_records, tiny_config
from tests.train.test_checkpoint_hostile import _reseal_meta


def _quiet(line: str) -> None:
    del line


def _write(directory: Path, step: int) -> str:
    return write_checkpoint(
        str(directory),
        step,
        rank=0,
        world_size=1,
        rank_state={"step": step},
        tensors={"model": {"w": torch.full((2,), float(step))}, "optimizer": None},
        meta={"identity": {"run": 1}, "config": {"batch_size": 2}},
    )


# -- class 9: a renamed checkpoint never wins ------------------------------------------------


def test_a_renamed_checkpoint_is_never_the_newest_and_later_ones_are(tmp_path: Path) -> None:
    for step in (1, 2, 3):
        _write(tmp_path, step)
    os.rename(tmp_path / "step-00000002", tmp_path / "step-00000099")
    assert latest_checkpoint(str(tmp_path)) == str(tmp_path / "step-00000003")
    assert misnamed_checkpoints(str(tmp_path)) == [(str(tmp_path / "step-00000099"), 2)]
    with pytest.raises(CheckpointError, match="records step 2, its name step 99"):
        read_checkpoint(str(tmp_path / "step-00000099"), rank=0, world_size=1)
    _write(tmp_path, 4)
    assert latest_checkpoint(str(tmp_path)) == str(tmp_path / "step-00000004")
    prune_checkpoints(str(tmp_path), keep_last=1)
    assert [step for step, _ in list_checkpoints(str(tmp_path))] == [4]
    assert (tmp_path / "step-00000099").is_dir()  # never pruned: not a listed checkpoint


def test_a_checkpoint_at_a_misnamed_directory_moves_it_aside(tmp_path: Path) -> None:
    _write(tmp_path, 2)
    os.rename(tmp_path / "step-00000002", tmp_path / "step-00000005")
    path = _write(tmp_path, 5)
    assert read_checkpoint(path, rank=0, world_size=1).step == 5
    assert (tmp_path / "step-00000005.misnamed-step-00000002" / "meta.json").is_file()


def test_resume_after_a_rename_continues_from_the_truly_newest(
    text_corpus: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    config = tiny_config(text_corpus, checkpoint_dir=str(run), checkpoint_every=1, keep_last=5)
    train(config.replace(steps=3), log=_quiet)
    os.rename(run / "step-00000001", run / "step-00000099")
    lines: list[str] = []
    summary = train(config.replace(steps=5, resume=True), log=lines.append)
    assert summary.step == 5
    assert any("ignoring" in line and "step-00000099" in line for line in lines)
    assert [r[0] for r in step_records(run / "metrics.jsonl")] == [1, 2, 3, 4, 5]
    assert latest_checkpoint(str(run)) == str(run / "step-00000005")
    whole = tmp_path / "whole"
    train(tiny_config(text_corpus, steps=5, checkpoint_dir=str(whole)), log=_quiet)
    assert step_records(run / "metrics.jsonl") == step_records(whole / "metrics.jsonl")


# -- class 10: re-sealed checkpoints with missing or out-of-range fields -------------------


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda m: m["config"].pop("batch_size"), "config.batch_size"),
        (lambda m: m["config"].update(batch_size="4"), "config.batch_size"),
        (lambda m: m.update(config={}), "config.batch_size"),
    ],
    ids=["missing", "a-string", "no-config-fields"],
)
def test_a_resealed_checkpoint_without_a_batch_size_names_the_field(
    text_corpus: Path, tmp_path: Path, edit: Any, field: str
) -> None:
    run = tmp_path / "run"
    config = tiny_config(text_corpus, checkpoint_dir=str(run))
    train(config.replace(steps=2), log=_quiet)
    latest = latest_checkpoint(str(run))
    assert latest is not None
    _reseal_meta(Path(latest), edit)
    with pytest.raises(CheckpointError, match=f"meta.json has no integer `{field}`"):
        train(config.replace(steps=3, resume=True), log=_quiet)


def _state() -> dict[str, Any]:
    seed_everything(7)
    return json.loads(json.dumps(get_rng_state()))


_RNG_EDITS = {
    "numpy-position-past-the-keys": (lambda s: s["numpy"].__setitem__(2, 10**6), "rng.numpy[2]"),
    "numpy-key-too-large": (lambda s: s["numpy"][1].__setitem__(3, 2**32), "rng.numpy[1][3]"),
    "numpy-key-negative": (lambda s: s["numpy"][1].__setitem__(0, -1), "rng.numpy[1][0]"),
    "numpy-short-keys": (lambda s: s["numpy"][1].pop(), "rng.numpy[1]"),
    "python-word-too-large": (lambda s: s["python"][1].__setitem__(0, 2**32), "rng.python[1][0]"),
    "python-position": (lambda s: s["python"][1].__setitem__(624, 625), "rng.python[1][624]"),
    "python-gauss": (lambda s: s["python"].__setitem__(2, "x"), "rng.python[2]"),
    "torch-truncated": (lambda s: s.update(torch="AAAA"), "rng.torch"),
    "torch-not-base64": (lambda s: s.update(torch="!!"), "rng.torch"),
    "missing": (lambda s: s.clear(), "rng.python"),
}


@pytest.mark.parametrize("case", sorted(_RNG_EDITS))
def test_an_out_of_range_rng_state_names_the_field_and_changes_nothing(case: str) -> None:
    edit, field = _RNG_EDITS[case]
    state = _state()
    bad = copy.deepcopy(state)
    edit(bad)
    seed_everything(11)
    before = get_rng_state()
    with pytest.raises(CheckpointError, match=rf"rank-00000\.json: RNG state `{re.escape(field)}`"):
        set_rng_state(bad, "run/step-00000001/rank-00000.json")
    assert get_rng_state() == before  # nothing was half restored
    set_rng_state(state)
    assert get_rng_state()["numpy"] == state["numpy"]


# -- class 5: the metrics log is never opened blocking ---------------------------------------


def test_a_metrics_log_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "metrics.jsonl"
    os.mkfifo(fifo)
    with deadline(10), pytest.raises(ArgumentError, match="FIFO"):
        read_metrics(str(fifo))
    with deadline(10), pytest.raises(ArgumentError, match="FIFO"):
        MetricsLog(str(fifo)).restart_at(3)


def test_a_metrics_log_linked_to_dev_zero_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "metrics.jsonl"
    link.symlink_to("/dev/zero")
    with deadline(10), pytest.raises(ArgumentError, match="character device"):
        read_metrics(str(link))


def test_an_overlong_metrics_line_is_skipped_like_a_torn_one(tmp_path: Path) -> None:
    log = tmp_path / "metrics.jsonl"
    log.write_text('{"step": 1}\n' + '{"x": "' + "y" * (2 << 20) + '"}\n{"step": 2}\n[[[')
    assert read_metrics(str(log)) == [{"step": 1}, {"step": 2}]
