"""Shared inputs and comparisons for the distributed-ingest tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def task_into(
    inputs: list[str], url: str, task: str, storage_options: dict[str, Any], options: dict[str, Any]
) -> None:
    """Run task ``task`` ("i/n") of the ingest of ``inputs`` into ``url`` (in a spawned
    process, as one task of an array)."""
    from mixle.corpus import ingest

    ingest(inputs, url, task=task, storage_options=storage_options, **options)


def run_tasks_into(
    inputs: list[str],
    url: str,
    storage_options: dict[str, Any],
    options: dict[str, Any],
    count: int = 2,
) -> None:
    """Run all ``count`` tasks of the ingest into ``url``, each in its own process."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    procs = [
        context.Process(
            target=task_into, args=(inputs, url, f"{i}/{count}", storage_options, options)
        )
        for i in range(count)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=300)
        assert proc.exitcode == 0


def s3_objects(url: str, storage_options: dict[str, Any]) -> dict[str, bytes]:
    """Every object under the ``s3://`` ``url`` except hidden ones (name -> bytes)."""
    from mixle.corpus.storage.fs import filesystem

    fs = filesystem("s3", storage_options)
    root = url[len("s3://") :]
    return {
        name[len(root) + 1 :]: fs.cat_file(name)
        for name in fs.find(root)
        if not name[len(root) + 1 :].startswith(".")
    }


def documents(path: Path) -> list[np.ndarray]:
    from mixle.corpus import open_corpus

    corpus = open_corpus(path)
    return [np.asarray(corpus[i]) for i in range(len(corpus))]
