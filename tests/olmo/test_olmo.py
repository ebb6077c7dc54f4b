"""``mixle.olmo.OlmoDataLoader`` inside OLMo-core's real ``Trainer`` (CPU, gloo), killed
with SIGKILL and resumed; and against OLMo-core's ``DataLoaderBase`` contract in process.

Each job (``tests/olmo/olmo_job.py``) logs the batches it trains on; a job killed
mid-run and rerun (OLMo-core resumes from the latest checkpoint in its save folder) must
train on exactly the batches an uninterrupted job trains on after that checkpoint.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from olmo_core.data import TextDataLoaderBase

from mixle.data import StreamingCorpus
from mixle.errors import (
    ArgumentError,
    ArgumentTypeError,
    MissingBackendError,
    StateMismatchError,
)
from mixle.olmo import LABEL_IGNORE_INDEX, OlmoDataLoader
from tests._framework_jobs import (
    batches_after_resume,
    logged_batches,
    rows,
    run_job,
    sample_corpus,
)
from tests._torchrun import ROOT

JOB = ROOT / "tests" / "olmo" / "olmo_job.py"


def _job(out: Path, *args: object, nproc: int = 1) -> int:
    return run_job(JOB, out, *args, nproc=nproc)


def test_one_process_killed_and_rerun_trains_on_the_uninterrupted_batches(tmp_path: Path) -> None:
    # The uninterrupted run reads in process; the killed one and its rerun in 2 worker
    # processes (a StreamLoader, groups of 64 batches: step 4 is mid-group, mid-epoch).
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert _job(full, "--steps", 7) == 0
    # Killed when step 6 starts: step 5 was trained on but is not in the step-4 checkpoint.
    assert _job(cut, "--steps", 7, "--workers", 2, "--kill-at", 6) == -9
    assert [entry["step"] for entry in logged_batches(cut)] == [1, 2, 3, 4, 5]
    assert _job(cut, "--steps", 7, "--workers", 2) == 0
    assert batches_after_resume(cut, 0, 5) == rows(full)[4:]

    # Another stream's state in the real checkpoint is refused by field (another seed).
    saved = _saved_loader_state(full / "save" / "step4", rank=0)
    with pytest.raises(StateMismatchError, match="seed in checkpoint: 11 / in stream: 12"):
        OlmoDataLoader(sample_corpus(seed=12), work_dir=tmp_path).load_state_dict(saved)


# Two processes: ~2.5 min on 2 cores; the one-process kill/resume runs by default.
@pytest.mark.slow
def test_two_process_ddp_killed_and_rerun_trains_on_the_uninterrupted_batches(
    tmp_path: Path,
) -> None:
    full, cut = tmp_path / "full", tmp_path / "cut"
    per_rank = ("--layout", "per-rank", "--steps", 6)
    assert _job(full, *per_rank, nproc=2) == 0
    assert _job(cut, *per_rank, "--kill-at", 6, nproc=2) != 0
    assert _job(cut, *per_rank, nproc=2) == 0
    for rank in (0, 1):
        assert batches_after_resume(cut, rank, 5) == rows(full, rank)[4:]
    assert rows(full, 0) != rows(full, 1)

    # Per-rank states resume only where they were saved: one process would load rank0.pt.
    saved = _saved_loader_state(full / "save" / "step4", rank=0)
    with pytest.raises(StateMismatchError, match="world_size in checkpoint: 2 / in stream: 1"):
        OlmoDataLoader(sample_corpus(layout="per-rank"), work_dir=tmp_path).load_state_dict(saved)


@pytest.mark.slow
def test_global_layout_checkpoint_resumes_on_another_world_size(tmp_path: Path) -> None:
    """Saved by 2 ranks, resumed by 1 with the same global batch (short form: the
    in-process load into another global batch size in the contract test)."""
    two, one = tmp_path / "two", tmp_path / "one"
    assert _job(two, "--steps", 6, nproc=2) == 0
    assert _job(one, "--steps", 6, "--load", two / "save" / "step4") == 0
    global_batches = [a + b for a, b in zip(rows(two, 0), rows(two, 1), strict=True)]
    assert rows(one) == global_batches[4:]


def _saved_loader_state(checkpoint: Path, rank: int) -> dict:
    """The loader state in rank ``rank``'s OLMo-core trainer state of ``checkpoint``."""
    # OLMo-core's own trainer-state file (it holds numpy RNG state): not weights only.
    return torch.load(checkpoint / "train" / f"rank{rank}.pt", weights_only=False)["data_loader"]


def _corpus(seed: int = 3, layout: str = "global", batch_size: int = 2) -> StreamingCorpus:
    documents = [np.arange(1, 2 + i % 9, dtype=np.int64) for i in range(30)]
    return StreamingCorpus(
        documents, rank=0, world_size=1, block=4, batch_size=batch_size, seed=seed, layout=layout
    )


