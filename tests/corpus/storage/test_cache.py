"""The shared shard cache: one download per shard across processes, LRU bound, pins,
checksum failures never cached, background prefetch."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mixle.corpus import ShardCache, ShardedDocuments, open_corpus
from mixle.errors import ArgumentError, ChecksumError
from mixle.testing import shard_starts
from tests.corpus._remote_fixtures import *  # noqa: F403
from tests.corpus._remote_fixtures import FAST
from tests.corpus._servers import CorpusHTTPServer


def _writer(
    data: bytes, calls: list[int] | None = None, gate: threading.Barrier | None = None
) -> object:
    def fetch(path: str) -> None:
        if calls is not None:
            calls.append(1)
        if gate is not None:  # hold the one download until every thread has asked
            gate.wait(timeout=60)
        with open(path, "wb") as handle:
            handle.write(data)

    return fetch


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- ShardCache unit behaviour -------------------------------------------------------------
def test_concurrent_threads_fetch_a_file_once(tmp_path: Path) -> None:
    cache = ShardCache(str(tmp_path))
    data = b"x" * 1000
    calls: list[int] = []
    paths: list[str] = []
    # The downloader waits for the main thread, which starts it only after the other
    # five threads have started (they then wait on the download lock).
    gate = threading.Barrier(2)

    def get() -> None:
        paths.append(cache.get(_digest(data), len(data), _writer(data, calls, gate), pin=False))  # type: ignore[arg-type]

    threads = [threading.Thread(target=get) for _ in range(6)]
    for thread in threads:
        thread.start()
    gate.wait(timeout=60)
    for thread in threads:
        thread.join()
    assert len(calls) == 1
    assert len(set(paths)) == 1 and Path(paths[0]).read_bytes() == data


def test_lru_eviction_keeps_the_cache_under_its_limit(tmp_path: Path) -> None:
    cache = ShardCache(str(tmp_path), limit=250)
    blobs = [bytes([i]) * 100 for i in range(4)]
    for age, blob in enumerate(blobs):
        path = cache.get(_digest(blob), 100, _writer(blob), pin=False)  # type: ignore[arg-type]
        os.utime(path, (1000 * (age + 1),) * 2)  # distinct, ordered mtimes: the LRU clock
        assert cache.usage() <= 250
    present = set(os.listdir(tmp_path / "objects"))
    assert present == {_digest(blobs[2]), _digest(blobs[3])}


def test_recently_used_files_survive_eviction(tmp_path: Path) -> None:
    cache = ShardCache(str(tmp_path), limit=250)
    a, b, c = (bytes([i]) * 100 for i in range(3))
    for age, blob in enumerate((a, b)):
        path = cache.get(_digest(blob), 100, _writer(blob), pin=False)  # type: ignore[arg-type]
        os.utime(path, (1000 * (age + 1),) * 2)  # ordered mtimes, long ago
    cache.get(_digest(a), 100, _writer(a), pin=False)  # touch a (now): b is least recent
    cache.get(_digest(c), 100, _writer(c), pin=False)  # type: ignore[arg-type]
    assert set(os.listdir(tmp_path / "objects")) == {_digest(a), _digest(c)}


def test_pinned_files_are_never_evicted_even_over_the_limit(tmp_path: Path) -> None:
    cache = ShardCache(str(tmp_path), limit=150)
    a, b = bytes([1]) * 100, bytes([2]) * 100
    cache.get(_digest(a), 100, _writer(a))  # type: ignore[arg-type]  # pinned
    cache.get(_digest(b), 100, _writer(b))  # type: ignore[arg-type]  # pinned
    assert cache.usage() == 200  # over the limit by exactly the files in use
    cache.release(_digest(a))
    c = bytes([3]) * 100
    cache.get(_digest(c), 100, _writer(c), pin=False)  # type: ignore[arg-type]
    assert set(os.listdir(tmp_path / "objects")) == {_digest(b), _digest(c)}


def _hold_pin(directory: str, digest: str, ready: object, done: object) -> None:
    cache = ShardCache(directory)
    cache.pin(digest)
    ready.set()  # type: ignore[attr-defined]
    done.wait(30)  # type: ignore[attr-defined]


def test_a_pin_held_by_another_process_blocks_eviction(tmp_path: Path) -> None:
    cache = ShardCache(str(tmp_path), limit=150)
    a, b = bytes([1]) * 100, bytes([2]) * 100
    cache.get(_digest(a), 100, _writer(a), pin=False)  # type: ignore[arg-type]
    context = multiprocessing.get_context("spawn")
    ready, done = context.Event(), context.Event()
    process = context.Process(target=_hold_pin, args=(str(tmp_path), _digest(a), ready, done))
    process.start()
    try:
        assert ready.wait(60)
        cache.get(_digest(b), 100, _writer(b), pin=False)  # type: ignore[arg-type]
        assert _digest(a) in os.listdir(tmp_path / "objects")
    finally:
        done.set()
        process.join(30)
    assert process.exitcode == 0


def test_a_failed_fetch_leaves_nothing_behind(tmp_path: Path) -> None:
    cache = ShardCache(str(tmp_path))

    def broken(path: str) -> None:
        Path(path).write_bytes(b"partial")
        raise ChecksumError("bad body")

    with pytest.raises(ChecksumError):
        cache.get("ab" * 32, 7, broken)
    assert os.listdir(tmp_path / "objects") == []
    assert os.listdir(tmp_path / "tmp") == []
    assert cache.pinned() == set()


@pytest.mark.parametrize("limit", [-1, 1.5, True])
def test_invalid_cache_limit_raises(tmp_path: Path, limit: object) -> None:
    with pytest.raises(ArgumentError, match="cache_limit"):
        ShardCache(str(tmp_path), limit=limit)  # type: ignore[arg-type]


# -- through the reader ------------------------------------------------------------------
@pytest.fixture
def server(sample_corpus: Path) -> Iterator[CorpusHTTPServer]:
    with CorpusHTTPServer(str(sample_corpus)) as httpd:
        yield httpd


def _read_all(url: str, cache_dir: str, limit: int | None, start: Any) -> str:
    documents = open_corpus(
        url, cache_dir=cache_dir, cache_limit=limit, max_open_shards=2, retries=4, backoff=0.01
    )
    start.wait(timeout=120)  # both processes start reading together
    digest = hashlib.sha256()
    for document in documents.take(np.arange(len(documents))):
        digest.update(np.int64(document.shape[0]).tobytes() + document.astype(np.int64).tobytes())
    return digest.hexdigest()


def _expected_digest(documents: ShardedDocuments) -> str:
    digest = hashlib.sha256()
    for document in documents:
        digest.update(np.int64(document.shape[0]).tobytes() + document.astype(np.int64).tobytes())
    return digest.hexdigest()


def test_two_processes_sharing_a_cache_download_each_shard_once(
    server: CorpusHTTPServer, sample_corpus: Path, tmp_path: Path
) -> None:
    cache_dir = str(tmp_path / "shared")
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, context.Pool(2) as pool:
        start = manager.Barrier(2)
        results = pool.starmap(_read_all, [(server.url, cache_dir, None, start)] * 2)
    expected = _expected_digest(open_corpus(sample_corpus))
    assert results == [expected, expected]
    shard_files = [name for name in os.listdir(sample_corpus) if name.startswith("shard-")]
    for name in shard_files:
        assert server.state.full_gets[name] == 1, name  # downloaded once, by one process
    objects = os.listdir(Path(cache_dir) / "objects")
    assert len(objects) == len(shard_files)  # one copy of each file, content-addressed


def test_two_processes_under_a_tight_limit_read_correct_data(
    server: CorpusHTTPServer, sample_corpus: Path, tmp_path: Path
) -> None:
    documents = open_corpus(sample_corpus)
    biggest = max(e["tokens_bytes"] + e["offsets_bytes"] for e in documents.manifest["shards"])
    limit = 3 * biggest
    cache_dir = str(tmp_path / "shared")
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, context.Pool(2) as pool:
        start = manager.Barrier(2)
        results = pool.starmap(_read_all, [(server.url, cache_dir, limit, start)] * 2)
    assert results == [_expected_digest(documents)] * 2
    # Over the limit by at most the shards in use: 2 open shards in each of 2 processes.
    assert ShardCache(cache_dir).usage() <= limit + 4 * biggest


def test_open_shards_are_pinned_and_evictable_after_leaving_the_reader(
    server: CorpusHTTPServer, tmp_path: Path
) -> None:
    documents = open_corpus(
        server.url, cache_dir=tmp_path, cache_limit=1, max_open_shards=2, **FAST
    )
    entries = documents.manifest["shards"]
    starts = shard_starts(documents)
    documents[starts[0]]
    documents[starts[1]]
    objects = set(os.listdir(tmp_path / "objects"))
    for number in (0, 1):  # limit of 1 byte, but both open shards stay
        assert {entries[number]["tokens_sha256"], entries[number]["offsets_sha256"]} <= objects
    documents[starts[2]]  # shard 0 leaves the 2-shard LRU: unpinned and evicted
    objects = set(os.listdir(tmp_path / "objects"))
    assert entries[0]["tokens_sha256"] not in objects
    assert entries[2]["tokens_sha256"] in objects
    pinned = documents.store.cache.pinned()
    assert entries[0]["tokens_sha256"] not in pinned and entries[1]["tokens_sha256"] in pinned


def test_prefetch_downloads_in_the_background_before_the_read(
    server: CorpusHTTPServer, tmp_path: Path
) -> None:
    documents = open_corpus(server.url, cache_dir=tmp_path, **FAST)
    entries = documents.manifest["shards"]
    starts = np.concatenate([[0], np.cumsum([e["num_documents"] for e in entries])])
    future = np.arange(starts[5], starts[7])
    server.state.hold = threading.Event()  # downloads wait until the event is set
    try:
        documents.prefetch(future)  # a hint: returns although no download can finish
        objects = tmp_path / "objects"
        assert not objects.exists() or not os.listdir(objects)
    finally:
        server.state.hold.set()
    wanted = {entries[n][k] for n in (5, 6) for k in ("tokens_sha256", "offsets_sha256")}
    deadline = time.time() + 60  # generous: only bounds a hang, never a pass
    objects = tmp_path / "objects"  # created by the background task once it starts
    while not (objects.exists() and wanted <= set(os.listdir(objects))) and (
        time.time() < deadline
    ):
        time.sleep(0.02)
    assert wanted <= set(os.listdir(tmp_path / "objects"))
    before = sum(server.state.gets.values())
    reference = open_corpus(server.state.root)
    for got, want in zip(documents.take(future), reference.take(future), strict=True):
        np.testing.assert_array_equal(got, want)
    assert sum(server.state.gets.values()) == before  # served from the prefetched files
    documents.close()
    assert documents.store.cache.pinned() == set()
