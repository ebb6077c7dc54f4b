"""Global RNG states survive a JSON round trip (they are stored in each rank's file)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from mixle.errors import CheckpointError
from mixle.train import latest_checkpoint, train
from mixle.train._rng import get_rng_state, seed_everything, set_rng_state
from tests.train._helpers import tiny_config


def _draws() -> tuple[float, float, list[float]]:
    return random.random(), float(np.random.random()), torch.rand(3).tolist()


def test_rng_state_round_trips_through_json() -> None:
    seed_everything(5)
    _draws()
    state = json.loads(json.dumps(get_rng_state()))
    expected = _draws()
    seed_everything(99)
    set_rng_state(state)
    assert _draws() == expected


def test_malformed_rng_state_is_a_checkpoint_error() -> None:
    with pytest.raises(CheckpointError, match="RNG state"):
        set_rng_state({"python": [3, [1, 2], None]})


def test_checkpoint_rank_file_holds_cursor_and_rng_states(
    text_corpus: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    train(tiny_config(text_corpus, steps=2, checkpoint_dir=str(run)), log=lambda line: None)
    path = latest_checkpoint(str(run))
    assert path is not None
    state = json.loads((Path(path) / "rank-00000.json").read_text())
    assert set(state["rng"]) >= {"python", "numpy", "torch"}
    assert state["stream"]["epoch"] == 0 and state["stream"]["row"] == 2 * 4  # global rows
