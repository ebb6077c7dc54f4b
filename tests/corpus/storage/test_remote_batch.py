"""Batched prefetch: a hint's missing files are downloaded as one asynchronous batch on
the filesystem's event loop, and still checked before they reach the cache."""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mixle.corpus.storage.remote as remote_module
from mixle.corpus import ShardCache, ShardedDocuments, open_corpus
from mixle.errors import ChecksumError
from mixle.testing import shard_starts
from tests.corpus._remote_fixtures import *  # noqa: F403
from tests.corpus._remote_fixtures import FAST, OPENERS, Published
from tests.corpus._servers import CorpusHTTPServer

Publish = Callable[[int], None]


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- ShardCache.fill ---------------------------------------------------------------------
def test_fill_publishes_only_verified_files_and_leaves_no_temporaries(tmp_path: Path) -> None:
    cache = ShardCache(str(tmp_path))
    blobs = [b"a" * 100, b"b" * 200, b"c" * 300]
    items = [(_digest(blob), len(blob)) for blob in blobs]
    seen: list[list[int]] = []

    def fetch_many(indices: list[int], temporaries: list[str], publish: Publish) -> None:
        seen.append(list(indices))
        for position, (index, temporary) in enumerate(zip(indices, temporaries, strict=True)):
            with open(temporary, "wb") as handle:  # item 1 arrives corrupted
                handle.write(b"X" * 200 if index == 1 else blobs[index])
            if index != 1:
                publish(position)  # verified: visible at once
                assert os.path.exists(cache.path(items[index][0]))

    ready: list[int] = []
    assert cache.fill(items, fetch_many, ready.append) == [True, False, True]
    assert seen == [[0, 1, 2]]  # one batch for every missing file
    assert ready == [0, 2]
    assert sorted(os.listdir(tmp_path / "objects")) == sorted([items[0][0], items[2][0]])
    assert Path(cache.path(items[2][0])).read_bytes() == blobs[2]
    assert os.listdir(tmp_path / "tmp") == []
    # Present files are not fetched again (and are ready before any download).
    ready.clear()
    assert cache.fill(items, fetch_many, ready.append) == [True, False, True]
    assert seen[-1] == [1] and ready == [0, 2]


