"""``mixle train --resume`` with a damaged epoch-plan file trains on the same data as an
intact resume (issue #32, class 1): the file is rebuilt, not trusted."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from mixle.corpus import CorpusWriter
from mixle.train import train
from tests.corpus.storage.test_plan_file_integrity import _edit_element, _header
from tests.train._helpers import assert_bitwise_equal, final_tensors, step_records, tiny_config


def _prechunked_corpus(path: Path, documents: int = 64, length: int = 33) -> Path:
    """Equal-length documents: a wrong index in a plan passes its sampled length check."""
    rng = np.random.default_rng(3)
    with CorpusWriter(path, vocab_size=256) as writer:
        writer.add_many([rng.integers(0, 256, size=length) for _ in range(documents)])
    return path


def test_a_resume_with_a_flipped_bit_in_the_plan_trains_as_an_intact_resume(
    tmp_path: Path,
) -> None:
    corpus = _prechunked_corpus(tmp_path / "corpus")
    intact, damaged = tmp_path / "intact", tmp_path / "damaged"
    config = tiny_config(  # the permutation order: the one whose plans are kept
        corpus, steps=2, checkpoint_dir=str(intact), checkpoint_every=2, order="permutation"
    )
    train(config, log=lambda _: None)
    shutil.copytree(intact, damaged)
    plans = sorted((damaged / "plans").iterdir())
    assert plans
    originals = {p.name: p.read_bytes() for p in plans}
    for plan in plans:  # the lowest bit of every index: pairs of documents swapped
        data = originals[plan.name]
        for index in range(_header(data)[0]["arrays"]["indices"]["shape"][0]):
            data = _edit_element(data, "indices", index, lambda v: v ^ 1)
        plan.write_bytes(data)
    for run in (intact, damaged):
        resumed = config.replace(steps=4, resume=True, checkpoint_dir=str(run))
        train(resumed, log=lambda _: None)
    steps = [step_records(run / "metrics.jsonl") for run in (intact, damaged)]
    assert [s[0] for s in steps[1]] == [1, 2, 3, 4]
    assert steps[0] == steps[1]  # steps 3-4 trained on the same batches
    assert_bitwise_equal(final_tensors(intact), final_tensors(damaged))
    assert {p.name: p.read_bytes() for p in plans} == originals  # rebuilt
