"""A version-2 (shard table) corpus read over HTTP, cached and by ranges, and published."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mixle.corpus import CorpusWriter, open_corpus, publish_corpus, verify_corpus
from mixle.corpus.format.shard_table import SHARD_TABLE_NAME
from mixle.errors import CorpusError
from tests.corpus._servers import CorpusHTTPServer

FAST = {"retries": 2, "backoff": 0.01}


@pytest.fixture(scope="module")
def tabled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tabled") / "corpus"
    lengths = np.tile(np.array([3, 0, 5], dtype=np.int64), 20)
    tokens = (np.arange(int(lengths.sum())) % 50_000).astype(np.uint16)
    with CorpusWriter(path, vocab_size=50_000, shard_max_bytes=16, shard_table=True) as writer:
        writer.add_flat(tokens, lengths)
    return path


@pytest.mark.parametrize("mode", ["cache", "range"])
def test_a_table_corpus_reads_the_same_over_http(tabled: Path, tmp_path: Path, mode: str) -> None:
    local = open_corpus(tabled)
    with CorpusHTTPServer(str(tabled)) as server:
        remote = open_corpus(server.url, cache_dir=tmp_path / "cache", mode=mode, **FAST)
        assert remote.fingerprint == local.fingerprint and remote.num_shards == local.num_shards
        for index in (len(local) - 1, 0, 31, 7):
            np.testing.assert_array_equal(remote[index], local[index])
        np.testing.assert_array_equal(remote.lengths, local.lengths)


def test_a_table_corpus_with_a_corrupt_table_is_refused_over_http(
    tabled: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "copy"
    publish_corpus(tabled, copy)
    table = copy / SHARD_TABLE_NAME
    data = bytearray(table.read_bytes())
    data[-1] ^= 1
    table.write_bytes(bytes(data))
    with CorpusHTTPServer(str(copy)) as server, pytest.raises(CorpusError, match=r"shards\.table"):
        open_corpus(server.url, cache_dir=tmp_path / "cache", **FAST)


def test_publishing_a_table_corpus_copies_its_table(tabled: Path, tmp_path: Path) -> None:
    publish_corpus(tabled, tmp_path / "out")
    assert (tmp_path / "out" / SHARD_TABLE_NAME).read_bytes() == (
        tabled / SHARD_TABLE_NAME
    ).read_bytes()
    assert verify_corpus(tmp_path / "out").ok


def test_a_table_corpus_published_as_zarr_keeps_its_fingerprint(
    tabled: Path, tmp_path: Path
) -> None:
    pytest.importorskip("zarr")
    publish_corpus(tabled, tmp_path / "out.zarr", layout="zarr")
    zarr_docs = open_corpus(tmp_path / "out.zarr", cache_dir=tmp_path / "cache")
    local = open_corpus(tabled)
    assert zarr_docs.fingerprint == local.fingerprint
    assert zarr_docs.manifest["format_version"] == 1  # the group attributes list the shards
    np.testing.assert_array_equal(zarr_docs[len(local) - 1], local[len(local) - 1])