def test_the_data_loader_contract_and_resume_in_process(tmp_path: Path) -> None:
    corpus = _corpus()
    loader = OlmoDataLoader(corpus, work_dir=tmp_path)
    assert isinstance(loader, TextDataLoaderBase)
    assert (loader.global_batch_size, loader.rank_batch_size) == (8, 8)
    loader.reshuffle(1)
    batches = list(loader)
    assert len(batches) == loader.total_batches == corpus.num_batches(0)
    expected = [batch.to_torch() for batch in corpus.iter_epoch(0)]
    for got, want in zip(batches, expected, strict=True):
        assert torch.equal(got["input_ids"], want.context)
        assert torch.equal(got["labels"][want.loss_mask], want.targets[want.loss_mask])
        assert bool((got["labels"][~want.loss_mask] == LABEL_IGNORE_INDEX).all())
    loader.reset()

    # Stop after 3 batches, save, and resume in a fresh loader: the rest comes exactly.
    loader.reshuffle(2)
    iterator = iter(loader)
    for _ in range(3):
        next(iterator)
    saved = loader.state_dict()
    assert (saved["epoch"], saved["row"]) == (1, 6)
    resumed = OlmoDataLoader(_corpus(), work_dir=tmp_path)
    resumed.load_state_dict(saved)
    resumed.reshuffle(2)
    for got, want in zip(resumed, iterator, strict=True):
        assert torch.equal(got["input_ids"], want["input_ids"])
    # The global layout's row cursor resumes with another global batch that divides it.
    other_batch = OlmoDataLoader(_corpus(batch_size=1), work_dir=tmp_path)
    other_batch.load_state_dict(saved)
    assert other_batch.batches_processed == 6


def test_worker_processes_give_the_same_batches_and_resume_with_any_count(
    tmp_path: Path,
) -> None:
    plain = OlmoDataLoader(_corpus(), work_dir=tmp_path)
    plain.reshuffle(2)
    expected = list(plain)
    loader = OlmoDataLoader(_corpus(), work_dir=tmp_path, num_workers=2, batches_per_item=3)
    loader.reshuffle(2)
    got = list(loader)
    assert len(got) == len(expected) == loader.total_batches > 8
    for a, b in zip(got, expected, strict=True):
        assert torch.equal(a["input_ids"], b["input_ids"])
        assert torch.equal(a["labels"], b["labels"])
    assert list(loader) == []  # every batch of the epoch processed: none left
    # Saved after 5 batches (mid-group) by the 2-worker loader: 0 or 1 workers continue.
    loader.reset()
    loader.reshuffle(2)
    iterator = iter(loader)
    for _ in range(5):
        next(iterator)
    saved = loader.state_dict()
    for workers in (0, 1):
        resumed = OlmoDataLoader(
            _corpus(), work_dir=tmp_path, num_workers=workers, batches_per_item=4
        )
        resumed.load_state_dict(saved)
        resumed.reshuffle(2)
        rest = [batch["input_ids"].tolist() for batch in resumed]
        assert rest == [batch["input_ids"].tolist() for batch in expected[5:]]


def test_bad_states_and_arguments_are_refused_by_name(tmp_path: Path) -> None:
    loader = OlmoDataLoader(_corpus(), work_dir=tmp_path)
    loader.reshuffle(1)
    next(iter(loader))
    saved = loader.state_dict()
    with pytest.raises(StateMismatchError, match="seed in checkpoint: 3 / in stream: 4"):
        OlmoDataLoader(_corpus(seed=4), work_dir=tmp_path).load_state_dict(saved)
    with pytest.raises(StateMismatchError, match="not a multiple of this loader's 4"):
        OlmoDataLoader(_corpus(batch_size=4), work_dir=tmp_path).load_state_dict(saved)
    with pytest.raises(StateMismatchError, match="points at row 999"):
        loader.load_state_dict({**saved, "row": 999})
    with pytest.raises(StateMismatchError, match="version"):
        loader.load_state_dict({**saved, "version": 2})
    with pytest.raises(ArgumentTypeError, match="`corpus` must be a StreamingCorpus"):
        OlmoDataLoader([np.arange(3)], work_dir=tmp_path)  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="num_workers"):
        OlmoDataLoader(_corpus(), work_dir=tmp_path, num_workers=-1)
    with pytest.raises(ArgumentError, match="batches_per_item"):
        OlmoDataLoader(_corpus(), work_dir=tmp_path, batches_per_item=0)


def test_without_olmo_core_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "olmo_core.data", None)
    monkeypatch.delitem(sys.modules, "mixle.olmo")
    with pytest.raises(MissingBackendError, match=r"pip install 'mixle\[olmo\]'"):
        importlib.import_module("mixle.olmo")
