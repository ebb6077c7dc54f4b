"""One contract, every backend: local mmap, cached S3, range S3, HTTP (cache and range),
zarr on S3 and zarr on disk. Same documents, same batched reads, same metadata, same
errors. S3 is moto's server and HTTP a range-capable ``http.server``, both on loopback.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from mixle.corpus import (
    RangeDocuments,
    ShardedDocuments,
    open_corpus,
    publish_corpus,
    verify_corpus,
)
from mixle.errors import ArgumentTypeError, CorpusFormatError, CorpusNotFoundError
from tests.corpus._remote_fixtures import *  # noqa: F403
from tests.corpus._remote_fixtures import FAST, OPENERS, Published
from tests.corpus._servers import CorpusHTTPServer

BACKENDS = sorted(OPENERS)


@pytest.fixture(params=BACKENDS)
def docs(
    request: pytest.FixtureRequest,
    published: Published,
    http_corpus: CorpusHTTPServer,
    tmp_path: Path,
) -> ShardedDocuments:
    return OPENERS[request.param](published, http_corpus, tmp_path / "cache")


@pytest.fixture(scope="module")
def reference(sample_corpus: Path) -> ShardedDocuments:
    return open_corpus(sample_corpus)


def _same(left: list[np.ndarray], right: list[np.ndarray]) -> None:
    assert len(left) == len(right)
    for position, (a, b) in enumerate(zip(left, right, strict=True)):
        assert a.dtype == b.dtype, position
        np.testing.assert_array_equal(a, b, err_msg=f"document {position}")


def test_every_document_matches_the_written_ones(
    docs: ShardedDocuments, sample_documents: list[np.ndarray]
) -> None:
    assert len(docs) == len(sample_documents)
    # Range mode makes one request per indexed document: sample it (take covers all).
    step = 13 if isinstance(docs, RangeDocuments) else 1
    for index in range(0, len(docs), step):
        np.testing.assert_array_equal(docs[index], sample_documents[index])
    assert docs[-1].tolist() == sample_documents[-1].tolist()
    assert docs[3].shape == (0,)


def test_iteration_matches_indexing(docs: ShardedDocuments, reference: ShardedDocuments) -> None:
    _same(list(docs), list(reference))


def test_take_matches_local_in_any_order(
    docs: ShardedDocuments, reference: ShardedDocuments
) -> None:
    rng = np.random.default_rng(3)
    for size in (1, 17, 400):
        indices = rng.integers(-len(reference), len(reference), size=size)
        _same(docs.take(indices), reference.take(indices))
    _same(docs.take(np.arange(len(reference))), list(reference))
    assert docs.take([]) == []


def test_returned_documents_are_read_only(docs: ShardedDocuments) -> None:
    document = docs[10]
    assert document.size
    with pytest.raises(ValueError, match="read-only"):
        document[0] = 1


def test_metadata_matches_local(docs: ShardedDocuments, reference: ShardedDocuments) -> None:
    assert docs.fingerprint == reference.fingerprint
    assert docs.num_tokens == reference.num_tokens
    assert docs.dtype == reference.dtype
    assert docs.vocab_size == reference.vocab_size
    assert docs.num_shards == reference.num_shards
    np.testing.assert_array_equal(docs.lengths, reference.lengths)
    _same(list(docs[100:140:3]), list(reference[100:140:3]))


def test_pickled_reader_reads_the_same(docs: ShardedDocuments, reference: ShardedDocuments) -> None:
    clone = pickle.loads(pickle.dumps(docs))
    assert type(clone) is type(docs)
    _same(
        clone.take(np.arange(0, len(reference), 7)), reference.take(np.arange(0, len(reference), 7))
    )


def test_prefetch_never_fails_and_keeps_results(
    docs: ShardedDocuments, reference: ShardedDocuments
) -> None:
    docs.prefetch(np.arange(len(reference))[::-1])
    docs.prefetch([10**9, -(10**9)])  # invalid hints are ignored
    docs.prefetch(np.array([[1, 2]]))
    _same(docs.take(np.arange(len(reference))), list(reference))


def test_index_errors_are_the_same(docs: ShardedDocuments) -> None:
    count = len(docs)
    with pytest.raises(IndexError, match="out of range"):
        docs[count]
    with pytest.raises(IndexError, match="out of range"):
        docs[-count - 1]
    with pytest.raises(IndexError, match=r"indices\[1\]"):
        docs.take([0, count])
    with pytest.raises(TypeError):
        docs[1.0]  # type: ignore[call-overload]
    with pytest.raises(ArgumentTypeError):
        docs.take(np.array([0.5]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_missing_corpus_raises_corpus_not_found(
    backend: str, published: Published, http_corpus: CorpusHTTPServer, tmp_path: Path
) -> None:
    missing = Published(
        local=tmp_path / "nothing",
        s3_raw=published.s3_raw + "-missing",
        s3_zarr=published.s3_zarr + "-missing",
        zarr_local=tmp_path / "nothing.zarr",
        storage_options=published.storage_options,
    )
    if backend.startswith("http"):
        url = http_corpus.url + "/no/such/corpus"
        with pytest.raises(CorpusNotFoundError, match="no corpus"):
            open_corpus(url, cache_dir=tmp_path, mode=backend.split("-")[1], **FAST)
        return
    with pytest.raises(CorpusNotFoundError, match="no corpus"):
        OPENERS[backend](missing, http_corpus, tmp_path)


@pytest.mark.parametrize("backend", ["local", "s3-cache", "s3-range", "zarr-s3"])
def test_truncated_shard_raises_corpus_format_error(
    backend: str, sample_corpus: Path, published: Published, tmp_path: Path
) -> None:
    """A shard file shorter than its manifest entry: CorpusFormatError (open or first read)."""
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(sample_corpus, broken)
    victim = broken / "shard-00001.tokens"
    victim.write_bytes(victim.read_bytes()[:-4])
    s3_options = published.storage_options
    if backend == "local":
        with pytest.raises(CorpusFormatError, match=r"shard-00001\.tokens"):
            open_corpus(broken)
        return
    url = f"{published.s3_raw}-broken-{backend}"
    publish_corpus(
        sample_corpus,
        url,
        storage_options=s3_options,
        layout="zarr" if "zarr" in backend else "raw",
    )
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3_options)
    if "zarr" in backend:
        key = f"{url}/shard-00001.tokens/c/0"
        fs.pipe_file(key, fs.cat_file(key)[:-4])
    else:
        fs.pipe_file(f"{url}/shard-00001.tokens", victim.read_bytes())
    mode = "range" if backend.endswith("range") else "cache"
    with pytest.raises(CorpusFormatError, match=r"shard-00001\.tokens"):
        documents = open_corpus(
            url, storage_options=s3_options, cache_dir=tmp_path / "c", mode=mode, **FAST
        )
        documents.take(np.arange(len(documents)))


@pytest.mark.parametrize("backend", ["s3-cache", "http-cache", "zarr-s3", "zarr-local"])
def test_verify_corpus_passes_on_remote_backends(
    backend: str, published: Published, http_corpus: CorpusHTTPServer, tmp_path: Path
) -> None:
    documents = OPENERS[backend](published, http_corpus, tmp_path)
    report = verify_corpus(documents.location, **dict(documents.store.options))
    assert report.ok and report.fingerprint == documents.fingerprint


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "s3-range"])
def test_documents_contract_holds(
    backend: str,
    published: Published,
    http_corpus: CorpusHTTPServer,
    sample_documents: list[np.ndarray],
    tmp_path: Path,
) -> None:
    """The format's shared DocumentsContract, on every backend (s3-range is covered by
    http-range: the contract reads each document singly, ~20 ms per request on moto)."""
    from mixle.testing import assert_documents_contract

    documents = OPENERS[backend](published, http_corpus, tmp_path / "cache")
    assert_documents_contract(documents, sample_documents)
