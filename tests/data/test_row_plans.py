"""Row plans are strategies: a new layout is one class plugged into ``StreamingCorpus``.

The plan below — the global layout with each epoch's order reversed — is defined here,
registered under its own name, and gets the corpus's whole contract for free: batches,
random access, the cursor, state dicts, elastic resume and exactly-once coverage.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.data import StreamingCorpus
from mixle.data._plan_global import GlobalPlan
from mixle.data._row_plan import register_layout, unregister_layout
from mixle.errors import ArgumentError, StateMismatchError


class ReversedPlan(GlobalPlan):
    """The global layout, with every epoch's documents packed in reverse order."""

    name = "reversed-global"

    def ordered(self, order: np.ndarray) -> np.ndarray:
        return order[::-1].copy()


@pytest.fixture(autouse=True)
def _reversed_layout() -> Iterator[None]:
    register_layout(ReversedPlan.name, ReversedPlan)
    yield
    unregister_layout(ReversedPlan.name)


def _documents(seed: int, count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 500, int(n)) for n in rng.integers(1, 30, count)]


def _corpus(docs: list[np.ndarray], rank: int, world: int, batch: int) -> StreamingCorpus:
    return StreamingCorpus(
        docs,
        rank=rank,
        world_size=world,
        block=8,
        batch_size=batch,
        seed=3,
        boundary_id=0,
        document_ids=True,
        layout=ReversedPlan.name,
    )


def test_registered_plan_packs_the_reversed_order() -> None:
    docs = _documents(0, 40)
    mine = _corpus(docs, 0, 2, 3)
    plain = StreamingCorpus(
        docs, rank=0, world_size=2, block=8, batch_size=3, seed=3, layout="global",
        order="permutation",
    )  # fmt: skip
    for epoch in range(2):
        assert mine.rank_document_indices(epoch).tolist() == (
            plain.rank_document_indices(epoch)[::-1].tolist()
        )
    assert mine.stream_identity()["layout"] == ReversedPlan.name
    assert mine.state_dict()["version"] == 2


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    count=st.integers(1, 30),
    shape=st.sampled_from([(1, 1), (1, 4), (2, 3), (3, 2), (4, 1)]),
)
def test_every_target_once_per_epoch_for_any_shape(
    seed: int, count: int, shape: tuple[int, int]
) -> None:
    docs = _documents(seed, count)
    world, batch = shape
    ranks = [_corpus(docs, r, world, batch) for r in range(world)]
    steps = ranks[0].steps_left(0, 0)
    stream_tokens = sum(len(d) for d in docs) + len(docs) - 1
    documents: set[int] = set()
    real = 0
    for step in range(steps):
        parts = [c.read(0, step * world * batch) for c in ranks]
        real += sum(p.num_targets for p in parts)
        for part in parts:
            documents.update(part.document_ids[part.document_ids >= 0].tolist())
    assert real == max(stream_tokens - 1, 0)
    assert documents == (set(range(count)) if stream_tokens >= 2 else set())


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10**6), stop=st.integers(0, 12), other=st.sampled_from([1, 2, 3]))
def test_resume_on_another_shape_continues_the_stream(seed: int, stop: int, other: int) -> None:
    docs = _documents(seed, 25)
    whole = _corpus(docs, 0, 1, 6)
    reference = [b.as_tuple() for _, b in zip(range(stop + 4), whole.batches(), strict=False)]
    first = _corpus(docs, 0, 1, 6)
    taken = list(zip(range(stop), first.batches(), strict=False))
    state = first.state_dict()
    # The same rows, read by `other` ranks of 6 // other... concatenated per step.
    batch = 6 // other if 6 % other == 0 else 6
    world = 6 // batch
    resumed = [_corpus(docs, r, world, batch) for r in range(world)]
    for corpus in resumed:
        corpus.load_state_dict(state)
    streams = [corpus.batches() for corpus in resumed]
    for expected in reference[len(taken) :]:
        parts = [next(s).as_tuple() for s in streams]
        for field, array in enumerate(expected):
            assert np.array_equal(np.concatenate([p[field] for p in parts]), array)


def test_state_of_the_plain_global_layout_is_refused() -> None:
    docs = _documents(1, 20)
    plain = StreamingCorpus(docs, rank=0, world_size=1, block=8, batch_size=3, layout="global")
    with pytest.raises(StateMismatchError, match="layout in checkpoint: 'global'"):
        _corpus(docs, 0, 1, 3).load_state_dict(plain.state_dict())


def test_built_in_layouts_cannot_be_replaced_and_unknown_ones_are_named() -> None:
    with pytest.raises(ArgumentError, match="registered already"):
        register_layout("global", ReversedPlan)
    with pytest.raises(ArgumentError, match="'reversed-global'"):
        StreamingCorpus(_documents(0, 3), rank=0, world_size=1, block=4, batch_size=1, layout="x")
