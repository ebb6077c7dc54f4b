"""Fixtures for the remote tests: one sample corpus, published to S3 (moto), HTTP, zarr.

Import the fixtures into a test module with
``from tests.corpus._remote_fixtures import *  # noqa: F403``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mixle.corpus import CorpusWriter, ShardedDocuments, open_corpus, publish_corpus
from tests.corpus._servers import CorpusHTTPServer, moto_s3

__all__ = [
    "Published",
    "http_corpus",
    "published",
    "s3",
    "sample_corpus",
    "sample_documents",
]

#: Fast retries for tests: faults are injected on purpose.
FAST = {"retries": 4, "backoff": 0.01}


def make_documents(seed: int = 7, count: int = 1200) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 60, size=count)
    lengths[[3, 500, 501]] = 0  # empty documents must round-trip too
    return [rng.integers(0, 50_000, size=int(n), dtype=np.int64) for n in lengths]


@pytest.fixture(scope="module")
def sample_documents() -> list[np.ndarray]:
    return make_documents()


@pytest.fixture(scope="module")
def sample_corpus(
    tmp_path_factory: pytest.TempPathFactory, sample_documents: list[np.ndarray]
) -> Path:
    """About 70 KB of uint16 tokens in ~9 shards."""
    path = tmp_path_factory.mktemp("sample") / "corpus"
    with CorpusWriter(path, vocab_size=50_000, shard_max_bytes=8_000) as writer:
        writer.add_many(sample_documents)
    return path


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, Any]]:
    """s3fs storage options for a fresh moto server with bucket ``corpora``."""
    with moto_s3() as options:
        import s3fs

        fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
        if not fs.exists("corpora"):  # moto's state is per interpreter, servers come and go
            fs.mkdir("corpora")
        yield options


@pytest.fixture(scope="module")
def http_corpus(sample_corpus: Path) -> Iterator[CorpusHTTPServer]:
    """A range-capable, fault-injecting HTTP server whose root is the sample corpus."""
    with CorpusHTTPServer(str(sample_corpus)) as server:
        yield server


@dataclass
class Published:
    """Where the sample corpus lives in each backend."""

    local: Path
    s3_raw: str
    s3_zarr: str
    zarr_local: Path
    storage_options: dict[str, Any]


@pytest.fixture(scope="module")
def published(
    sample_corpus: Path, s3: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Published:
    tag = uuid.uuid4().hex[:8]
    raw = f"s3://corpora/{tag}/raw"
    zarr_url = f"s3://corpora/{tag}/zarr"
    publish_corpus(sample_corpus, raw, storage_options=s3)
    publish_corpus(sample_corpus, zarr_url, layout="zarr", storage_options=s3)
    zarr_local = tmp_path_factory.mktemp("zarr") / "corpus.zarr"
    publish_corpus(sample_corpus, zarr_local, layout="zarr")
    return Published(sample_corpus, raw, zarr_url, zarr_local, s3)


#: backend name -> how to open the sample corpus there, given (published, http, cache_dir).
Opener = Callable[[Published, CorpusHTTPServer, Path], ShardedDocuments]

OPENERS: dict[str, Opener] = {
    "local": lambda p, h, c: open_corpus(p.local),
    "s3-cache": lambda p, h, c: open_corpus(
        p.s3_raw, storage_options=p.storage_options, cache_dir=c, **FAST
    ),
    "s3-range": lambda p, h, c: open_corpus(
        p.s3_raw, storage_options=p.storage_options, cache_dir=c, mode="range", **FAST
    ),
    "http-cache": lambda p, h, c: open_corpus(h.url, cache_dir=c, **FAST),
    "http-range": lambda p, h, c: open_corpus(h.url, cache_dir=c, mode="range", **FAST),
    "zarr-s3": lambda p, h, c: open_corpus(
        p.s3_zarr, storage_options=p.storage_options, cache_dir=c, **FAST
    ),
    "zarr-local": lambda p, h, c: open_corpus(p.zarr_local, cache_dir=c),
}
