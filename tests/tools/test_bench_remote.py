"""``tools/bench_remote.py`` (issue #31 item 5: remote cold read against ``s3fs.get``):
its reader and a ``--quick`` run as ``slow``.

Throughput is a measurement, not asserted. What is checked: the consumer it times reads
every token of the corpus, with and without prefetch hints; a quick run against moto
prints the cold-cache ratio against its 0.7x target, the warm-cache ratio, the first
batch and the range-mode bytes, and deletes its work directory.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from mixle.corpus import open_corpus
from tests.tools._run import run_tool
from tools.bench_remote import consume, make_corpus


def test_the_consumer_reads_every_token_with_and_without_hints(tmp_path: Path) -> None:
    make_corpus(tmp_path / "c", 1, 2**20)  # one batch of 2,000 documents, ~1.3M tokens
    documents = open_corpus(tmp_path / "c")
    assert documents.num_shards > 1 and len(documents) == 2_000
    total = int(sum(int(np.asarray(d, dtype=np.int64).sum()) for d in documents))
    assert consume(documents, 300, False) == total
    assert consume(open_corpus(tmp_path / "c"), 300, True, ahead=3) == total


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("moto") is None, reason="moto[server] not installed")
def test_quick_run_reports_the_cold_ratio_against_its_target(tmp_path: Path) -> None:
    work = tmp_path / "work"
    out = run_tool("bench_remote.py", "--quick", "--workdir", str(work)).stdout
    assert "vs s3fs.get" in out and "(target >= 0.7)" in out
    assert "vs local" in out and "(target >= 0.9)" in out
    assert "first batch (64 docs): cold S3" in out and "range mode:" in out
    assert not work.exists()
