"""Shared inputs and comparisons for the distributed-ingest tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.corpus.ingest_helpers import random_docs, write_jsonl

ROOT = Path(__file__).resolve().parents[3]
#: Options that cut the input into many units and shards (and fix the dtype).
OPTIONS = {"unit_size": 2048, "shard_size": 1024, "vocab_size": 1000}


def make_inputs(tmp_path: Path, seed: int = 5, files: int = 2, count: int = 150) -> list[str]:
    """A few JSONL inputs of random documents; returns their paths (as given to ingest)."""
    paths = []
    for number in range(files):
        docs = random_docs(seed + number, count)
        paths.append(str(write_jsonl(tmp_path / f"in-{number}.jsonl", docs)))
    return paths


def tree(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` (relative name -> bytes)."""
    files = {}
    for root, _, names in os.walk(path):
        for name in names:
            full = Path(root) / name
            files[str(full.relative_to(path))] = full.read_bytes()
    return files


def run_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``mixle`` in a fresh interpreter (a separate process, as on a cluster node)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-m", "mixle.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


def documents(path: Path) -> list[np.ndarray]:
    from mixle.corpus import open_corpus

    corpus = open_corpus(path)
    return [np.asarray(corpus[i]) for i in range(len(corpus))]
