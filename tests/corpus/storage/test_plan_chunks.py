"""Plan files of version 3: a restart checks the chunk table, not the whole plan.

A chunk's CRC-32 is verified the first time a read touches it: a changed byte in a
chunk the first batch does not read costs nothing at restart and, when a read reaches
it, makes the plan rebuilt (a warning names the file and chunk; the batches are the
intact plan's); a changed chunk table makes the file absent on open (rebuilt); version
2 files (one CRC-32 per array) still load.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.corpus import open_corpus
from mixle.corpus.storage.plan_cache import PlanFiles
from mixle.corpus.storage.plan_chunks import StoredPlan
from mixle.data._packing import StreamLayout
from mixle.data._packing_options import PackingOptions
from mixle.data._plan_store import plan_from_arrays
from mixle.data.streaming_corpus import StreamingCorpus
from mixle.errors import CorpusFormatError
from tests.corpus.storage.test_plan_file_integrity import _edit_element, _header

FIXTURES = Path(__file__).parent / "fixtures"
PER_CHUNK = (1 << 16) // 8  # int64 elements per 64 KiB chunk
DOCUMENTS = 3 * PER_CHUNK - 100  # indices in 3 chunks, starts in 3


@pytest.fixture
def corpus_path(make_corpus: Callable[..., Path]) -> Path:
    # Equal lengths: the sampled length check of a loaded plan cannot see a changed index.
    return make_corpus([np.array([i % 97, 5]) for i in range(DOCUMENTS)], vocab_size=100)


def _stream(path: Path, store: PlanFiles, packing: str = "concatenate") -> StreamingCorpus:
    # Best-fit windows of 1,024 documents: the first batch reads the first window only.
    return StreamingCorpus(
        open_corpus(path),
        packing=PackingOptions(packing, window_documents=1024),
        rank=0,
        world_size=1,
        block=8,
        batch_size=2,
        layout="global",
        plan_store=store,
        order="permutation",  # the order whose plans a store keeps
    )


def _plan_file(store: PlanFiles) -> Path:
    (path,) = Path(store.directory).iterdir()
    return path


@pytest.mark.parametrize("packing", ["concatenate", "best_fit"])
def test_a_changed_chunk_the_first_batch_does_not_read_is_rebuilt_when_read(
    corpus_path: Path, tmp_path: Path, packing: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = PlanFiles(tmp_path / "plans")
    expected = [np.array(b[0]) for b in _stream(corpus_path, store, packing).epoch_batches(0)]
    plan = _plan_file(store)
    original = plan.read_bytes()
    # Element 2 * PER_CHUNK + 50 of `indices`: chunk 2, which the first batch never reads.
    damaged = _edit_element(original, "indices", 2 * PER_CHUNK + 50, lambda v: v ^ 1)
    plan.write_bytes(damaged)
    resumed = _stream(corpus_path, store, packing)
    with caplog.at_level(logging.WARNING, "mixle.plans"):
        np.testing.assert_array_equal(next(iter(resumed))[0], expected[0])
        assert not caplog.records and plan.read_bytes() == damaged  # not read yet
        batches = [np.array(b[0]) for b in resumed.epoch_batches(0)]
    assert len(batches) == len(expected)
    for got, want in zip(batches, expected, strict=True):
        np.testing.assert_array_equal(got, want)
    (record,) = caplog.records
    assert f"{plan}: chunk 2 of array `indices`" in record.getMessage()
    assert "rebuilt" in record.getMessage()
    assert plan.read_bytes() == original  # rewritten (atomically) with the intact plan


def test_a_restart_verifies_only_the_chunks_it_reads(corpus_path: Path, tmp_path: Path) -> None:
    store = PlanFiles(tmp_path / "plans")
    corpus = _stream(corpus_path, store)
    corpus.num_batches(0)
    arrays = store.load({**corpus.stream_identity(), "epoch": 0, "plan_format": 1})
    assert isinstance(arrays, StoredPlan)
    total = len(arrays._crcs)
    loaded = plan_from_arrays(arrays, DOCUMENTS, lambda i: np.full(len(i), 2), False)
    assert loaded is not None
    opened = arrays.verified_chunks  # counts, the first and the last start
    assert opened <= 3
    layout = loaded[0]
    segment = layout.segment(10, 40)
    assert segment.reader is None and segment.first == 5  # 2 tokens a document
    np.testing.assert_array_equal(segment.indices, arrays["indices"][5:20])
    np.testing.assert_array_equal(segment.starts, np.arange(10, 42, 2))
    # indices, lengths, starts: chunk 0 each; the bisection probes a start in chunk 1.
    assert opened < arrays.verified_chunks <= opened + 4 < total
    arrays.check_all()
    assert arrays.verified_chunks == total


def test_a_changed_chunk_table_makes_the_file_absent_on_open(
    corpus_path: Path, tmp_path: Path
) -> None:
    store = PlanFiles(tmp_path / "plans")
    corpus = _stream(corpus_path, store)
    corpus.num_batches(0)
    plan = _plan_file(store)
    data = bytearray(plan.read_bytes())
    fields, body = _header(bytes(data))
    data[body + fields["table"]["offset"] + 5] ^= 0x10  # one chunk's CRC-32
    plan.write_bytes(bytes(data))
    assert store.load({**corpus.stream_identity(), "epoch": 0, "plan_format": 1}) is None
    next(iter(_stream(corpus_path, store)))  # rebuilt and saved again
    assert plan.read_bytes() != bytes(data)


def test_a_full_check_finds_a_change_anywhere(tmp_path: Path) -> None:
    store = PlanFiles(tmp_path)
    identity = {"test": "full check"}
    store.save(identity, {"indices": np.arange(3 * PER_CHUNK), "counts": np.arange(3)})
    (plan,) = tmp_path.iterdir()
    plan.write_bytes(_edit_element(plan.read_bytes(), "indices", PER_CHUNK + 1, lambda v: ~v))
    arrays = store.load(identity)
    assert isinstance(arrays, StoredPlan)
    arrays.check("indices", 0, PER_CHUNK)  # chunk 0 is intact
    with pytest.raises(CorpusFormatError, match="chunk 1 of array `indices`"):
        arrays.check_all()


def test_a_version_2_file_still_loads_whole_checked(tmp_path: Path) -> None:
    """``fixtures/plan-4236….bin`` was written by the version 2 writer (2026-12-02)."""
    (fixture,) = FIXTURES.glob("plan-*.bin")
    store = PlanFiles(tmp_path)
    identity = {"test": "version-2 fixture", "epoch": 0}
    assert Path(store.path_for(identity)).name == fixture.name
    shutil.copy(fixture, tmp_path / fixture.name)
    arrays = store.load(identity)
    assert arrays is not None and not isinstance(arrays, StoredPlan)
    np.testing.assert_array_equal(arrays["indices"], np.arange(10)[::-1])
    np.testing.assert_array_equal(arrays["starts"], [*range(0, 40, 4), 39])
    np.testing.assert_array_equal(arrays["counts"], [5, 2, 1])
    loaded = plan_from_arrays(arrays, 10, lambda i: np.full(len(i), 3), True)
    assert loaded is not None and loaded[0].reader is None
    damaged = _edit_element(fixture.read_bytes(), "lengths", 4, lambda v: v + 1)
    (tmp_path / fixture.name).write_bytes(damaged)
    assert store.load(identity) is None  # its whole-array CRC-32 still guards it


@settings(max_examples=40, deadline=None)
@given(
    size=st.integers(1, 3 * PER_CHUNK + 7),
    data=st.data(),
)
def test_reads_spanning_chunks_verify_exactly_the_chunks_they_touch(
    tmp_path_factory: pytest.TempPathFactory, size: int, data: st.DataObject
) -> None:
    directory = tmp_path_factory.mktemp("chunks")
    store = PlanFiles(directory)
    identity = {"size": size}
    store.save(identity, {"values": np.arange(size, dtype=np.int64)})
    start = data.draw(st.integers(0, size - 1), label="start")
    stop = data.draw(st.integers(start + 1, size), label="stop")
    changed = data.draw(st.integers(0, size - 1), label="changed")
    (plan,) = directory.iterdir()
    plan.write_bytes(_edit_element(plan.read_bytes(), "values", changed, lambda v: v + 1))
    arrays = store.load(identity)
    assert isinstance(arrays, StoredPlan)
    touched = range(start // PER_CHUNK, (stop - 1) // PER_CHUNK + 1)
    if changed // PER_CHUNK in touched:
        with pytest.raises(CorpusFormatError, match=f"chunk {changed // PER_CHUNK} "):
            arrays.check("values", start, stop)
    else:
        arrays.check("values", start, stop)
        assert arrays.verified_chunks == len(touched)


@settings(max_examples=40, deadline=None)
@given(
    pieces=st.lists(st.integers(0, 3), min_size=1, max_size=20_000),
    probes=st.lists(st.integers(-1, 60_001), min_size=1, max_size=8),
)
def test_checked_searches_match_numpy(pieces: list[int], probes: list[int]) -> None:
    starts = np.concatenate([[0], np.cumsum(pieces)]).astype(np.int64)
    checked: list[tuple[str, int, int]] = []

    def read(name: str, start: int, stop: int) -> np.ndarray:
        checked.append((name, start, stop))
        return starts[start:stop]

    layout = StreamLayout(np.arange(len(pieces)), np.array(pieces), starts, False, reader=read)
    plain = StreamLayout(np.arange(len(pieces)), np.array(pieces), starts, False)
    for value in probes:
        for side in ("left", "right"):
            assert layout._searched(value, side) == int(starts.searchsorted(value, side=side))
        assert layout.documents_between(value, value + 9) == plain.documents_between(
            value, value + 9
        )
    assert all(stop - start <= 4096 for _, start, stop in checked)
