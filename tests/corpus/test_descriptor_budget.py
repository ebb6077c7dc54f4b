"""The reader's file-descriptor budget under ``ulimit -n 256`` (issue #18).

Each test runs a child process with ``resource.setrlimit(RLIMIT_NOFILE, 256)`` (the
macOS default) that reads every document of a 300-shard corpus. Before the budget,
the default ``max_open_shards=256`` needed 2 descriptors per local shard and 4 per
cached remote shard, and the child died with ``EMFILE`` (over HTTP disguised as
"cannot connect" after five retries)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from mixle.corpus import CorpusWriter
from tests.corpus._servers import CorpusHTTPServer
from tests.corpus.hardening_helpers import ROOT

SHARDS = 300

_CHILD = """
import json, os, resource, sys
import numpy as np
limit, location, cache, hog = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
from mixle.corpus import open_corpus
from mixle.errors import CorpusError
held = [os.open(os.devnull, os.O_RDONLY) for _ in range(hog)]
try:
    options = {"cache_dir": cache, "retries": 2, "backoff": 0.01} if "://" in location else {}
    docs = open_corpus(location, **options)
    total = sum(int(np.asarray(docs[i]).sum()) for i in range(len(docs)))
    order = np.arange(len(docs))[::-1]
    again = sum(int(d.sum()) for i in range(0, len(order), 32) for d in docs.take(order[i:i + 32]))
    print(json.dumps({"ok": total == again, "total": total, "open": docs._max_open}))
except CorpusError as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
"""


@pytest.fixture(scope="module")
def many_shards(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    path = tmp_path_factory.mktemp("fds") / "corpus"
    documents = [np.arange(10, dtype=np.int64) + i for i in range(SHARDS)]
    with CorpusWriter(path, vocab_size=1000, shard_max_bytes=20) as writer:
        writer.add_many(documents)
    assert len(json.loads((path / "manifest.json").read_text())["shards"]) == SHARDS
    return path, int(sum(d.sum() for d in documents))


@pytest.fixture(scope="module")
def served(many_shards: tuple[Path, int]) -> Iterator[str]:
    with CorpusHTTPServer(str(many_shards[0])) as server:
        yield server.url


def _child(limit: int, location: str, cache: Path, hog: int = 0) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(limit), location, str(cache), str(hog)],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        check=False,
    )
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def test_local_corpus_reads_under_ulimit_256(many_shards: tuple[Path, int], tmp_path: Path) -> None:
    path, total = many_shards
    report = _child(256, str(path), tmp_path)
    assert report.get("ok") and report["total"] == total, report
    assert 2 * int(str(report["open"])) < 256


def test_http_corpus_reads_under_ulimit_256(
    many_shards: tuple[Path, int], served: str, tmp_path: Path
) -> None:
    report = _child(256, served, tmp_path / "cache")
    assert report.get("ok") and report["total"] == many_shards[1], report
    assert 4 * int(str(report["open"])) < 256


def test_a_limit_too_low_for_one_shard_names_the_limit(
    many_shards: tuple[Path, int], tmp_path: Path
) -> None:
    report = _child(64, str(many_shards[0]), tmp_path)
    assert report["error"] == "DescriptorLimitError", report
    assert "is 64" in str(report["message"]) and "ulimit -n" in str(report["message"])


def test_running_out_anyway_is_a_clear_error(many_shards: tuple[Path, int], tmp_path: Path) -> None:
    # Other code already holds almost every descriptor the budget left to it.
    report = _child(256, str(many_shards[0]), tmp_path, hog=150)
    assert report["error"] == "DescriptorLimitError", report
    assert "out of file descriptors" in str(report["message"]) and "is 256" in str(
        report["message"]
    )
