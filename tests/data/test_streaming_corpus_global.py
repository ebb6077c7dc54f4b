"""StreamingCorpus(layout="global"): world-size-invariant global batches, elastic resume."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.data import StreamingCorpus
from mixle.errors import ArgumentError, StateMismatchError
from tests.data.test_streaming_corpus import IndexOnlyDocuments

Batch = tuple[np.ndarray, ...]


def _corpus(
    documents: Sequence[Any], rank: int, world: int, batch: int, **kw: Any
) -> StreamingCorpus:
    kw.setdefault("block", 4)
    return StreamingCorpus(
        documents, rank=rank, world_size=world, batch_size=batch, layout="global", **kw
    )


def _steps(
    documents: Sequence[Any],
    world: int,
    batch: int,
    *,
    state: dict[str, Any] | None = None,
    limit: int | None = None,
    **kw: Any,
) -> tuple[list[list[Batch]], dict[str, Any]]:
    """Run every rank of one job in lockstep until the epoch ends (or ``limit`` steps)."""
    ranks = [_corpus(documents, r, world, batch, **kw) for r in range(world)]
    for corpus in ranks:
        if state is not None:
            corpus.load_state_dict(state)
    epoch = ranks[0].cursor[0]
    iterators = [iter(corpus) for corpus in ranks]
    steps: list[list[Batch]] = []
    while ranks[0].cursor[0] == epoch and (limit is None or len(steps) < limit):
        if ranks[0].num_rows(epoch) == 0:
            break
        steps.append([next(iterator) for iterator in iterators])
    states = [corpus.state_dict() for corpus in ranks]
    assert all(s == states[0] for s in states)  # the row cursor is the same on every rank
    return steps, states[0]


def _concatenated(step: list[Batch]) -> list[np.ndarray]:
    return [np.concatenate([part[k] for part in step]) for k in range(len(step[0]))]


documents_strategy = st.lists(
    st.lists(st.integers(0, 999), min_size=0, max_size=30).map(
        lambda xs: np.array(xs, dtype=np.int64)
    ),
    min_size=0,
    max_size=25,
)


orders_strategy = st.tuples(
    st.sampled_from(["permutation", "blocks"]), st.integers(1, 6), st.integers(1, 4)
)


def _order_kw(documents: Sequence[Any], order: tuple[str, int, int]) -> dict[str, Any]:
    """Stream arguments of ``order`` (name, documents per block, blocks per window),
    the sizes capped by the corpus."""
    name, block_documents, window_blocks = order
    if name == "permutation":
        return {"order": name}
    block_documents = min(block_documents, max(len(documents), 1))
    blocks = -(-max(len(documents), 1) // block_documents)
    return {
        "order": name,
        "block_documents": block_documents,
        "window_blocks": min(window_blocks, blocks),
    }


def _factorisations(total: int) -> list[tuple[int, int]]:
    return [(w, total // w) for w in range(1, total + 1) if total % w == 0]


@settings(max_examples=40, deadline=None)
@given(
    documents_strategy,
    st.integers(1, 12),
    st.integers(1, 6),
    st.one_of(st.none(), st.just(1000)),
    st.integers(0, 3),
    orders_strategy,
)
def test_concatenated_step_is_bitwise_the_same_for_every_factorisation(
    documents: list[np.ndarray],
    total: int,
    block: int,
    boundary: int | None,
    seed: int,
    order: tuple[str, int, int],
) -> None:
    kw = {"block": block, "boundary_id": boundary, "seed": seed, "document_ids": True}
    kw |= _order_kw(documents, order)
    reference, _ = _steps(documents, 1, total, **kw)
    for world, batch in _factorisations(total):
        steps, _ = _steps(documents, world, batch, **kw)
        assert len(steps) == len(reference)
        for step, ref in zip(steps, reference, strict=True):
            assert all(part[0].shape == (batch, block) for part in step)
            for got, want in zip(_concatenated(step), ref[0], strict=True):
                assert got.dtype == want.dtype
                np.testing.assert_array_equal(got, want)


def _expected_targets(documents: Sequence[np.ndarray], **kw: Any) -> Counter[tuple[int, int]]:
    """Every (document, position) whose token is followed by a real target, once, in
    the epoch order of the stream ``kw`` builds (which must hold every document once)."""
    order = _corpus(documents, 0, 1, 1, **kw).rank_document_indices(0)
    assert sorted(order.tolist()) == list(range(len(documents)))
    tokens = [(int(d), p) for d in order for p in range(len(documents[int(d)]))]
    return Counter(tokens[:-1])


def _targets(steps: list[list[Batch]]) -> Counter[tuple[int, int]]:
    seen: Counter[tuple[int, int]] = Counter()
    for step in steps:
        for *_arrays, mask, doc_ids, pos_ids in step:
            seen.update(zip(doc_ids[mask].tolist(), pos_ids[mask].tolist(), strict=True))
    return seen


@settings(max_examples=40, deadline=None)
@given(
    documents_strategy,
    st.tuples(st.integers(1, 4), st.integers(1, 5)),
    st.tuples(st.integers(1, 4), st.integers(1, 5)),
    st.integers(0, 12),
    st.integers(0, 3),
    orders_strategy,
)
def test_elastic_resume_trains_every_target_of_the_epoch_exactly_once(
    documents: list[np.ndarray],
    before: tuple[int, int],
    after: tuple[int, int],
    stop: int,
    seed: int,
    order: tuple[str, int, int],
) -> None:
    kw = {"block": 3, "seed": seed, "document_ids": True, **_order_kw(documents, order)}
    first, state = _steps(documents, *before, limit=stop, **kw)
    if state["epoch"] == 0:
        rest, _ = _steps(documents, *after, state=state, **kw)
    else:
        rest = []
    assert _targets(first) + _targets(rest) == _expected_targets(documents, **kw)


@pytest.mark.parametrize(
    "order", [{"order": "permutation"}, {"block_documents": 7, "window_blocks": 2}]
)
def test_resume_with_the_same_global_batch_continues_bitwise(order: dict[str, Any]) -> None:
    rng = np.random.default_rng(5)
    documents = [rng.integers(0, 500, size=int(n)) for n in rng.integers(0, 40, size=60)]
    reference, _ = _steps(documents, 1, 6, **order)
    head, state = _steps(documents, 2, 3, limit=4, **order)
    tail, _ = _steps(documents, 3, 2, state=state, **order)
    assert len(head) + len(tail) == len(reference)
    for step, ref in zip(head + tail, reference, strict=True):
        for got, want in zip(_concatenated(step), ref[0], strict=True):
            np.testing.assert_array_equal(got, want)


def test_last_global_batch_is_completed_with_fully_masked_rows() -> None:
    documents = [np.arange(1, 12)]  # 11 tokens: 10 targets, block 4 -> 3 rows
    steps, _ = _steps(documents, 2, 2)
    assert len(steps) == 1
    _context, targets, mask = _concatenated(steps[0])
    assert mask.shape == (4, 4)
    assert mask.sum() == 10
    assert not mask[3].any() and (targets[3] == 0).all()  # the padding row


def test_every_rank_takes_the_same_number_of_steps() -> None:
    rng = np.random.default_rng(1)
    documents = [rng.integers(0, 500, size=int(n)) for n in rng.integers(0, 80, size=33)]
    counts = {r: len(list(_corpus(documents, r, 4, 3).epoch_batches(0))) for r in range(4)}
    assert len(set(counts.values())) == 1
    assert counts[0] == _corpus(documents, 0, 4, 3).num_batches(0)


class _RecordingDocuments(IndexOnlyDocuments):
    """Also records the prefetch hints it receives."""

    def __init__(self, documents: list[np.ndarray]) -> None:
        super().__init__(documents)
        self.hinted: list[int] = []

    def prefetch(self, indices: Sequence[int]) -> None:
        self.hinted.extend(int(i) for i in indices)


def test_a_rank_reads_only_the_documents_its_rows_overlap() -> None:
    documents = _RecordingDocuments([np.arange(10) for _ in range(40)])  # 400 tokens
    corpus = _corpus(documents, 1, 4, 2, block=10, prefetch=False)
    corpus.batch_at(0, 0)  # rank 1 of step 0: rows 2..3 -> tokens 20..41
    order = corpus.rank_document_indices(0)
    assert sorted(documents.read) == sorted(order[2:5].tolist())


def test_state_dict_is_small_json_and_names_no_shape() -> None:
    documents = [np.arange(50)] * 10
    state = _corpus(documents, 1, 2, 3).state_dict()
    assert state["version"] == 2 and {"epoch", "row", "stream"} <= set(state)
    assert not {"rank", "world_size", "batch_size"} & set(state["stream"])
    assert len(json.dumps(state)) <= 1024


def _with_cursor(corpus: StreamingCorpus, steps: int) -> StreamingCorpus:
    iterator = iter(corpus)
    for _ in range(steps):
        next(iterator)
    return corpus


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"row": 10_000}, "points at row 10000 of epoch 0, which has only"),
        ({"row": -1}, "field `row` must be a nonnegative integer. Got -1"),
        ({"row": 2.5}, "field `row` must be a nonnegative integer. Got 2.5"),
        ({"row": True}, "field `row` must be a nonnegative integer. Got True"),
    ],
)
def test_bad_row_is_refused_and_nothing_is_consumed(change: dict[str, Any], fragment: str) -> None:
    documents = [np.arange(40)] * 5
    state = {**_with_cursor(_corpus(documents, 0, 1, 2), 2).state_dict(), **change}
    target = _with_cursor(_corpus(documents, 0, 2, 1), 1)
    with pytest.raises(StateMismatchError, match=fragment):
        target.load_state_dict(state)
    assert isinstance(StateMismatchError("x"), ValueError)
    assert target.cursor == (0, 2)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"seed": 4}, "seed in checkpoint: 0 / in stream: 4"),
        ({"block": 5}, "block in checkpoint: 4 / in stream: 5"),
        ({"boundary_id": 7}, "boundary_id in checkpoint: None / in stream: 7"),
    ],
)
def test_state_of_another_stream_names_the_field_and_both_values(
    kwargs: dict[str, Any], fragment: str
) -> None:
    documents = [np.arange(40)] * 5
    state = _corpus(documents, 0, 1, 2).state_dict()
    with pytest.raises(StateMismatchError, match=fragment):
        _corpus(documents, 0, 1, 2, **kwargs).load_state_dict(state)


def test_state_of_another_corpus_is_refused() -> None:
    state = _corpus([np.arange(40)] * 5, 0, 1, 2).state_dict()
    with pytest.raises(StateMismatchError, match="fingerprint in checkpoint"):
        _corpus([np.arange(41)] * 5, 0, 1, 2).load_state_dict(state)


def test_global_state_into_a_per_rank_stream_and_the_reverse_are_refused() -> None:
    documents = [np.arange(40)] * 5
    per_rank = StreamingCorpus(documents, rank=0, world_size=1, block=4, batch_size=2)
    global_ = _corpus(documents, 0, 1, 2)
    with pytest.raises(StateMismatchError, match=r"version-2 \(global layout\).*'per-rank'"):
        per_rank.load_state_dict(global_.state_dict())
    with pytest.raises(StateMismatchError, match=r"version-1 \(per-rank layout\).*'global'"):
        global_.load_state_dict(per_rank.state_dict())


def test_per_rank_state_of_another_shape_points_at_the_global_layout() -> None:
    documents = [np.arange(40)] * 5
    saved = StreamingCorpus(documents, rank=0, world_size=2, block=4, batch_size=2).state_dict()
    other = StreamingCorpus(documents, rank=0, world_size=1, block=4, batch_size=2)
    with pytest.raises(
        StateMismatchError, match=r"world_size in checkpoint: 2 / in stream: 1.*layout='global'"
    ):
        other.load_state_dict(saved)
    same = StreamingCorpus(documents, rank=0, world_size=2, block=4, batch_size=2)
    same.load_state_dict(saved)  # version 1 still loads for the same shape


def test_layout_must_be_known() -> None:
    with pytest.raises(ArgumentError, match="`layout` must be one of 'per-rank', 'global'"):
        StreamingCorpus([np.arange(5)], rank=0, world_size=1, block=2, batch_size=1, layout="x")


def test_batch_at_row_starts_anywhere() -> None:
    documents = [np.arange(100)]
    corpus = _corpus(documents, 1, 2, 2)
    context = corpus.batch_at_row(0, 3)[0]
    np.testing.assert_array_equal(context[0], np.arange(20, 24))  # row 3 + 1 * 2 = row 5
    with pytest.raises(ArgumentError, match="`row` must be smaller than num_rows"):
        corpus.batch_at_row(0, corpus.num_rows(0))


def test_prefetch_hints_the_documents_of_the_coming_rows_once_in_read_order() -> None:
    rng = np.random.default_rng(2)
    documents = _RecordingDocuments([np.arange(int(n)) for n in rng.integers(1, 30, size=300)])
    corpus = _corpus(documents, 2, 3, 2, block=8)
    batches = iter(corpus)
    for _ in range(corpus.num_batches(0)):
        next(batches)
    hinted, read = documents.hinted, list(dict.fromkeys(documents.read))
    assert len(hinted) == len(set(hinted))  # each document hinted once
    assert set(read) - set(hinted) <= set(read[:5])  # only the first batch goes unhinted
    assert hinted == [d for d in read if d in set(hinted)]  # in read order
