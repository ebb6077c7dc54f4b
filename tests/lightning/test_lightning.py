"""``mixle.lightning.StreamDataModule`` inside real Lightning runs, killed with SIGKILL.

Each job (``tests/lightning/lightning_job.py``) logs the batches it trains on; a job
killed mid-run and resumed from its last checkpoint must train on exactly the batches
an uninterrupted job trains on after that step.
"""

from __future__ import annotations

import importlib
import itertools
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from mixle.data import StreamingCorpus
from mixle.data.torch import StreamLoader
from mixle.errors import ArgumentError, ArgumentTypeError, MissingBackendError, StateMismatchError
from mixle.lightning import StreamDataModule
from tests._framework_jobs import batches_after_resume, rows, run_job, sample_corpus
from tests._torchrun import ROOT

JOB = ROOT / "tests" / "lightning" / "lightning_job.py"


def _job(out: Path, *args: object, nproc: int = 1) -> int:
    return run_job(JOB, out, *args, nproc=nproc)


def test_one_process_killed_and_resumed_trains_on_the_uninterrupted_batches(
    tmp_path: Path,
) -> None:
    # Two worker processes of a StreamLoader (groups of 64 batches per item at this
    # size): step 4 lies mid-group and mid-epoch (18,744 batches), and the batches
    # Lightning and the workers read ahead of the checkpoint are not skipped.
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert _job(full, "--steps", 7, "--workers", 2) == 0
    assert "StreamLoader" in (full / "loader.txt").read_text().split()
    assert _job(cut, "--steps", 7, "--workers", 2, "--kill-at", 5) == -9
    assert sorted(p.name for p in (cut / "ckpt").iterdir()) == ["step=2.ckpt", "step=4.ckpt"]
    assert _job(cut, "--steps", 7, "--workers", 2, "--resume", cut / "ckpt" / "step=4.ckpt") == 0
    assert batches_after_resume(cut, 0, 4) == rows(full)[4:]
    # Lightning also saved the (stateful) loader's state: it is the module's entry.
    saved = torch.load(cut / "ckpt" / "step=4.ckpt", weights_only=True)
    loader_states = saved["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    assert loader_states == [saved["StreamDataModule"]]
    # The state does not depend on the worker count: resumed with 1 worker, the same.
    again = tmp_path / "again"
    assert _job(again, "--steps", 7, "--workers", 1, "--resume", cut / "ckpt" / "step=4.ckpt") == 0
    assert rows(again) == rows(full)[4:]

    # A checkpoint without the data module's entry is refused, not restarted from 0.
    bare = torch.load(full / "ckpt" / "step=4.ckpt", weights_only=True)
    entry = bare.pop("StreamDataModule")
    torch.save(bare, tmp_path / "bare.ckpt")
    assert _job(tmp_path / "bare", "--resume", tmp_path / "bare.ckpt") == 3
    assert "holds no `StreamDataModule` entry" in (tmp_path / "bare" / "error.txt").read_text()
    # Another stream's entry is refused by field (the job's corpus, another seed).
    with pytest.raises(StateMismatchError, match="seed in checkpoint: 11 / in stream: 12"):
        StreamDataModule(sample_corpus(seed=12)).load_state_dict(entry)


# Two processes: ~2.5 min on 2 cores; the one-process kill/resume runs by default.
@pytest.mark.slow
def test_two_process_ddp_killed_and_resumed_trains_on_the_uninterrupted_batches(
    tmp_path: Path,
) -> None:
    # Per-rank layout: rank 0 writes the checkpoint, so both ranks' states must be in it.
    full, cut = tmp_path / "full", tmp_path / "cut"
    per_rank = ("--layout", "per-rank", "--steps", 6, "--workers", 1)
    assert _job(full, *per_rank, nproc=2) == 0
    assert _job(cut, *per_rank, "--kill-at", 5, nproc=2) != 0
    assert _job(cut, *per_rank, "--resume", cut / "ckpt" / "step=4.ckpt", nproc=2) == 0
    for rank in (0, 1):
        assert batches_after_resume(cut, rank, 4) == rows(full, rank)[4:]
    assert rows(full, 0) != rows(full, 1)

    # Rank 0 wrote both ranks' states; one process refuses them by the data-parallel size.
    entry = torch.load(full / "ckpt" / "step=4.ckpt", weights_only=True)["StreamDataModule"]
    assert {"dp_rank_0", "dp_rank_1"} <= entry.keys()
    with pytest.raises(StateMismatchError, match="dp_world_size in checkpoint: 2 / in job: 1"):
        StreamDataModule(sample_corpus(layout="per-rank")).load_state_dict(entry)


@pytest.mark.slow
def test_global_layout_checkpoint_resumes_on_another_world_size(tmp_path: Path) -> None:
    """Saved by 2 DDP ranks, resumed by 1 with the same global batch (short form: the
    in-process load of a state with another ``dp_world_size`` below)."""
    two, one = tmp_path / "two", tmp_path / "one"
    assert _job(two, "--steps", 6, nproc=2) == 0
    assert _job(one, "--steps", 6, "--resume", two / "ckpt" / "step=4.ckpt") == 0
    global_batches = [a + b for a, b in zip(rows(two, 0), rows(two, 1), strict=True)]
    assert rows(one) == global_batches[4:]


def _corpus(seed: int = 3, layout: str = "global", batch_size: int = 2) -> StreamingCorpus:
    documents = [np.arange(1, 2 + i % 9, dtype=np.int64) for i in range(30)]
    return StreamingCorpus(
        documents, rank=0, world_size=1, block=4, batch_size=batch_size, seed=seed, layout=layout
    )


def test_train_dataloader_is_a_stream_loader_that_resumes_through_its_state() -> None:
    """Two real worker processes, groups of 3 batches: a state after 5 batches (inside
    the second group counted from 0, mid-epoch) loaded into the loader yields the
    stream's batches from batch 5 on, across epochs."""
    corpus = _corpus()
    module = StreamDataModule(corpus, num_workers=2, batches_per_item=3)
    loader = module.train_dataloader()
    assert isinstance(loader, StreamLoader)
    assert (loader.num_workers, loader.batches_per_item) == (2, 3)
    assert loader.state_dict() == module.state_dict()
    later = _corpus()
    later.seek(*later.next_cursor(0, 0, 5))
    saved = StreamDataModule(later).state_dict()
    loader.load_state_dict(saved)
    assert module.state_dict() == loader.state_dict() == saved
    # The stream runs across its epochs (18 batches each): 40 from 5 reach epoch 2.
    got = [batch[0].tolist() for batch in itertools.islice(loader, 40)]
    expected = [batch.context.tolist() for batch in itertools.islice(later.batches(), 40)]
    assert got == expected
    assert later.cursor[0] >= 2
    # The module's own position moves the next iteration of the same loader too.
    module.load_state_dict(StreamDataModule(_corpus()).state_dict())
    again = [batch[0].tolist() for batch in itertools.islice(loader, 45)]
    assert again[5:] == got


def test_state_round_trips_and_bad_states_are_refused_by_name() -> None:
    module = StreamDataModule(_corpus())
    saved = module.state_dict()
    assert (saved["version"], saved["layout"], saved["dp_world_size"]) == (1, "global", 1)
    StreamDataModule(_corpus()).load_state_dict(saved)
    # A global-layout state loads on another data-parallel size and batch size.
    moved = StreamDataModule(_corpus(batch_size=1))
    moved.load_state_dict({**saved, "dp_world_size": 2})
    assert moved.state_dict() == saved
    with pytest.raises(StateMismatchError, match="seed in checkpoint: 3 / in stream: 4"):
        StreamDataModule(_corpus(seed=4)).load_state_dict(saved)
    with pytest.raises(StateMismatchError, match="layout in checkpoint: 'global'"):
        StreamDataModule(_corpus(layout="per-rank")).load_state_dict(saved)
    with pytest.raises(StateMismatchError, match=r"`version` must be 1\. Got 2"):
        module.load_state_dict({**saved, "version": 2})
    with pytest.raises(StateMismatchError, match="lacks the field"):
        module.load_state_dict({"version": 1, "layout": "global", "dp_world_size": 1})


def test_bad_arguments_are_refused_by_name() -> None:
    with pytest.raises(ArgumentTypeError, match="`stream` must be a resumable stream"):
        StreamDataModule([1, 2, 3])  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="num_workers"):
        StreamDataModule(_corpus(), num_workers=-1)
    with pytest.raises(ArgumentError, match="batches_per_item"):
        StreamDataModule(_corpus(), batches_per_item=0)


def test_without_lightning_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "lightning.pytorch", None)
    monkeypatch.delitem(sys.modules, "mixle.lightning")
    with pytest.raises(MissingBackendError, match=r"pip install 'mixle\[lightning\]'"):
        importlib.import_module("mixle.lightning")
