"""``tools/bench_mixture_stream.py``: the order runs (issue #25, mixtures) for both
shapes of source. Timings on a shared machine are measurements, not asserted."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from mixle.corpus import CorpusWriter
from tests.tools._run import run_tool
from tools.bench_mixture_stream import source_shapes


def _corpus(path: Path, documents: int) -> Path:
    with CorpusWriter(path, vocab_size=100) as writer:
        writer.add_many([np.full(2, 7, dtype=np.uint16)] * documents)
    return path


def test_source_shapes_count_documents_and_default_windows(tmp_path: Path) -> None:
    # Default windows hold 64 blocks of 4,096 documents: 262,144 documents.
    small = _corpus(tmp_path / "small", 5)
    assert source_shapes([small]) == "5 documents (1 window)"


_ORDER_LINE = re.compile(
    r"order, gather (numpy|numba), sources (.+):\n  (\d+) batches from a fresh Mixture, "
    r"CPU s: blocks .+; throughput blocks / permutation per round .+ \(median [\d.]+\)"
)


@pytest.mark.slow
def test_order_only_runs_both_source_shapes_and_cleans_up(tmp_path: Path) -> None:
    work = tmp_path / "work"
    result = run_tool(
        "bench_mixture_stream.py",
        *("--tokens", "1000000", "--order-only", "--multi-window"),
        *("--multi-tokens", "3000000", "--multi-mean", "4"),
        *("--order-rounds", "1", "--order-batches", "40", "--batch-size", "2"),
        *("--block", "64", "--workdir", str(work)),
    )
    found = _ORDER_LINE.findall(result.stdout)
    assert len(found) == 2, result.stdout
    assert all(count == "40" for _, _, count in found)
    assert "(1 window)" in found[0][1] and "(2 windows)" in found[1][1]
    assert "throughput (" not in result.stdout  # --order-only: no throughput section
    assert not work.exists()
