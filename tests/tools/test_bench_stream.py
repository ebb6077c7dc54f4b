"""``tools/bench_stream.py`` (issue #25's throughput target, issue #31's floors): the
floors' rows, and a small run as ``slow``.

Throughput on a shared machine is a measurement, not asserted. What is checked: the
generated corpus holds exactly the requested tokens; both floors cut the raw token files
into the rows of consecutive windows and reuse one output array (a fresh array per batch
costs page faults, which a floor must not measure); a small run prints every method,
the blocks/permutation order ratio for both gather backends, and deletes its corpora.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mixle.corpus import open_corpus
from tests.tools._run import run_tool
from tools.bench_stream import RawShards, baseline_row_slices, baseline_sequential, generate


def test_both_floors_are_consecutive_rows_of_the_token_files_in_one_reused_array(
    tmp_path: Path,
) -> None:
    generate(tmp_path / "c", 5_000, 12, seed=1)
    documents = open_corpus(tmp_path / "c")
    assert documents.num_tokens == 5_000
    stream = np.concatenate(list(documents)).astype(np.int64)
    raw = RawShards(tmp_path / "c")
    block, batch = 9, 4
    for floor in (baseline_sequential, baseline_row_slices):
        first, count = None, 0
        for number, rows in enumerate(floor(raw, block, batch)):  # checked as it comes
            first = rows if first is None else first
            assert rows is first, f"{floor.__name__} reuses its output array"
            assert rows.dtype == np.int64 and rows.shape == (batch, block + 1)
            for row in range(batch):
                start = (number * batch + row) * block
                np.testing.assert_array_equal(rows[row], stream[start : start + block + 1])
            count = number + 1
        assert count == len(range(0, 5_000 - block * batch - 1, block * batch)), floor.__name__


@pytest.mark.slow
def test_small_run_prints_every_method_and_both_order_ratios(tmp_path: Path) -> None:
    work = tmp_path / "work"
    result = run_tool(
        "bench_stream.py",
        "--workdir",
        str(work),
        "--tokens",
        "200000",
        "--mean-length",
        "64",
        "--resume-documents",
        "5000",
        "--batches",
        "10",
        "--rounds",
        "1",
        "--epoch-rounds",
        "1",
    )
    out = result.stdout
    for method in (
        "(a) sequential memmap",
        "(a2) per-row slices",
        "(b) python loop",
        "ours global, permutation [numpy]",
        "ours global, ids",
    ):
        assert f"{method}:" in out, method
    assert "order [numpy]: blocks / permutation =" in out
    assert "load_state_dict + first batch" in out and "RssAnon" in out
    assert not work.exists()
