"""ShardedDocuments: indexing, slicing views, batched reads, prefetch, LRU, capabilities."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mixle.corpus import CorpusWriter, DocumentsView, ShardedDocuments, convert_corpus, open_corpus
from mixle.corpus.format.spec import HEADER_SIZE
from mixle.data._documents import (
    DocumentSource,
    document_lengths,
    documents_fingerprint,
    prefetch_hint,
)
from mixle.errors import ArgumentError, ArgumentTypeError, CorpusFormatError, CorpusNotFoundError
from mixle.testing import assert_documents_contract
from tests.corpus.conftest import random_documents


@pytest.fixture
def corpus(make_corpus: Callable[..., Path]) -> tuple[ShardedDocuments, list[np.ndarray]]:
    expected = random_documents(7, 120)
    return open_corpus(make_corpus(expected, vocab_size=1000, shard_max_bytes=200)), expected


def test_negative_indices_and_out_of_range(
    corpus: tuple[ShardedDocuments, list[np.ndarray]],
) -> None:
    documents, expected = corpus
    np.testing.assert_array_equal(documents[-1], expected[-1])
    np.testing.assert_array_equal(documents[-120], expected[0])
    np.testing.assert_array_equal(documents[np.int64(5)], expected[5])
    for bad in (120, -121, 10**12):
        with pytest.raises(IndexError, match="out of range"):
            documents[bad]
    with pytest.raises(TypeError):
        documents[True]
    with pytest.raises(TypeError):
        documents[1.0]  # type: ignore[call-overload]


def test_documents_are_read_only_views(corpus: tuple[ShardedDocuments, list[np.ndarray]]) -> None:
    documents, _ = corpus
    doc = documents[3]
    assert not doc.flags.writeable
    assert not doc.flags.owndata
    with pytest.raises(ValueError):
        doc[...] = 0


def test_slices_are_lazy_views_with_sequence_semantics(
    corpus: tuple[ShardedDocuments, list[np.ndarray]],
) -> None:
    documents, expected = corpus
    for selection in (slice(10, 50), slice(None, None, -3), slice(5, 100, 7), slice(200, 300)):
        view = documents[selection]
        assert isinstance(view, DocumentsView)
        want = expected[selection]
        assert len(view) == len(want)
        for got, ref in zip(view, want, strict=True):
            np.testing.assert_array_equal(got, ref)
        np.testing.assert_array_equal(view.lengths, [len(doc) for doc in want])
        assert view.num_tokens == sum(len(doc) for doc in want)
    nested = documents[10:50][5:][::2]
    assert [d.tolist() for d in nested] == [d.tolist() for d in expected[10:50][5:][::2]]
    np.testing.assert_array_equal(nested[-1], expected[10:50][5:][::2][-1])
    with pytest.raises(IndexError):
        documents[10:20][10]
    assert documents[0:10].fingerprint != documents[0:11].fingerprint
    assert [d.tolist() for d in documents[10:20].take([-1, 0])] == [
        expected[19].tolist(),
        expected[10].tolist(),
    ]


def test_take_returns_documents_in_request_order(
    corpus: tuple[ShardedDocuments, list[np.ndarray]],
) -> None:
    documents, expected = corpus
    indices = [119, 0, 5, 5, -1, 60, 1]
    for got, index in zip(documents.take(indices), indices, strict=True):
        np.testing.assert_array_equal(got, expected[index])
    assert documents.take([]) == []
    with pytest.raises(IndexError, match=r"indices\[1\]"):
        documents.take([0, 120])
    with pytest.raises(ArgumentTypeError):
        documents.take([0.5])


def test_prefetch_is_a_harmless_hint(
    corpus: tuple[ShardedDocuments, list[np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    documents, expected = corpus
    assert documents._resident == []
    documents.prefetch([119, 0])  # small shards: their files advised, nothing mapped
    assert documents._resident == []
    monkeypatch.setattr("mixle.corpus.format.documents._HINT_FILE_BYTES", 0)
    documents.prefetch([119, 0])  # larger ones: mapped, to madvise their ranges
    assert set(documents._resident) == {0, documents.num_shards - 1}
    documents.prefetch(range(0, 120, 3))
    documents.prefetch([10**9, -(10**9)])  # ignored, never raises
    documents.prefetch([])
    prefetch_hint(documents, [1, 2, 3])
    np.testing.assert_array_equal(documents[1], expected[1])


def test_data_layer_capabilities(corpus: tuple[ShardedDocuments, list[np.ndarray]]) -> None:
    documents, expected = corpus
    assert isinstance(documents, DocumentSource)
    np.testing.assert_array_equal(document_lengths(documents), [len(d) for d in expected])
    assert documents_fingerprint(documents) == documents.fingerprint
    assert documents.lengths is documents.lengths  # cached
    assert not documents.lengths.flags.writeable


def test_open_maps_no_shard_and_lru_bounds_open_shards(
    make_corpus: Callable[..., Path],
) -> None:
    expected = random_documents(3, 300)
    path = make_corpus(expected, shard_max_bytes=64)
    documents = open_corpus(path, max_open_shards=3)
    assert documents.num_shards > 20
    assert len(documents._resident) == 0
    rng = np.random.default_rng(0)
    for index in rng.integers(0, 300, size=500).tolist():
        np.testing.assert_array_equal(documents[index], expected[index])
        assert len(documents._resident) <= 3
    _ = documents.lengths
    assert len(documents._resident) <= 3
    with pytest.raises(ArgumentError):
        open_corpus(path, max_open_shards=0)


def test_missing_corpus_is_both_corpus_error_and_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(CorpusNotFoundError) as info:
        open_corpus(tmp_path / "nope")
    assert isinstance(info.value, FileNotFoundError)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"manifest\.json is missing"):
        open_corpus(tmp_path / "empty")


def test_views_survive_eviction_of_their_shard(make_corpus: Callable[..., Path]) -> None:
    expected = random_documents(4, 100)
    documents = open_corpus(make_corpus(expected, shard_max_bytes=64), max_open_shards=1)
    first = documents[0]
    _ = [documents[i] for i in range(100)]
    np.testing.assert_array_equal(first, expected[0])


def test_open_len_lengths_and_fingerprint_map_no_token_file(
    make_corpus: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = random_documents(5, 50)
    path = make_corpus(expected, shard_max_bytes=64)

    def forbidden(path: str, size: int) -> None:
        raise AssertionError(f"mapped {path}")

    monkeypatch.setattr("mixle.corpus.format.shard_loader.map_file", forbidden)
    documents = open_corpus(path)
    assert len(documents) == 50
    np.testing.assert_array_equal(documents.lengths, [len(d) for d in expected])
    assert len(documents.fingerprint) == 64
    assert documents[10:20].num_tokens == sum(len(d) for d in expected[10:20])
    with pytest.raises(AssertionError, match="mapped"):
        documents[0]


def test_local_corpus_and_its_views_honour_the_documents_contract(
    corpus: tuple[ShardedDocuments, list[np.ndarray]],
) -> None:
    documents, expected = corpus
    assert_documents_contract(documents, expected)
    assert_documents_contract(documents[7:90:3], expected[7:90:3])


def _read_in_child(documents: ShardedDocuments, indices: list[int]) -> list[list[int]]:
    return [documents[i].tolist() for i in indices]


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_reader_works_in_fork_and_spawn_workers(
    corpus: tuple[ShardedDocuments, list[np.ndarray]], method: str
) -> None:
    documents, expected = corpus
    _ = documents[0]  # parent has shards mapped before the fork
    context = multiprocessing.get_context(method)
    with context.Pool(2) as pool:
        results = pool.starmap(_read_in_child, [(documents, [0, 5]), (documents[60:], [1, -1])])
    assert results[0] == [expected[0].tolist(), expected[5].tolist()]
    assert results[1] == [expected[61].tolist(), expected[-1].tolist()]


def test_read_tokens_matches_concatenated_documents_across_shards(
    make_corpus: Callable[..., Path],
) -> None:
    expected = random_documents(11, 90)
    expected[3] = np.empty(0, dtype=np.int64)  # empty documents take no positions
    documents = open_corpus(make_corpus(expected, vocab_size=1000, shard_max_bytes=150))
    assert documents.num_shards > 2
    flat = np.concatenate(expected)
    rng = np.random.default_rng(0)
    bounds = [(0, 0), (0, flat.size), (flat.size, flat.size)]
    bounds += [tuple(sorted(rng.integers(0, flat.size + 1, size=2).tolist())) for _ in range(200)]
    # Short ranges, mostly inside the shard of the previous read (the cached fast path),
    # sometimes at or across its edges.
    for start in rng.integers(0, flat.size + 1, size=300).tolist():
        bounds.append((start, min(start + int(rng.integers(0, 12)), flat.size)))
        bounds.append((max(start - 5, 0), start))
    for start, stop in bounds:
        got = documents.read_tokens(start, stop)
        assert got.dtype == documents.dtype
        np.testing.assert_array_equal(got, flat[start:stop])


def test_read_tokens_inside_one_shard_is_a_read_only_view(
    corpus: tuple[ShardedDocuments, list[np.ndarray]],
) -> None:
    documents, _ = corpus
    first = documents[0]
    got = documents.read_tokens(0, first.shape[0])
    assert not got.flags.writeable
    assert np.shares_memory(got, first)


@pytest.mark.parametrize("bounds", [(-1, 3), (5, 4), (0, 10**12)])
def test_read_tokens_out_of_range_raises_index_error(
    corpus: tuple[ShardedDocuments, list[np.ndarray]], bounds: tuple[int, int]
) -> None:
    documents, _ = corpus
    with pytest.raises(IndexError, match="token range"):
        documents.read_tokens(*bounds)
    with pytest.raises(ArgumentTypeError, match="`start`"):
        documents.read_tokens(1.0, 3)  # type: ignore[arg-type]


def test_prefetch_merges_ranges_like_a_naive_sweep() -> None:
    from mixle.corpus.format.documents import _PAGE, _merge

    rng = np.random.default_rng(1)
    for _ in range(200):
        begins = np.sort(rng.integers(0, 50 * _PAGE, size=int(rng.integers(0, 30))))
        ends = begins + rng.integers(0, 3 * _PAGE, size=begins.shape[0])
        naive: list[tuple[int, int]] = []
        for begin, end in zip(begins.tolist(), ends.tolist(), strict=True):
            if naive and begin <= naive[-1][1] + _PAGE:
                naive[-1] = (naive[-1][0], max(naive[-1][1], end))
            else:
                naive.append((begin, end))
        assert list(_merge(begins, ends)) == naive


class _RecordingMapping:
    """Stands in for a shard's mmap: records madvise calls and forwards them."""

    def __init__(self, mapping: object, calls: list[tuple[int, int]]) -> None:
        self._mapping = mapping
        self._calls = calls

    def madvise(self, option: int, start: int, length: int) -> None:
        self._calls.append((start, length))
        self._mapping.madvise(option, start, length)  # type: ignore[attr-defined]


