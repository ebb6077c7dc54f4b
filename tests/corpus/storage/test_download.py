"""Downloads that hash each body as it arrives, and the early publish of a prefetch batch.

A file is verified from the chunks it arrived in (no second pass), is visible in the
cache only once its size and SHA-256 match the manifest, and becomes readable while the
rest of its batch is still downloading. Real servers on loopback (HTTP with fault
injection, moto's S3), real files, a real process killed mid-download.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mixle.corpus.storage.download as download_module
from mixle.corpus import ShardedDocuments, open_corpus
from mixle.corpus.storage.download import (
    Landed,
    download_file,
    download_files,
    verified_download_options,
)
from mixle.corpus.storage.fs import filesystem
from mixle.corpus.storage.remote import RemoteStore
from mixle.errors import ChecksumError, CorpusFormatError, RemoteError
from mixle.testing import shard_starts
from tests.corpus._remote_fixtures import *  # noqa: F403
from tests.corpus._remote_fixtures import FAST, Published
from tests.corpus._servers import CorpusHTTPServer


@pytest.fixture
def server(sample_corpus: Path) -> Iterator[CorpusHTTPServer]:
    with CorpusHTTPServer(str(sample_corpus)) as httpd:
        yield httpd


def _files(corpus: Path) -> list[tuple[str, int, str]]:
    """``(name, size, sha256)`` of every shard file, from the manifest."""
    reference = open_corpus(corpus)
    return [
        (entry[kind], entry[f"{kind}_bytes"], entry[f"{kind}_sha256"])
        for entry in reference.manifest["shards"]
        for kind in ("offsets", "tokens")
    ]


def _download_all(
    fs: Any, base: str, files: list[tuple[str, int, str]], target: Path, **kwargs: Any
) -> list[tuple[int, Landed | BaseException]]:
    outcomes: list[tuple[int, Landed | BaseException]] = []
    download_files(
        fs,
        [f"{base}/{name}" for name, _, _ in files],
        [str(target / name) for name, _, _ in files],
        [size for _, size, _ in files],
        lambda index, outcome: outcomes.append((index, outcome)),
        **kwargs,
    )
    return outcomes


# -- download_files ----------------------------------------------------------------------
@pytest.mark.parametrize("batch", [None, 1000])
def test_http_bodies_are_hashed_in_flight_and_land_in_order(
    server: CorpusHTTPServer,
    sample_corpus: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    batch: int | None,
) -> None:
    if batch is not None:  # many small batches through the hashing thread, in order
        monkeypatch.setattr(download_module, "HASH_BATCH", batch)
    files = _files(sample_corpus)
    outcomes = _download_all(
        filesystem("http"), server.url, files, tmp_path, concurrency=1, chunk=300
    )
    assert [index for index, _ in outcomes] == list(range(len(files)))  # one at a time, in order
    for (_, outcome), (name, size, digest) in zip(outcomes, files, strict=True):
        assert outcome == Landed(size, digest), name
        assert (tmp_path / name).read_bytes() == (sample_corpus / name).read_bytes()
    # The manifest gave each size: no HEAD before a GET.
    assert sum(server.state.heads.values()) == 0


def test_s3_bodies_are_hashed_in_flight_without_botocore_crc(
    published: Published, sample_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(download_module, "HASH_BATCH", 2048)
    options = verified_download_options("s3", published.storage_options)
    assert options is not None
    files = _files(sample_corpus)
    outcomes = _download_all(filesystem("s3", options), published.s3_raw, files, tmp_path)
    assert sorted(index for index, _ in outcomes) == list(range(len(files)))
    for index, outcome in outcomes:
        name, size, digest = files[index]
        assert outcome == Landed(size, digest)
        assert hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() == digest


def test_a_corrupted_chunk_changes_the_digest_and_the_body_is_refused(
    server: CorpusHTTPServer, sample_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(download_module, "HASH_BATCH", 1000)
    name, size, digest = _files(sample_corpus)[3]
    server.fail("corrupt", 1, match=name)
    landed = download_file(filesystem("http"), f"{server.url}/{name}", str(tmp_path / "x"), size)
    assert landed.size == size and landed.sha256 != digest
    assert landed.sha256 == hashlib.sha256((tmp_path / "x").read_bytes()).hexdigest()
    bad = RemoteStore._bad_body(landed, size, digest)
    assert bad is not None and bad.error is ChecksumError and "corrupted" in bad.reason


def test_a_larger_object_is_cut_one_byte_past_the_expected_size(
    server: CorpusHTTPServer, sample_corpus: Path, tmp_path: Path
) -> None:
    name, size, digest = _files(sample_corpus)[1]
    landed = download_file(filesystem("http"), f"{server.url}/{name}", str(tmp_path / "x"), 10)
    assert landed.size == 11 and os.path.getsize(tmp_path / "x") == 11
    bad = RemoteStore._bad_body(landed, 10, digest)
    assert bad is not None and bad.error is CorpusFormatError
    assert "longer than the manifest's 10 bytes" in bad.reason
    short = RemoteStore._bad_body(Landed(5, digest), size, digest)
    assert short is not None and "(truncated)" in short.reason


def test_a_truncated_body_and_a_missing_file_raise(
    server: CorpusHTTPServer, sample_corpus: Path, tmp_path: Path
) -> None:
    name, size, _ = _files(sample_corpus)[5]
    server.fail("truncate", 1, match=name)
    fs = filesystem("http")
    with pytest.raises(Exception) as info:  # aiohttp's payload error: retried by the store
        download_file(fs, f"{server.url}/{name}", str(tmp_path / "x"), size)
    assert not isinstance(info.value, ChecksumError)
    with pytest.raises(FileNotFoundError):
        download_file(fs, f"{server.url}/no-such-file", str(tmp_path / "y"), 10)


def test_an_error_in_the_landed_callback_is_raised_after_every_download(
    server: CorpusHTTPServer, sample_corpus: Path, tmp_path: Path
) -> None:
    files = _files(sample_corpus)[:4]
    seen: list[int] = []

    def landed(index: int, outcome: Landed | BaseException) -> None:
        seen.append(index)
        if index == 0:
            raise OSError("rename failed")

    with pytest.raises(OSError, match="rename failed"):
        download_files(
            filesystem("http"),
            [f"{server.url}/{name}" for name, _, _ in files],
            [str(tmp_path / name) for name, _, _ in files],
            [size for _, size, _ in files],
            landed,
        )
    assert sorted(seen) == [0, 1, 2, 3]


def test_verified_download_options_turn_off_only_the_redundant_crc() -> None:
    options = {"client_kwargs": {"endpoint_url": "http://x"}, "config_kwargs": {"retries": {}}}
    changed = verified_download_options("s3", options)
    assert changed == {
        "client_kwargs": {"endpoint_url": "http://x"},
        "config_kwargs": {"retries": {}, "response_checksum_validation": "when_required"},
    }
    assert options["config_kwargs"] == {"retries": {}}  # the caller's dict is not changed
    chosen = {"config_kwargs": {"response_checksum_validation": "when_supported"}}
    assert verified_download_options("s3", chosen) is None  # an explicit choice stands
    assert verified_download_options("gs", {}) is None
    assert verified_download_options("http", {}) is None


# -- through the store: early publish, interruptions ----------------------------------------
def _reference(sample_corpus: Path) -> ShardedDocuments:
    return open_corpus(sample_corpus)


def test_a_batch_file_is_readable_while_later_files_still_download(
    server: CorpusHTTPServer, sample_corpus: Path, tmp_path: Path
) -> None:
    documents = open_corpus(server.url, cache_dir=tmp_path, **FAST)
    starts = shard_starts(documents)
    server.state.hold_match = "shard-00005"
    server.state.hold = threading.Event()  # shard 5's downloads wait
    try:
        documents.prefetch(np.arange(starts[2], starts[6]))  # one batch: shards 2..5
        first = np.arange(starts[2], starts[3])
        got: list[list[np.ndarray]] = []
        reader = threading.Thread(target=lambda: got.append(documents.take(first)))
        reader.start()
        reader.join(timeout=60)
        assert not reader.is_alive(), "shard 2 waited for the end of its batch"
        for view, want in zip(got[0], _reference(sample_corpus).take(first), strict=True):
            np.testing.assert_array_equal(view, want)
        held = documents.manifest["shards"][5]["tokens_sha256"]
        assert held not in os.listdir(tmp_path / "objects")  # still downloading
    finally:
        server.state.hold.set()
    last = np.arange(starts[5], starts[6])
    for view, want in zip(documents.take(last), _reference(sample_corpus).take(last), strict=True):
        np.testing.assert_array_equal(view, want)
    documents.close()


def test_an_interrupted_batch_download_is_never_visible_and_is_refetched(
    server: CorpusHTTPServer, sample_corpus: Path, tmp_path: Path
) -> None:
    documents = open_corpus(server.url, cache_dir=tmp_path, **FAST)
    starts = shard_starts(documents)
    server.fail("truncate", 1, match="shard-00003.tokens")  # half a body, then a reset
    hinted = np.arange(starts[2], starts[5])
    documents.prefetch(hinted)
    for view, want in zip(
        documents.take(hinted), _reference(sample_corpus).take(hinted), strict=True
    ):
        np.testing.assert_array_equal(view, want)
    assert server.state.injected["truncate"] == 1
    assert server.state.full_gets["shard-00003.tokens"] == 2
    assert os.listdir(tmp_path / "tmp") == []
    documents.close()


def test_persistent_truncation_names_the_shard_and_caches_nothing(
    server: CorpusHTTPServer, tmp_path: Path
) -> None:
    documents = open_corpus(server.url, cache_dir=tmp_path, **FAST)
    starts = shard_starts(documents)
    server.fail("truncate", 100, match="shard-00004.tokens")
    documents.prefetch(np.arange(starts[3], starts[5]))
    with pytest.raises(RemoteError, match=r"shard 4 \(shard-00004\.tokens\).*4 attempts"):
        documents[int(starts[4])]
    assert documents.manifest["shards"][4]["tokens_sha256"] not in os.listdir(tmp_path / "objects")
    assert os.listdir(tmp_path / "tmp") == []
    documents.close()


_READER = """
import sys
import numpy as np
from mixle.corpus import open_corpus
from mixle.testing import shard_starts
documents = open_corpus(sys.argv[1], cache_dir=sys.argv[2], retries=1)
starts = shard_starts(documents)
documents.prefetch(np.arange(starts[4], starts[7]))
print("hinted", flush=True)
documents.take(np.arange(starts[4], starts[7]))
"""


def test_a_reader_killed_mid_download_leaves_nothing_visible(
    server: CorpusHTTPServer, sample_corpus: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    server.state.hold_match = "shard-00006"
    server.state.hold = threading.Event()  # the reader is killed while shard 6 downloads
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, "-c", _READER, server.url, str(cache)],
        stdout=subprocess.PIPE,
        env=environment,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"hinted"
        deadline = time.monotonic() + 60
        while server.state.full_gets["shard-00006.tokens"] == 0:
            assert time.monotonic() < deadline, "the reader never asked for shard 6"
            time.sleep(0.01)
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    finally:
        server.state.hold.set()
        if child.poll() is None:
            child.kill()
            child.wait(30)
        if child.stdout is not None:
            child.stdout.close()
    entries = _reference(sample_corpus).manifest["shards"]
    cached = set(os.listdir(cache / "objects"))
    assert entries[6]["tokens_sha256"] not in cached  # never a half-written file
    for digest in cached:  # whatever landed is whole and verified
        assert hashlib.sha256((cache / "objects" / digest).read_bytes()).hexdigest() == digest
    documents = open_corpus(server.url, cache_dir=cache, **FAST)
    indices = np.arange(len(documents))
    for view, want in zip(
        documents.take(indices), _reference(sample_corpus).take(indices), strict=True
    ):
        np.testing.assert_array_equal(view, want)
    documents.close()