def test_fill_skips_a_file_another_downloader_holds_without_blocking(tmp_path: Path) -> None:
    cache = ShardCache(str(tmp_path))
    blobs = [b"a" * 100, b"b" * 200]
    items = [(_digest(blob), len(blob)) for blob in blobs]
    cache.fill([], lambda indices, temporaries, publish: None)  # creates the directories
    fd = os.open(tmp_path / "locks" / f"{items[0][0]}.dl", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another downloader, as a separate open file
    try:
        seen: list[list[int]] = []

        def fetch_many(indices: list[int], temporaries: list[str], publish: Publish) -> None:
            seen.append(list(indices))
            for position, (index, temporary) in enumerate(zip(indices, temporaries, strict=True)):
                Path(temporary).write_bytes(blobs[index])
                publish(position)

        assert cache.fill(items, fetch_many) == [False, True]
        assert seen == [[1]]
    finally:
        os.close(fd)


def test_fill_makes_room_for_the_whole_batch(tmp_path: Path) -> None:
    cache = ShardCache(str(tmp_path), limit=250)
    old = b"o" * 200
    cache.get(_digest(old), len(old), lambda path: Path(path).write_bytes(old), pin=False)
    blobs = [b"a" * 100, b"b" * 100]
    items = [(_digest(blob), len(blob)) for blob in blobs]

    def fetch_many(indices: list[int], temporaries: list[str], publish: Publish) -> None:
        for position, (index, temporary) in enumerate(zip(indices, temporaries, strict=True)):
            Path(temporary).write_bytes(blobs[index])
            publish(position)

    assert cache.fill(items, fetch_many) == [True, True]
    assert set(os.listdir(tmp_path / "objects")) == {digest for digest, _ in items}
    assert cache.usage() <= 250


# -- through the remote store -----------------------------------------------------------
@pytest.fixture(params=["s3-cache", "http-cache"])
def opened(
    request: pytest.FixtureRequest,
    published: Published,
    http_corpus: CorpusHTTPServer,
    tmp_path: Path,
) -> Iterator[ShardedDocuments]:
    documents = OPENERS[request.param](published, http_corpus, tmp_path)
    yield documents
    documents.close()


@pytest.fixture
def batches(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Records the URLs of every batched download (the real download still runs)."""
    calls: list[list[str]] = []
    real = remote_module.download_files

    def recording(fs: Any, urls: Sequence[str], *args: Any, **kwargs: Any) -> Any:
        calls.append(list(urls))
        return real(fs, urls, *args, **kwargs)

    monkeypatch.setattr(remote_module, "download_files", recording)
    return calls


def test_a_prefetch_hint_is_one_batch_and_reads_the_same(
    opened: ShardedDocuments, batches: list[list[str]], sample_corpus: Path
) -> None:
    starts = shard_starts(opened)
    future = np.arange(starts[2], starts[6])
    opened.prefetch(future)
    reference = open_corpus(sample_corpus)
    for got, want in zip(opened.take(future), reference.take(future), strict=True):
        np.testing.assert_array_equal(got, want)
    names = {f"shard-{n:05d}.{kind}" for n in range(2, 6) for kind in ("tokens", "offsets")}
    assert len(batches) == 1  # every file of the hint in one asynchronous batch
    assert {url.rsplit("/", 1)[-1] for url in batches[0]} == names
    cached = set(os.listdir(Path(opened.store.cache.directory) / "objects"))  # type: ignore[attr-defined]
    entries = opened.manifest["shards"]
    assert {entries[n][f"{k}_sha256"] for n in range(2, 6) for k in ("tokens", "offsets")} <= (
        cached
    )


@pytest.fixture
def server(sample_corpus: Path) -> Iterator[CorpusHTTPServer]:
    with CorpusHTTPServer(str(sample_corpus)) as httpd:
        yield httpd


def _prefetch_corrupted(
    server: CorpusHTTPServer, cache: Path, bad_bodies: int, shard: int, hinted: range
) -> tuple[ShardedDocuments, list[int], np.ndarray]:
    """Open over HTTP, corrupt ``bad_bodies`` bodies of ``shard``'s tokens, hint ``hinted``
    shards; return the reader, the shard starts and the hinted document indices."""
    documents = open_corpus(server.url, cache_dir=cache, **FAST)
    server.fail("corrupt", bad_bodies, match=f"shard-{shard:05d}.tokens")
    starts = shard_starts(documents)
    future = np.arange(starts[hinted.start], starts[hinted.stop])
    documents.prefetch(future)
    return documents, starts, future


def test_a_corrupted_batch_download_is_refetched_never_served(
    server: CorpusHTTPServer, sample_corpus: Path, tmp_path: Path, batches: list[list[str]]
) -> None:
    documents, _, future = _prefetch_corrupted(server, tmp_path, 1, 3, range(2, 5))
    reference = open_corpus(sample_corpus)
    for got, want in zip(documents.take(future), reference.take(future), strict=True):
        np.testing.assert_array_equal(got, want)
    assert len(batches) == 1 and server.state.injected["corrupt"] == 1
    assert server.state.full_gets["shard-00003.tokens"] == 2  # the bad body, then one good
    documents.close()


def test_persistent_corruption_in_a_batch_names_the_shard_and_caches_nothing(
    server: CorpusHTTPServer, tmp_path: Path, batches: list[list[str]]
) -> None:
    documents, starts, _ = _prefetch_corrupted(server, tmp_path, 100, 4, range(3, 5))
    with pytest.raises(ChecksumError, match=r"shard 4 \(shard-00004\.tokens\)"):
        documents[int(starts[4])]
    assert len(batches) == 1
    digest = documents.manifest["shards"][4]["tokens_sha256"]
    assert digest not in os.listdir(tmp_path / "objects")
    assert os.listdir(tmp_path / "tmp") == []
    documents.close()


# -- hints on a cache reader -------------------------------------------------------------
class _RecordingMapping:
    """Stands in for a shard's mmap: records madvise calls and forwards them."""

    def __init__(self, mapping: Any, calls: list[int]) -> None:
        self._mapping, self._calls = mapping, calls

    def madvise(self, option: int, start: int, length: int) -> None:
        self._calls.append(start)
        self._mapping.madvise(option, start, length)


@pytest.mark.skipif(not hasattr(__import__("mmap"), "MADV_WILLNEED"), reason="no madvise")
def test_a_cache_reader_advises_open_shards_only_when_their_pages_are_not_resident(
    server: CorpusHTTPServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mixle.corpus.format import documents as reader_module

    documents = open_corpus(server.url, cache_dir=tmp_path, **FAST)
    starts = shard_starts(documents)
    sampled: list[int] = []
    answer = [False]

    def residency(samples: list[tuple[int, int, int]]) -> bool:
        sampled.append(len(samples))
        return answer[0]

    monkeypatch.setattr(reader_module, "_all_resident", residency)
    documents.prefetch(np.arange(starts[2], starts[4]))  # nothing open: downloads only
    assert sampled == []
    documents.take(np.arange(starts[2], starts[4]))  # opens shards 2 and 3
    calls: list[int] = []
    for number in (2, 3):
        shard = documents._slots[number]  # type: ignore[attr-defined]
        shard.mapping = _RecordingMapping(shard.mapping, calls)
    hinted = np.arange(starts[2], starts[6])  # two open shards, two not
    documents.prefetch(hinted)  # sampled pages not resident: the open shards are advised
    assert sampled and calls
    calls.clear()
    answer[0] = True
    documents.prefetch(hinted)  # resident: no advice
    assert calls == []
    for got, want in zip(
        documents.take(hinted), open_corpus(server.state.root).take(hinted), strict=True
    ):
        np.testing.assert_array_equal(got, want)
    documents.close()
