"""A fresh process resumes a ``StreamingCorpus`` from its cached plan at any cursor, with
the batches of the uninterrupted run and without planning."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mixle.corpus import open_corpus
from mixle.corpus.storage.plan_cache import PlanFiles
from mixle.data.streaming_corpus import StreamingCorpus
from tests.corpus.conftest import random_documents

ROOT = Path(__file__).resolve().parents[3]
_CHILD = """
import json, sys
sys.path.insert(0, {root!r})
from mixle.corpus import open_corpus
from mixle.corpus.storage.plan_cache import PlanFiles
from mixle.data.streaming_corpus import StreamingCorpus
options, state = json.loads(sys.argv[1]), json.loads(sys.argv[2])
corpus = StreamingCorpus(open_corpus({corpus!r}), plan_store=PlanFiles({plans!r}), **options)
corpus.load_state_dict(state)
batches = [[a.tolist() for a in batch] for _, batch in zip(range(3), corpus)]
print(json.dumps({{"batches": batches, "planned": corpus._plans._lengths_array is not None,
                  "state": corpus.state_dict(), "numpy_ma": "numpy.ma" in sys.modules}}))
"""


@pytest.mark.parametrize("layout", ["per-rank", "global"])
def test_a_fresh_process_resumes_at_start_middle_and_end_from_the_cached_plan(
    make_corpus: Callable[..., Path], tmp_path: Path, layout: str
) -> None:
    path = make_corpus(random_documents(5, 400, max_len=30), vocab_size=1000)
    plans = tmp_path / "plans"
    options: dict[str, Any] = {
        "rank": 1,
        "world_size": 3,
        "block": 8,
        "batch_size": 2,
        "layout": layout,
        "boundary_id": 999,
        "document_ids": True,
    }
    whole = StreamingCorpus(open_corpus(path), plan_store=PlanFiles(plans), **options)
    expected, states = [], [whole.state_dict()]
    for batch in whole:  # two epochs, with the state before each batch
        expected.append([np.array(a) for a in batch])
        states.append(whole.state_dict())
        if whole.cursor[0] == 2:
            break
    child = _CHILD.format(root=str(ROOT), corpus=str(path), plans=str(plans))
    per_epoch = whole.steps_left(0, 0)
    for position in (0, per_epoch // 2, per_epoch - 1):  # the last one reads into epoch 1
        result = subprocess.run(
            [sys.executable, "-c", child, json.dumps(options), json.dumps(states[position])],
            check=True,
            capture_output=True,
            text=True,
        )
        output = json.loads(result.stdout)
        assert output["planned"] is False  # loaded, not planned: no length was read
        # numpy.ma costs ~20 ms to import (np.unique pulls it in): not on the restart path.
        assert output["numpy_ma"] is False
        assert output["state"] == states[position + 3]
        for want, got in zip(expected[position : position + 3], output["batches"], strict=True):
            for x, y in zip(want, got, strict=True):
                np.testing.assert_array_equal(x, np.array(y, dtype=x.dtype))


def test_a_restart_on_a_corpus_checked_block_by_block_never_imports_numpy_ma(
    make_corpus: Callable[..., Path], tmp_path: Path
) -> None:
    # Over 2**18 documents in one shard: offsets are checked per block as documents are
    # read, on the restart's path (np.unique there would import numpy.ma, ~20 ms).
    lengths = np.random.default_rng(0).integers(1, 4, size=300_000)
    flat = np.arange(int(lengths.sum()), dtype=np.int64) % 1000
    path = make_corpus(np.split(flat, np.cumsum(lengths)[:-1]), vocab_size=1000)
    plans = tmp_path / "plans"
    options = {"rank": 0, "world_size": 2, "block": 64, "batch_size": 4, "layout": "global"}
    whole = StreamingCorpus(open_corpus(path), plan_store=PlanFiles(plans), **options)
    state = {**whole.state_dict(), "row": whole.num_rows(0) // 2 // 8 * 8}
    child = _CHILD.format(root=str(ROOT), corpus=str(path), plans=str(plans))
    result = subprocess.run(
        [sys.executable, "-c", child, json.dumps(options), json.dumps(state)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    output = json.loads(result.stdout)
    assert output["planned"] is False
    assert output["numpy_ma"] is False