def _record_madvise(documents: ShardedDocuments) -> list[tuple[int, int]]:
    calls: list[tuple[int, int]] = []
    for number in range(documents.num_shards):
        shard = documents._shard(number)
        if shard.mapping is not None:
            shard.mapping = _RecordingMapping(shard.mapping, calls)  # type: ignore[assignment]
    return calls


@pytest.mark.skipif(not hasattr(__import__("mmap"), "MADV_WILLNEED"), reason="no madvise")
def test_prefetch_skips_madvise_only_when_sampled_pages_are_resident(
    corpus: tuple[ShardedDocuments, list[np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mixle.corpus.format import documents as _reader

    documents, expected = corpus
    calls = _record_madvise(documents)
    seen: list[list[tuple[int, int, int]]] = []

    def cold(samples: list[tuple[int, int, int]]) -> bool:
        seen.append(samples)
        return False

    monkeypatch.setattr(_reader, "_all_resident", cold)
    documents.prefetch(range(0, 120, 2))
    assert calls and seen and 0 < len(seen[0]) <= _reader._RESIDENCY_SAMPLES
    assert all(begin % _reader._PAGE == 0 for _, begin, _ in seen[0])
    calls.clear()
    monkeypatch.setattr(_reader, "_all_resident", lambda samples: True)
    documents.prefetch(range(0, 120, 2))
    assert calls == []
    np.testing.assert_array_equal(documents[4], expected[4])


@pytest.mark.skipif(not hasattr(__import__("mmap"), "MADV_WILLNEED"), reason="no madvise")
def test_a_corpus_found_cached_in_a_row_is_sampled_once_per_hint_until_a_miss(
    corpus: tuple[ShardedDocuments, list[np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mixle.corpus.format import documents as _reader

    documents, _ = corpus
    calls = _record_madvise(documents)
    answers: list[bool] = []
    sampled: list[int] = []

    def residency(samples: list[tuple[int, int, int]]) -> bool:
        sampled.append(len(samples))
        return answers.pop(0)

    monkeypatch.setattr(_reader, "_all_resident", residency)
    streak, every = _reader._RESIDENT_STREAK, _reader._RESIDENT_RECHECK
    four = _reader._RESIDENCY_SAMPLES
    # 4 samples per call until `streak` calls in a row hit; then one sample on every
    # `every`-th call and none in between; a miss hints (madvise) and goes back to 4.
    answers[:] = [True] * streak + [True, True, False] + [True] * 2
    for _ in range(streak + 2 * every + 1 + 2):
        documents.prefetch(range(0, 120, 2))
    assert answers == []
    assert sampled == [four] * streak + [1, 1, 1] + [four] * 2
    assert calls  # the missed call advised the kernel


def test_residency_check_sees_evicted_and_cached_pages(tmp_path: Path) -> None:
    import os

    from mixle.corpus import CorpusWriter
    from mixle.corpus.format import documents as _reader

    if _reader._mincore() is None or not hasattr(os, "posix_fadvise"):
        pytest.skip("needs mincore and posix_fadvise")
    rng = np.random.default_rng(0)
    with CorpusWriter(tmp_path / "c", vocab_size=60_000) as writer:
        writer.add_many([rng.integers(0, 60_000, 3000, dtype=np.uint16) for _ in range(400)])
    for name in os.listdir(tmp_path / "c"):
        descriptor = os.open(tmp_path / "c" / name, os.O_RDONLY)
        os.fsync(descriptor)
        os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(descriptor)
    documents = open_corpus(tmp_path / "c")
    shard = documents._shard(0)
    address = shard.tokens.ctypes.data
    span = (0, 4 * _reader._PAGE)
    if _reader._all_resident([(address, *span)]):
        pytest.skip("this file system keeps the pages cached (e.g. tmpfs)")
    shard.tokens[: span[1] // 2].sum()  # fault the pages in
    assert _reader._all_resident([(address, *span)])


def test_take_short_lists_match_the_grouped_path(
    corpus: tuple[ShardedDocuments, list[np.ndarray]],
) -> None:
    documents, expected = corpus
    rng = np.random.default_rng(3)
    for size in (1, 2, 33, 256, 257):
        indices = rng.integers(-len(expected), len(expected), size=size)
        loop = documents.take(indices.tolist())  # Python ints: the per-index loop (<= 256)
        grouped = documents.take(indices)  # an array: the grouped numpy path
        assert len(loop) == len(grouped) == size
        for got, other, index in zip(loop, grouped, indices.tolist(), strict=True):
            np.testing.assert_array_equal(got, expected[index])
            np.testing.assert_array_equal(other, expected[index])
    with pytest.raises(IndexError, match=r"indices\[2\]"):
        documents.take([0, -1, -len(expected) - 1])
    with pytest.raises(ArgumentTypeError):
        documents.take([0, 0.5])


@pytest.mark.parametrize("layout", ["raw", "zarr"])
def test_every_opened_corpus_is_a_context_manager_that_closes_its_maps(
    make_corpus: Callable[..., Path], tmp_path: Path, layout: str
) -> None:
    """``with open_corpus(path) as docs:`` as docs/remote.md shows it (issue #32)."""
    expected = random_documents(5, 60)
    path = make_corpus(expected, shard_max_bytes=64)
    if layout == "zarr":
        convert_corpus(path, tmp_path / "c.zarr", layout="zarr")
        path = tmp_path / "c.zarr"
    options = {"cache_dir": str(tmp_path / "cache")} if layout == "zarr" else {}
    with open_corpus(path, **options) as documents:
        first = documents[0]
        np.testing.assert_array_equal(documents[59], expected[59])
        assert len(documents._resident) > 0
    assert len(documents._resident) == 0  # closed on leaving the block
    np.testing.assert_array_equal(first, expected[0])  # returned views stay valid
    np.testing.assert_array_equal(documents[1], expected[1])  # and the reader usable


def test_token_offsets_check_only_the_blocks_they_read(tmp_path: Path) -> None:
    """A large shard's offsets are read through its mapping, only the values asked for
    checked: a bad offset elsewhere in the file goes unnoticed until it is read itself
    (reading and checking the whole file, as before, is O(documents))."""
    count = 300_000  # above the size whose offsets are checked whole on open
    with CorpusWriter(tmp_path / "c", dtype="uint16") as writer:
        writer.add_flat(np.zeros(count, dtype=np.uint16), np.ones(count, dtype=np.int64))
    with open(tmp_path / "c" / "shard-00000.offsets", "r+b") as handle:
        handle.seek(HEADER_SIZE + 8 * 290_000)
        handle.write(np.int64(10**9).tobytes())
    documents = open_corpus(tmp_path / "c")
    assert documents.token_offsets([1000, 150_000, count]).tolist() == [1000, 150_000, count]
    with pytest.raises(CorpusFormatError, match=r"shard-00000\.offsets"):
        documents.token_offsets([289_999, 290_000])
    with pytest.raises(CorpusFormatError, match="offsets"):
        documents[290_001]  # its block holds the bad offset


# The corpus is only read: one for every example is safe.
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(runs=st.lists(st.tuples(st.integers(0, 120), st.integers(0, 40)), max_size=10))
def test_token_offset_runs_are_the_offsets_of_their_indices(
    corpus: tuple[ShardedDocuments, list[np.ndarray]], runs: list[tuple[int, int]]
) -> None:
    # Runs cross shard boundaries (shards of ~20 documents), start at a shard's first
    # document, end at the corpus's last offset (index 120) or are empty.
    documents, expected = corpus
    runs = [(start, min(size, 121 - start)) for start, size in runs]
    starts = np.array([start for start, _ in runs], dtype=np.int64)
    sizes = np.array([size for _, size in runs], dtype=np.int64)
    indices = np.array([start + j for start, size in runs for j in range(size)], dtype=np.int64)
    table = np.concatenate([[0], np.cumsum([len(d) for d in expected])])
    got = documents.token_offset_runs(starts, sizes)
    assert got.dtype == np.int64
    assert got.tolist() == table[indices].tolist() == documents.token_offsets(indices).tolist()


def test_token_offset_runs_refuse_runs_outside_the_corpus(
    corpus: tuple[ShardedDocuments, list[np.ndarray]],
) -> None:
    documents, _ = corpus
    with pytest.raises(IndexError, match=r"run 1: indices \[100, 122\) are outside \[0, 120\]"):
        documents.token_offset_runs([0, 100], [3, 22])
    with pytest.raises(IndexError, match=r"run 0: indices \[-1, 2\)"):
        documents.token_offset_runs([-1], [3])
    with pytest.raises(ArgumentTypeError, match=r"`counts` must be nonnegative.*-2 at run 0"):
        documents.token_offset_runs([4], [-2])
    with pytest.raises(ArgumentTypeError, match="`counts` must be a 1-D array of 1"):
        documents.token_offset_runs([4], [2, 3])
    assert documents.token_offset_runs([5, 200], [0, 0]).tolist() == []  # empty runs: nothing


def test_token_offset_runs_check_the_slices_they_read(tmp_path: Path) -> None:
    count = 300_000  # above the size whose offsets are checked whole on open
    with CorpusWriter(tmp_path / "c", dtype="uint16") as writer:
        writer.add_flat(np.zeros(count, dtype=np.uint16), np.ones(count, dtype=np.int64))
    with open(tmp_path / "c" / "shard-00000.offsets", "r+b") as handle:
        handle.seek(HEADER_SIZE + 8 * 290_000)
        handle.write(np.int64(10**9).tobytes())
    documents = open_corpus(tmp_path / "c")
    assert documents.token_offset_runs([1000, count - 5], [3, 6]).tolist() == [
        1000, 1001, 1002, *range(count - 5, count + 1)
    ]  # fmt: skip
    with pytest.raises(CorpusFormatError, match=r"shard-00000\.offsets"):
        documents.token_offset_runs([289_990], [20])


def test_token_offsets_over_many_large_shards_read_no_file_whole(tmp_path: Path) -> None:
    """Block boundaries over many large shards come from the mappings too: the bulk
    read meant for many small shards would read (and check) every file whole."""
    per_shard, shards = 270_000, 18  # above the size whose offsets are checked on open
    count = per_shard * shards
    with CorpusWriter(tmp_path / "c", dtype="uint16", shard_max_bytes=2 * per_shard) as writer:
        writer.add_flat(np.zeros(count, dtype=np.uint16), np.ones(count, dtype=np.int64))
    with open(tmp_path / "c" / "shard-00005.offsets", "r+b") as handle:
        handle.seek(HEADER_SIZE + 8 * 1_000)
        handle.write(np.int64(-5).tobytes())
    documents = open_corpus(tmp_path / "c")
    assert documents.num_shards == shards
    boundaries = np.arange(0, count, 4096)
    assert documents.token_offsets(boundaries).tolist() == boundaries.tolist()
