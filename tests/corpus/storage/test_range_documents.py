"""Range mode: coalescing of byte ranges (property) and request counts on loopback HTTP."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mixle.corpus import open_corpus
from mixle.corpus.storage.range_documents import coalesce
from mixle.testing import shard_starts
from tests.corpus._remote_fixtures import *  # noqa: F403
from tests.corpus._remote_fixtures import FAST
from tests.corpus._servers import CorpusHTTPServer


@given(
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 500)), max_size=60),
    st.integers(0, 300),
    st.integers(1, 2_000),
)
def test_coalesced_requests_cover_every_range_in_order(
    pairs: list[tuple[int, int]], gap: int, limit: int
) -> None:
    begins = np.array(sorted(b for b, _ in pairs), dtype=np.int64)
    ends = begins + np.array([n for _, n in pairs], dtype=np.int64)
    ranges = list(zip(begins.tolist(), ends.tolist(), strict=True))
    merged = coalesce(begins, ends, gap=gap, limit=limit)
    assert len(merged) <= len(ranges)
    assert all(a[0] <= b[0] for a, b in itertools.pairwise(merged))
    for begin, end in ranges:  # every requested byte is fetched
        assert any(low <= begin and end <= high for low, high in merged)
    for low, high in merged:  # a request exceeds the limit only for one oversized range
        assert high - low <= limit or (low, high) in ranges
    for (low, high), (next_low, next_high) in itertools.pairwise(merged):
        # neighbours stay apart only if farther than `gap` or merging breaks the limit
        assert next_low > high + gap or max(high, next_high) - low > limit


@pytest.fixture
def server(sample_corpus: Path) -> Iterator[CorpusHTTPServer]:
    with CorpusHTTPServer(str(sample_corpus)) as httpd:
        yield httpd


def test_take_coalesces_neighbouring_documents_into_few_requests(
    server: CorpusHTTPServer, tmp_path: Path
) -> None:
    documents = open_corpus(server.url, cache_dir=tmp_path, mode="range", **FAST)
    first_shard = np.arange(shard_starts(documents)[0], shard_starts(documents)[1])
    documents.take(first_shard[:1])  # fetch the offsets first
    before = sum(count for name, count in server.state.gets.items() if name.endswith(".tokens"))
    got = documents.take(first_shard[::-1])  # every document of shard 0, reversed
    after = sum(count for name, count in server.state.gets.items() if name.endswith(".tokens"))
    assert after - before == 1  # one coalesced range for the whole shard
    reference = open_corpus(server.state.root)
    for document, index in zip(got, first_shard[::-1].tolist(), strict=True):
        np.testing.assert_array_equal(document, reference[index])


def test_iteration_reads_blocks_not_documents(server: CorpusHTTPServer, tmp_path: Path) -> None:
    documents = open_corpus(server.url, cache_dir=tmp_path, mode="range", **FAST)
    assert sum(1 for _ in documents) == len(documents)
    token_gets = sum(count for name, count in server.state.gets.items() if name.endswith(".tokens"))
    assert token_gets <= documents.num_shards  # one block per (small) shard
