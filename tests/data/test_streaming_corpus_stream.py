"""Issue #5: streaming packer == eager, cursor/resume, even ranks, document ids, laziness."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.data.streaming_corpus import StreamingCorpus, pack_documents
from mixle.errors import ArgumentError, CorpusFormatError, StateMismatchError
from tests.data._reference import reference_stream
from tests.data.memmap_documents import MemmapDocuments, write_memmap_corpus
from tests.data.resume_helpers import assert_items_equal, assert_resumes_at_every_step

corpora = st.lists(
    st.lists(st.integers(0, 2**31), max_size=20).map(lambda d: np.array(d, dtype=np.int64)),
    max_size=25,
)
boundaries = st.one_of(st.none(), st.integers(-3, 2**40))


def _all_batches(
    corpus: StreamingCorpus, epoch: int, start: int = 0
) -> list[tuple[np.ndarray, ...]]:
    return list(corpus.epoch_batches(epoch, start_batch=start))


@given(
    corpora,
    st.integers(1, 9),
    st.integers(1, 4),
    boundaries,
    st.integers(1, 4),
    st.integers(0, 3),
    st.integers(0, 100),
)
def test_streaming_batches_equal_eager_packing_bitwise(
    documents: list[np.ndarray],
    block: int,
    batch_size: int,
    boundary_id: int | None,
    world_size: int,
    epoch: int,
    seed: int,
) -> None:
    for rank in range(world_size):
        corpus = StreamingCorpus(
            documents,
            rank=rank,
            world_size=world_size,
            block=block,
            batch_size=batch_size,
            seed=seed,
            pad_id=-1,
            boundary_id=boundary_id,
            even_batches=False,
        )
        packed = pack_documents(
            documents,
            corpus.rank_document_indices(epoch),
            block,
            pad_id=-1,
            boundary_id=boundary_id,
        )
        batches = _all_batches(corpus, epoch)
        assert len(batches) == corpus.num_batches(epoch) == -(-packed.rows.shape[0] // batch_size)
        for k, (context, targets, mask) in enumerate(batches):
            rows = packed.rows[k * batch_size : (k + 1) * batch_size]
            assert_items_equal(context, np.ascontiguousarray(rows[:, :-1]))
            assert_items_equal(targets, np.ascontiguousarray(rows[:, 1:]))
            assert_items_equal(mask, packed.loss_mask[k * batch_size : (k + 1) * batch_size])
            assert_items_equal(corpus.batch_at(epoch, k), (context, targets, mask))
        for start in range(len(batches) + 1):
            assert_items_equal(_all_batches(corpus, epoch, start), batches[start:])


@given(
    corpora, st.integers(1, 6), st.integers(1, 3), boundaries, st.integers(2, 5), st.integers(0, 50)
)
def test_even_batches_give_every_rank_the_same_count_and_drop_a_bounded_tail(
    documents: list[np.ndarray],
    block: int,
    batch_size: int,
    boundary_id: int | None,
    world_size: int,
    seed: int,
) -> None:
    counts = []
    rows = []
    for rank in range(world_size):
        kwargs: dict[str, Any] = {
            "rank": rank,
            "world_size": world_size,
            "block": block,
            "batch_size": batch_size,
            "seed": seed,
            "boundary_id": boundary_id,
        }
        even = StreamingCorpus(documents, **kwargs)
        full = StreamingCorpus(documents, even_batches=False, **kwargs)
        even_batches, full_batches = _all_batches(even, 1), _all_batches(full, 1)
        assert len(even_batches) == even.num_batches(1)
        assert_items_equal(even_batches, full_batches[: len(even_batches)])  # a prefix
        counts.append(len(even_batches))
        rows.append((sum(len(b[0]) for b in full_batches), sum(len(b[0]) for b in even_batches)))
    assert len(set(counts)) == 1
    fewest = min(total for total, _ in rows)
    for total, kept in rows:
        assert total - kept <= total - fewest  # dropped rows bounded by the spread


def _labelled_stream(
    documents: list[np.ndarray], indices: np.ndarray, boundary: int | None
) -> list[tuple[int, int]]:
    labels: list[tuple[int, int]] = []
    for position, index in enumerate(indices.tolist()):
        if boundary is not None and position > 0:
            previous = int(indices[position - 1])
            labels.append((previous, len(documents[previous])))
        labels.extend((index, offset) for offset in range(len(documents[index])))
    return labels


@given(corpora, st.integers(1, 6), st.integers(1, 3), boundaries, st.integers(1, 3))
def test_document_and_position_ids_follow_the_stream(
    documents: list[np.ndarray],
    block: int,
    batch_size: int,
    boundary_id: int | None,
    world_size: int,
) -> None:
    corpus = StreamingCorpus(
        documents,
        rank=world_size - 1,
        world_size=world_size,
        block=block,
        batch_size=batch_size,
        boundary_id=boundary_id,
        document_ids=True,
        even_batches=False,
    )
    indices = corpus.rank_document_indices(0)
    labels = _labelled_stream(documents, indices, boundary_id)
    assert len(labels) == len(reference_stream(documents, indices.tolist(), boundary_id))
    start = 0
    for context, _, _, doc_ids, pos_ids in corpus.epoch_batches(0):
        assert doc_ids.shape == pos_ids.shape == context.shape
        assert doc_ids.dtype == pos_ids.dtype == np.int64
        for flat_doc, flat_pos in zip(
            doc_ids.reshape(-1).tolist(), pos_ids.reshape(-1).tolist(), strict=True
        ):
            expected = labels[start] if start < len(labels) else (-1, 0)
            assert (flat_doc, flat_pos) == expected
            start += 1
        start += 0
    # positions restart at 0 for every document
    assert all(
        pos == 0 for (doc, pos), prev in zip(labels[1:], labels, strict=False) if doc != prev[0]
    )


def test_iteration_runs_across_epochs_from_the_cursor() -> None:
    documents = [np.arange(i * 10, i * 10 + 7) for i in range(6)]
    corpus = StreamingCorpus(documents, rank=0, world_size=1, block=4, batch_size=2)
    epoch0, epoch1 = _all_batches(corpus, 0), _all_batches(corpus, 1)
    taken = [batch for _, batch in zip(range(len(epoch0) + len(epoch1)), corpus, strict=False)]
    assert_items_equal(taken, epoch0 + epoch1)
    assert corpus.cursor == (2, 0)


def test_iteration_stops_on_an_empty_corpus() -> None:
    corpus = StreamingCorpus([np.array([1])], rank=0, world_size=1, block=4, batch_size=2)
    assert list(corpus) == []


def test_resume_from_every_step_across_epochs() -> None:
    documents = [np.arange(100 * i, 100 * i + (i * 7) % 11 + 1) for i in range(15)]

    def make() -> StreamingCorpus:
        return StreamingCorpus(
            documents,
            rank=1,
            world_size=2,
            block=5,
            batch_size=2,
            seed=9,
            boundary_id=-2,
            document_ids=True,
        )

    items = assert_resumes_at_every_step(make, steps=3 * make().num_batches(0) + 1)
    assert len(items) > 6


def test_resume_over_memmap_documents(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    source = [
        rng.integers(0, 60_000, size=int(n)).astype(np.uint16) for n in rng.integers(0, 30, size=40)
    ]
    documents = write_memmap_corpus(tmp_path / "corpus", source)

    def make() -> StreamingCorpus:
        return StreamingCorpus(
            documents, rank=0, world_size=3, block=8, batch_size=2, boundary_id=65535
        )

    assert_resumes_at_every_step(make, steps=12)
    in_memory = StreamingCorpus(
        source, rank=0, world_size=3, block=8, batch_size=2, boundary_id=65535
    )
    assert_items_equal(_all_batches(make(), 2), _all_batches(in_memory, 2))


def test_memmap_documents_receive_prefetch_hints_for_upcoming_batches(tmp_path: Path) -> None:
    documents = write_memmap_corpus(tmp_path / "c", [np.arange(n % 9 + 1) for n in range(90)])
    corpus = StreamingCorpus(
        documents, rank=0, world_size=1, block=4, batch_size=1, even_batches=False
    )
    order = corpus.rank_document_indices(0).tolist()
    batches = _all_batches(corpus, 0)
    # A window of batches per call, not one call per batch.
    assert 1 < len(documents.prefetched) <= -(-len(batches) // 8)
    hinted = [index for hint in documents.prefetched for index in hint]
    # Each document once, in read order: the rank's order after the first batch's documents.
    assert hinted == order[len(order) - len(hinted) :]
    assert set(order) - set(hinted) <= set(order[:3])


def _batches_hinted_before_read(documents: MemmapDocuments, batches: Iterable[Any]) -> list[Any]:
    """Consume ``batches`` (the first one is read at once); check every document a later
    batch reads was hinted by an earlier step or read by an earlier batch, and that no
    document is hinted twice. Returns the batches."""
    documents.events.clear()
    documents.prefetched.clear()
    ready: set[int] = set()
    consumed = []
    for batch in batches:
        reads = {doc for kind, doc in documents.events if kind == "read"}
        ready |= {doc for kind, doc in documents.events if kind == "hint"}
        if consumed:
            assert reads <= ready, len(consumed)
        ready |= reads
        documents.events.clear()
        consumed.append(batch)
    hinted = [index for hint in documents.prefetched for index in hint]
    assert len(hinted) == len(set(hinted))
    return consumed


@pytest.mark.parametrize(
    ("world_size", "batch_size", "boundary_id", "start_batch"),
    [(1, 1, None, 0), (2, 3, 65535, 0), (3, 2, None, 5), (1, 2, 7, 11)],
)
@pytest.mark.parametrize("layout", ["per-rank", "global"])
def test_every_document_is_hinted_before_its_batch_reads_it(
    tmp_path: Path,
    world_size: int,
    batch_size: int,
    boundary_id: int | None,
    start_batch: int,
    layout: str,
) -> None:
    rng = np.random.default_rng(world_size + batch_size)
    # Enough documents for several chunks of global-layout hint windows.
    source = [np.arange(int(n)) for n in rng.integers(0, 20, size=1500)]
    documents = write_memmap_corpus(tmp_path / "c", source)

    def make(prefetch: bool) -> StreamingCorpus:
        return StreamingCorpus(
            documents,
            rank=world_size - 1,
            world_size=world_size,
            block=5,
            batch_size=batch_size,
            boundary_id=boundary_id,
            prefetch=prefetch,
            layout=layout,
        )

    with_hints = _batches_hinted_before_read(
        documents, make(True).epoch_batches(0, start_batch=start_batch)
    )
    assert documents.prefetched
    documents.prefetched.clear()
    without = list(make(False).epoch_batches(0, start_batch=start_batch))
    assert documents.prefetched == []
    assert_items_equal(with_hints, without)


@pytest.mark.parametrize("world_size", [1, 3])
def test_global_iteration_hints_each_document_once_before_it_is_read(
    tmp_path: Path, world_size: int
) -> None:
    rng = np.random.default_rng(world_size)
    source = [np.arange(int(n)) for n in rng.integers(1, 30, size=2000)]
    documents = write_memmap_corpus(tmp_path / "c", source)
    corpus = StreamingCorpus(
        documents,
        rank=world_size - 1,
        world_size=world_size,
        block=6,
        batch_size=2,
        boundary_id=7,
        layout="global",
    )
    batches = _batches_hinted_before_read(
        documents, itertools.islice(corpus, corpus.num_batches(0))
    )
    assert len(batches) > 4 * 32  # several passes of hint windows


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 40), min_size=1, max_size=400),
    block=st.integers(1, 9),
    batch_size=st.integers(1, 3),
    world_size=st.integers(1, 3),
    boundary=st.booleans(),
    layout=st.sampled_from(["per-rank", "global"]),
    data=st.data(),
)
def test_hints_name_each_document_once_before_any_batch_after_the_first_reads_it(
    tmp_path_factory: pytest.TempPathFactory,
    lengths: list[int],
    block: int,
    batch_size: int,
    world_size: int,
    boundary: bool,
    layout: str,
    data: st.DataObject,
) -> None:
    source = [np.arange(n) % 50 for n in lengths]
    documents = write_memmap_corpus(tmp_path_factory.mktemp("hints") / "c", source)
    rank = data.draw(st.integers(0, world_size - 1))
    corpus = StreamingCorpus(
        documents,
        rank=rank,
        world_size=world_size,
        block=block,
        batch_size=batch_size,
        boundary_id=60 if boundary else None,
        layout=layout,
    )
    start = data.draw(st.integers(0, corpus.num_batches(0)))
    _batches_hinted_before_read(documents, corpus.epoch_batches(0, start_batch=start))


def test_state_dict_is_small_json_and_pins_the_stream() -> None:
    documents = [np.arange(9) for _ in range(4)]
    corpus = StreamingCorpus(documents, rank=0, world_size=2, block=2, batch_size=1, seed=3)
    next(iter(corpus))
    state = json.loads(json.dumps(corpus.state_dict()))
    assert state["version"] == 1 and (state["epoch"], state["batch"]) == (0, 1)
    assert {
        "fingerprint",
        "seed",
        "block",
        "batch_size",
        "rank",
        "world_size",
        "pad_id",
        "boundary_id",
    } <= set(state["stream"])
    other = StreamingCorpus(documents, rank=0, world_size=2, block=3, batch_size=1, seed=4)
    with pytest.raises(StateMismatchError) as error:
        other.load_state_dict(state)
    message = str(error.value)
    assert "seed in checkpoint: 3 / in stream: 4" in message
    assert "block in checkpoint: 2 / in stream: 3" in message
    changed = StreamingCorpus(
        [np.arange(9) + 1 for _ in range(4)], rank=0, world_size=2, block=2, batch_size=1, seed=3
    )
    with pytest.raises(ValueError, match="fingerprint"):
        changed.load_state_dict(state)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"batch": 10_000}, "only"),
        ({"version": 2}, "version"),
        ({"epoch": -1}, "epoch"),
        ({"batch": 1.5}, "batch"),
    ],
)
def test_bad_states_are_rejected(change: dict[str, Any], needle: str) -> None:
    corpus = StreamingCorpus([np.arange(50)], rank=0, world_size=1, block=4, batch_size=2)
    state = {**corpus.state_dict(), **change}
    with pytest.raises(StateMismatchError, match=needle):
        corpus.load_state_dict(state)


def test_load_at_epoch_end_moves_to_next_epoch() -> None:
    corpus = StreamingCorpus([np.arange(50)], rank=0, world_size=1, block=4, batch_size=2)
    state = {**corpus.state_dict(), "epoch": 3, "batch": corpus.num_batches(3)}
    corpus.load_state_dict(state)
    assert corpus.cursor == (4, 0)


def test_start_batch_beyond_the_epoch_raises_eagerly() -> None:
    corpus = StreamingCorpus([np.arange(50)], rank=0, world_size=1, block=4, batch_size=2)
    with pytest.raises(ArgumentError, match="start_batch"):
        corpus.epoch_batches(0, start_batch=corpus.num_batches(0) + 1)
    with pytest.raises(ArgumentError, match="index"):
        corpus.batch_at(0, corpus.num_batches(0))


def test_documents_that_change_length_are_detected() -> None:
    documents = [np.arange(10), np.arange(10)]
    corpus = StreamingCorpus(documents, rank=0, world_size=1, block=4, batch_size=1)
    documents[0] = np.arange(3)
    documents[1] = np.arange(3)
    with pytest.raises(CorpusFormatError, match="must not change"):
        _all_batches(corpus, 0)


def test_batches_hold_only_batch_sized_buffers() -> None:
    documents = [np.arange(1000, dtype=np.int32) for _ in range(200)]
    corpus = StreamingCorpus(documents, rank=0, world_size=1, block=64, batch_size=4)
    for context, targets, mask in corpus.epoch_batches(0):
        assert context.base is not None and context.base.size <= 4 * 64 + 1
        assert np.shares_memory(context, targets) and mask.size <= 4 * 64


def test_for_current_rank_reads_the_torchrun_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    documents = [np.arange(5) for _ in range(7)]
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    corpus = StreamingCorpus.for_current_rank(documents, block=2, batch_size=1)
    assert (corpus.rank, corpus.world_size) == (2, 3)
    monkeypatch.delenv("WORLD_SIZE")
    with pytest.raises(ArgumentError, match="RANK and WORLD_SIZE"):
        StreamingCorpus.for_current_rank(documents, block=2, batch_size=1)
    monkeypatch.delenv("RANK")
    corpus = StreamingCorpus.for_current_rank(documents, block=2, batch_size=1)
    assert (corpus.rank, corpus.world_size) == (0, 1)
    monkeypatch.setenv("RANK", "x")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ArgumentError, match="RANK"):
        StreamingCorpus.for_current_rank(documents, block=2, batch_size=1)
    with pytest.raises(ArgumentError, match="rank"):
        StreamingCorpus.for_current_rank(documents, rank=0, block=2, batch_size=1)


class _ForgetfulCorpus(StreamingCorpus):
    """Accepts a state but ignores it: the resume helper must catch this."""

    def load_state_dict(self, state: Any) -> None:
        super().load_state_dict(state)
        self._cursor.move(0, 0)


def test_resume_helper_detects_an_iterator_that_ignores_its_state() -> None:
    def make() -> StreamingCorpus:
        return _ForgetfulCorpus([np.arange(40)], rank=0, world_size=1, block=4, batch_size=1)

    with pytest.raises(AssertionError):
        assert_resumes_at_every_step(make, steps=5)


def test_sharded_corpus_streams_like_the_in_memory_documents(tmp_path: Path) -> None:
    from mixle.corpus import CorpusWriter, open_corpus

    rng = np.random.default_rng(3)
    source = [
        rng.integers(0, 50_000, size=int(n)).astype(np.int64) for n in rng.integers(0, 40, size=120)
    ]
    with CorpusWriter(tmp_path / "corpus", vocab_size=50_000, shard_max_bytes=400) as writer:
        writer.add_many(source)
    documents = open_corpus(tmp_path / "corpus")
    assert documents.num_shards > 3

    def make() -> StreamingCorpus:
        return StreamingCorpus(
            documents, rank=1, world_size=2, block=16, batch_size=2, boundary_id=49_999
        )

    reference = StreamingCorpus(
        source, rank=1, world_size=2, block=16, batch_size=2, boundary_id=49_999
    )
    for epoch in (0, 1):
        assert_items_equal(_all_batches(make(), epoch), _all_batches(reference, epoch))
    assert make().state_dict()["stream"]["fingerprint"] == documents.fingerprint
    assert_resumes_at_every_step(make, steps=10)


def test_pickling_drops_the_epoch_plans_but_keeps_the_cursor() -> None:
    import pickle

    corpus = StreamingCorpus(
        [np.arange(30) for _ in range(8)], rank=0, world_size=2, block=4, batch_size=2
    )
    next(iter(corpus))
    clone = pickle.loads(pickle.dumps(corpus))
    assert clone._plans._plans == {} and clone.cursor == corpus.cursor
    assert_items_equal(list(itertools.islice(clone, 12)), list(itertools.islice(corpus, 12)))


@pytest.mark.slow
@given(
    st.lists(st.integers(0, 2000), min_size=50, max_size=200),
    st.integers(16, 300),
    st.integers(1, 16),
    boundaries,
    st.integers(1, 8),
)
def test_soak_streaming_equals_eager_and_resumes_on_large_corpora(
    lengths: list[int], block: int, batch_size: int, boundary_id: int | None, world_size: int
) -> None:
    documents = [np.arange(n, dtype=np.int64) + 10 * i for i, n in enumerate(lengths)]
    corpus = StreamingCorpus(
        documents,
        rank=world_size - 1,
        world_size=world_size,
        block=block,
        batch_size=batch_size,
        boundary_id=boundary_id,
        even_batches=False,
    )
    packed = pack_documents(
        documents, corpus.rank_document_indices(0), block, boundary_id=boundary_id
    )
    batches = _all_batches(corpus, 0)
    if batches:
        assert_items_equal(
            np.concatenate([b[0] for b in batches]), np.ascontiguousarray(packed.rows[:, :-1])
        )
    assert_resumes_at_every_step(
        lambda: StreamingCorpus(
            documents, rank=0, world_size=world_size, block=block, batch_size=batch_size
        ),
        steps=min(30, 2 * corpus.num_batches(0) + 1),
    )


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 60), min_size=1, max_size=60),
    block=st.integers(4, 16),
    batch_size=st.integers(1, 4),
    packing=st.sampled_from(["per-rank", "global", "best_fit"]),
    boundary=st.booleans(),
    document_ids=st.booleans(),
    start=st.integers(0, 5),
)
def test_grouped_reads_of_an_epoch_are_the_batches_read_one_by_one(
    lengths: list[int],
    block: int,
    batch_size: int,
    packing: str,
    boundary: bool,
    document_ids: bool,
    start: int,
) -> None:
    # Iteration reads consecutive batches in groups (1, 2, 4, 8 per call); random access
    # reads one batch: the same arrays, the same real target counts (packing efficiency).
    rng = np.random.default_rng(len(lengths) * 31 + block)
    documents = [rng.integers(0, 1000, size=n) for n in lengths]
    options: dict[str, Any] = dict(
        block=max(block, 8) if packing == "best_fit" else block,
        batch_size=batch_size,
        boundary_id=3 if boundary else None,
        document_ids=document_ids,
        seed=2,
    )
    if packing != "per-rank":
        options["layout"] = "global"
    if packing == "best_fit":
        options["packing"] = "best_fit"
    stream = StreamingCorpus(documents, rank=0, world_size=1, **options)
    total = stream.num_batches(0)
    start = min(start, total)
    batches = list(stream.iter_epoch(0, start_batch=start))
    assert len(batches) == total - start
    step = stream.cursor_step
    real = 0
    for offset, batch in enumerate(batches):
        alone = stream.read(0, (start + offset) * step)
        assert batch.fields() == alone.fields()
        for name in batch.fields():
            got, want = getattr(batch, name), getattr(alone, name)
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
        assert not np.shares_memory(batch.context, batches[offset - 1].context) or offset == 0
        real += int(np.count_nonzero(batch.loss_mask))
    if batches:
        expected = real / sum(batch.context.size for batch in batches)
        assert stream.last_packing_efficiency == pytest.approx(expected)
