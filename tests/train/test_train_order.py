"""``mixle train``'s epoch order (issue #25 item 3): the blocks order by default, named in
the checkpoint; a checkpoint of the permutation order resumes with it when ``order`` is
unset, and is refused, naming the field and the order that resumes it, when another
order is asked for."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mixle.corpus import CorpusWriter
from mixle.errors import CheckpointError
from mixle.train import train
from tests.train._helpers import tiny_config


def _saved_order(run: Path, step: int) -> object:
    state = json.loads((run / f"step-{step:08d}" / "rank-00000.json").read_text())
    return state["stream"]["stream"].get("order")


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    rng = np.random.default_rng(5)
    with CorpusWriter(tmp_path / "corpus", vocab_size=256) as writer:
        writer.add_many([rng.integers(0, 256, size=20 + n % 9) for n in range(64)])
    return tmp_path / "corpus"


def test_a_new_run_packs_the_blocks_order_and_its_checkpoint_names_it(
    corpus: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    train(
        tiny_config(corpus, steps=1, checkpoint_dir=str(run), checkpoint_every=1),
        log=lambda _: None,
    )
    assert _saved_order(run, 1) == {
        "name": "blocks",
        "version": 2,
        "block_documents": 64,
        "window_blocks": 1,
    }


def test_a_permutation_checkpoint_resumes_with_it_and_refuses_another_order(
    corpus: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    config = tiny_config(
        corpus, steps=1, checkpoint_dir=str(run), checkpoint_every=1, order="permutation"
    )
    train(config, log=lambda _: None)
    assert _saved_order(run, 1) is None  # the seed's order: no field, as before #25
    train(config.replace(steps=2, resume=True, order=None), log=lambda _: None)
    assert _saved_order(run, 2) is None
    with pytest.raises(CheckpointError, match=r"no `stream.order` field.*order='permutation'"):
        train(config.replace(steps=3, resume=True, order="blocks"), log=lambda _: None)
