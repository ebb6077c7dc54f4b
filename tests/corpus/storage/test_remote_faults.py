"""Fault injection on loopback: 503s, connection resets, truncated and corrupted bodies.

The HTTP server in ``tests/corpus/_servers.py`` injects each fault into the next k
matching requests; the reader must retry with backoff, refetch bad bodies, never
cache a bad file, and finally fail with an error naming URL, shard and attempts.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mixle.corpus.storage.fs as fs_module
from mixle.corpus import ShardedDocuments, open_corpus
from mixle.corpus.storage.fs import BadResult, call_with_retries, is_transient
from mixle.errors import (
    ChecksumError,
    CorpusError,
    CorpusFormatError,
    CorpusNotFoundError,
    MissingBackendError,
    RemoteError,
)
from mixle.testing import shard_starts
from tests.corpus._remote_fixtures import *  # noqa: F403
from tests.corpus._remote_fixtures import FAST
from tests.corpus._servers import CorpusHTTPServer


@pytest.fixture
def server(sample_corpus: Path) -> Iterator[CorpusHTTPServer]:
    with CorpusHTTPServer(str(sample_corpus)) as httpd:
        yield httpd


@pytest.fixture(scope="module")
def reference(sample_corpus: Path) -> ShardedDocuments:
    return open_corpus(sample_corpus)


def _all(documents: ShardedDocuments) -> list[np.ndarray]:
    return documents.take(np.arange(len(documents)))


def _assert_same(documents: ShardedDocuments, reference: ShardedDocuments) -> None:
    for got, want in zip(_all(documents), _all(reference), strict=True):
        np.testing.assert_array_equal(got, want)


def _cached_objects(cache: Path) -> set[str]:
    return set(os.listdir(cache / "objects")) if (cache / "objects").exists() else set()


@pytest.mark.parametrize("mode", ["cache", "range"])
@pytest.mark.parametrize("kind", ["503", "reset", "truncate"])
def test_transient_faults_are_retried_and_results_unchanged(
    server: CorpusHTTPServer, reference: ShardedDocuments, tmp_path: Path, kind: str, mode: str
) -> None:
    server.fail(kind, 2, match="manifest.json")
    server.fail(kind, 2, match="shard-00001", methods=("GET", "HEAD"))
    documents = open_corpus(server.url, cache_dir=tmp_path, mode=mode, **FAST)
    _assert_same(documents, reference)
    assert server.state.injected[kind] == 4


def test_corrupted_body_is_refetched_and_never_cached(
    server: CorpusHTTPServer, reference: ShardedDocuments, tmp_path: Path
) -> None:
    server.fail("corrupt", 2, match="shard-00002.tokens")
    documents = open_corpus(server.url, cache_dir=tmp_path, **FAST)
    _assert_same(documents, reference)
    assert server.state.injected["corrupt"] == 2
    assert server.state.gets["shard-00002.tokens"] == 3  # two bad bodies, one good


def test_short_range_body_is_refetched(
    server: CorpusHTTPServer, reference: ShardedDocuments, tmp_path: Path
) -> None:
    documents = open_corpus(server.url, cache_dir=tmp_path, mode="range", **FAST)
    server.fail("short", 2, match="shard-00003.tokens")
    index = int(shard_starts(reference)[3]) + 1
    np.testing.assert_array_equal(documents[index], reference[index])
    assert server.state.injected["short"] == 2


def test_persistent_5xx_raises_remote_error_naming_url_shard_attempts(
    server: CorpusHTTPServer, tmp_path: Path
) -> None:
    documents = open_corpus(server.url, cache_dir=tmp_path, **FAST)
    server.fail("503", 100, match="shard-00004.tokens")
    index = int(shard_starts(documents)[4])
    with pytest.raises(RemoteError) as info:
        documents[index]
    message = str(info.value)
    assert f"{server.url}/shard-00004.tokens" in message
    assert "shard 4" in message
    assert "4 attempts" in message
    assert isinstance(info.value, CorpusError) and isinstance(info.value, OSError)
    assert server.state.gets["shard-00004.tokens"] == 4
    server.state.faults.clear()
    assert documents[index].tolist() == open_corpus(server.state.root)[index].tolist()


def test_persistent_corruption_raises_checksum_error_and_caches_nothing(
    server: CorpusHTTPServer, tmp_path: Path
) -> None:
    documents = open_corpus(server.url, cache_dir=tmp_path, **FAST)
    server.fail("corrupt", 100, match="shard-00005.tokens")
    digest = documents.manifest["shards"][5]["tokens_sha256"]
    with pytest.raises(ChecksumError, match=r"shard 5 .*4 attempts"):
        documents[int(shard_starts(documents)[5])]
    assert digest not in _cached_objects(tmp_path)
    assert os.listdir(tmp_path / "tmp") == []


def test_missing_shard_file_is_a_format_error_not_retried(
    sample_corpus: Path, tmp_path: Path
) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(sample_corpus, copy)
    with CorpusHTTPServer(str(copy)) as httpd:
        documents = open_corpus(httpd.url, cache_dir=tmp_path / "cache", **FAST)
        (copy / "shard-00006.tokens").unlink()
        with pytest.raises(CorpusError, match=r"shard-00006\.tokens"):
            documents[int(shard_starts(documents)[6])]
        assert httpd.state.gets["shard-00006.tokens"] == 1


def test_retries_back_off_exponentially_within_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    delays: list[float] = []
    calls: list[int] = []

    def flaky() -> bytes:
        calls.append(1)
        raise ConnectionResetError("reset by peer")

    # Record the requested delays instead of sleeping: the schedule, not the clock.
    monkeypatch.setattr(fs_module.time, "sleep", delays.append)
    with pytest.raises(RemoteError, match="failed after 4 attempts; last: ConnectionResetError"):
        call_with_retries(flaky, url="s3://b/k", what="shard 0", attempts=4, backoff=0.02)
    assert len(calls) == 4 and len(delays) == 3  # no sleep after the last attempt
    for attempt, delay in enumerate(delays):
        nominal = 0.02 * 2**attempt  # doubling, +-50 % jitter
        assert 0.5 * nominal <= delay <= 1.5 * nominal


def test_backoff_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    delays: list[float] = []

    def flaky() -> bytes:
        raise ConnectionResetError("reset by peer")

    monkeypatch.setattr(fs_module.time, "sleep", delays.append)
    with pytest.raises(RemoteError):
        call_with_retries(flaky, url="s3://b/k", what="shard 0", attempts=8, backoff=5.0)
    assert max(delays) <= 1.5 * fs_module.MAX_BACKOFF


def test_non_transient_errors_are_not_retried() -> None:
    calls = []

    def denied() -> bytes:
        calls.append(1)
        raise PermissionError("access denied")

    with pytest.raises(RemoteError, match="not retried"):
        call_with_retries(denied, url="s3://b/k", what="shard 2", attempts=5, backoff=0.01)
    assert len(calls) == 1
    with pytest.raises(FileNotFoundError):
        call_with_retries(lambda: (_ for _ in ()).throw(FileNotFoundError("k")), url="u", what="w")


class _Status(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (ConnectionResetError(), True),
        (TimeoutError(), True),
        (_Status(503), True),
        (_Status(500), True),
        (_Status(429), True),
        (_Status(408), True),
        (_Status(403), False),
        (_Status(404), False),
        (FileNotFoundError(), False),
        (PermissionError(), False),
        (ValueError("bad"), False),
        (CorpusNotFoundError("x"), False),
    ],
)
def test_transient_classification(error: BaseException, transient: bool) -> None:
    assert is_transient(error) is transient


def test_missing_optional_backend_names_the_extra_to_install(tmp_path: Path) -> None:
    pytest.importorskip("fsspec")
    try:
        import gcsfs  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("gcsfs is installed here")
    with pytest.raises(MissingBackendError, match=r"pip install 'mixle\[gcs\]'") as info:
        open_corpus("gs://bucket/corpus", cache_dir=tmp_path)
    assert isinstance(info.value, ImportError)


def test_range_mode_fetches_only_the_document_bytes(
    server: CorpusHTTPServer, reference: ShardedDocuments, tmp_path: Path
) -> None:
    documents = open_corpus(server.url, cache_dir=tmp_path, mode="range", **FAST)
    index = int(np.argmax(reference.lengths))
    document = documents[index]
    np.testing.assert_array_equal(document, reference[index])
    number = int(np.searchsorted(reference._starts_array, index, side="right") - 1)
    tokens_file = reference.manifest["shards"][number]["tokens"]
    assert server.state.bytes_sent[tokens_file] == document.nbytes
    assert _cached_objects(tmp_path) == set()  # no local copy in range mode


@pytest.mark.parametrize("error", [ChecksumError, CorpusFormatError, None])
def test_a_consistently_bad_result_names_its_error_type(error: Any) -> None:
    def validate(result: bytes) -> BadResult:
        return BadResult(f"body {result!r} is wrong", error)

    with pytest.raises(RemoteError, match="failed after 2 attempts; last: body") as caught:
        call_with_retries(
            lambda: b"x", url="s3://b/k", what="shard 0", attempts=2, backoff=0, validate=validate
        )
    assert caught.value.result_error is error
