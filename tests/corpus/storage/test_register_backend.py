"""A storage backend outside fsspec is one module plus one ``register_backend`` call.

This module is that whole backend: a dict-backed :class:`MemoryStore` (its files are
bytes in a process-wide dict, like fsspec's ``memory://``) registered as
``memtest://``. It is opened by ``open_corpus``, written by ``publish_corpus`` and by
``ingest``, and passes :class:`mixle.testing.StoreContract`, as the local store and
the moto-S3 store do.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from mixle.corpus import (
    CorpusWriter,
    ShardArrays,
    ShardLoader,
    ShardStore,
    ingest,
    open_corpus,
    publish_corpus,
    register_backend,
)
from mixle.corpus.format.manifest import ShardEntry
from mixle.corpus.format.spec import HEADER_SIZE, MANIFEST_NAME
from mixle.corpus.storage.local import LocalStore
from mixle.corpus.storage.remote import RemoteStore
from mixle.errors import CorpusExistsError, CorpusFormatError, CorpusNotFoundError
from mixle.testing import StoreContract, assert_documents_contract
from tests.corpus._remote_fixtures import *  # noqa: F403

#: bucket -> {name: bytes}: the "server" every MemoryStore of a process talks to.
_BUCKETS: dict[str, dict[str, bytes]] = {}


class MemoryLoader(ShardLoader):
    """Shards as arrays over the stored bytes: nothing mapped, no descriptor."""

    descriptors_per_shard: ClassVar[int] = 0
    supports_hints: ClassVar[bool] = False

    def open(self, entry: ShardEntry, dtype: np.dtype[Any]) -> ShardArrays:
        offsets = self.read_offsets(entry)
        tokens = np.frombuffer(self.store.read_range(entry.tokens, 0, entry.tokens_bytes), dtype)
        return ShardArrays(tokens, offsets.offsets, None, offsets.where)

    def read_offsets(self, entry: ShardEntry) -> ShardArrays:
        data = self.store.read_range(entry.offsets, 0, entry.offsets_bytes)
        offsets = np.frombuffer(data, dtype="<i8", offset=HEADER_SIZE)
        return ShardArrays(None, offsets, None, f"{self.store.location}/{entry.offsets}")


class MemoryStore(ShardStore):
    """``memtest://bucket/prefix``: files in :data:`_BUCKETS`."""

    supports_ranges = True
    supports_writes = True
    supports_listing = True
    supports_server_side_copy = True

    def __init__(self, url: str, **options: Any) -> None:
        self.url = url.rstrip("/")
        bucket, _, prefix = self.url[len("memtest://") :].partition("/")
        self.files = _BUCKETS.setdefault(bucket, {})
        self.prefix = f"{prefix}/" if prefix else ""
        self._options = dict(options)

    @property
    def location(self) -> str:
        return self.url

    @property
    def options(self) -> Mapping[str, Any]:
        return self._options

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.url, self._options))

    def _get(self, name: str) -> bytes:
        try:
            return self.files[self.prefix + name]
        except KeyError:
            raise CorpusFormatError(f"{self.url}/{name}: file missing.") from None

    def read_manifest(self) -> bytes:
        try:
            return self.files[self.prefix + MANIFEST_NAME]
        except KeyError:
            raise CorpusNotFoundError(f"no corpus at {self.url}.") from None

    def read_prefix(self, name: str, size: int) -> bytes:
        return self._get(name)[:size]

    def file_size(self, name: str) -> int:
        return len(self._get(name))

    def local_path(self, name: str) -> str:
        raise CorpusFormatError(f"{self.url}/{name}: an in-memory file has no local path.")

    def shard_loader(self) -> ShardLoader:
        return MemoryLoader(self)

    def exists(self, name: str) -> bool:
        return self.prefix + name in self.files

    def read_range(self, name: str, start: int, end: int, *, exact: bool = True) -> bytes:
        data = self._get(name)[start:end] if end > start else b""
        if exact and len(data) != max(end - start, 0):
            raise CorpusFormatError(f"{self.url}/{name}: [{start}, {end}) is past the end.")
        return data

    def write_bytes(self, name: str, data: bytes) -> None:
        self.files[self.prefix + name] = bytes(data)  # one assignment: visible whole

    def remove(self, name: str) -> None:
        key = self.prefix + name
        for found in [k for k in self.files if k == key or k.startswith(key + "/")]:
            del self.files[found]

    def list_sizes(self, prefix: str = "") -> dict[str, int]:
        start = self.prefix + (prefix.rstrip("/") + "/" if prefix else "")
        return {k[len(start) :]: len(v) for k, v in self.files.items() if k.startswith(start)}

    def copy(self, source: str, target: str, *, origin: ShardStore | None = None) -> None:
        where = self if origin is None else origin
        assert isinstance(where, MemoryStore)
        self.files[self.prefix + target] = where._get(source)


def _rebuild(url: str, options: dict[str, Any]) -> MemoryStore:
    return MemoryStore(url, **options)


register_backend("memtest", MemoryStore)  # the one registration
_FRESH = itertools.count()


def _fresh_url() -> str:
    return f"memtest://bucket/corpus-{next(_FRESH)}"


def _documents() -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    return [rng.integers(0, 500, size=int(rng.integers(0, 40))) for _ in range(120)]


@pytest.fixture
def local_corpus(tmp_path: Path) -> Path:
    with CorpusWriter(tmp_path / "c", vocab_size=500, shard_max_bytes=512) as writer:
        writer.add_many(_documents())
    return tmp_path / "c"


def test_publish_then_open_a_registered_backend(local_corpus: Path) -> None:
    url = _fresh_url()
    manifest = publish_corpus(local_corpus, url)
    documents = open_corpus(url)
    assert isinstance(documents.store, MemoryStore)
    assert isinstance(documents.loader, MemoryLoader)
    assert documents.fingerprint == manifest["fingerprint"] == open_corpus(local_corpus).fingerprint
    assert_documents_contract(documents, _documents())
    with pytest.raises(CorpusExistsError, match="already holds a corpus"):
        publish_corpus(local_corpus, url)


def test_ingest_writes_to_a_registered_backend(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(f'{{"tokens": [{i}, {i + 1}, 7]}}\n' for i in range(50)))
    url = _fresh_url()
    ingest([str(source)], url, vocab_size=100)
    documents = open_corpus(url)
    assert len(documents) == 50
    np.testing.assert_array_equal(documents[3], [3, 4, 7])


def test_memory_store_passes_the_store_contract() -> None:
    StoreContract(lambda: MemoryStore(_fresh_url())).check_all()


def test_local_store_passes_the_store_contract(tmp_path: Path) -> None:
    directories: Iterator[int] = itertools.count()
    StoreContract(lambda: LocalStore(str(tmp_path / f"s{next(directories)}"))).check_all()


def test_s3_store_passes_the_store_contract(s3: dict[str, Any], tmp_path: Path) -> None:
    prefixes = itertools.count()
    StoreContract(
        lambda: RemoteStore(
            f"s3://corpora/contract-{next(prefixes)}",
            storage_options=s3,
            cache_dir=tmp_path / "cache",
            mode="range",  # read_prefix reads the object (the cache mode answers from the manifest)
            retries=2,
            backoff=0.01,
        )
    ).check_all()
