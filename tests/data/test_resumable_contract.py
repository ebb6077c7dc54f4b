"""One resumable contract: every stream answers the same verbs the same way.

``StreamingCorpus`` (both layouts, the per-rank one also in phases), ``TokenStream`` (with and without ``world_size``)
and ``Mixture`` (both objectives) are checked by one conformance suite: what
``batches()`` yields at a cursor is what ``read`` returns there, ``next_cursor`` is
where the cursor moves, a state saved at any step resumes the rest of the stream
bitwise, and the one torch adapter serves each of them with any number of workers.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from mixle.data import (
    Batch,
    BlockSchedule,
    Mixture,
    MixtureSource,
    ResumableStream,
    StreamingCorpus,
    TokenStream,
)
from mixle.data.torch import StreamDataset


def _documents(seed: int = 0, count: int = 30) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 300, int(n)) for n in rng.integers(1, 40, count)]


DOCS = _documents()
STREAMS: dict[str, Callable[[], ResumableStream]] = {
    "corpus per-rank": lambda: StreamingCorpus(
        DOCS, rank=1, world_size=2, block=8, batch_size=3, seed=1, document_ids=True
    ),
    "corpus global": lambda: StreamingCorpus(
        DOCS, rank=1, world_size=2, block=8, batch_size=3, seed=1, layout="global"
    ),
    "corpus per-rank phases": lambda: StreamingCorpus(
        DOCS,
        rank=1,
        world_size=2,
        block=4,
        batch_size=4,
        seed=1,
        block_schedule=BlockSchedule.parse("4:800,16"),  # step 25: in epoch 1
    ),
    "token stream": lambda: TokenStream(DOCS, 6, 5, epochs=3, seed=2),
    "token stream global": lambda: TokenStream(DOCS, 6, 5, epochs=3, rank=1, world_size=2),
    "mixture": lambda: Mixture(
        [MixtureSource(DOCS[:10], 1.0, "a"), MixtureSource(DOCS[10:], 2.0, "b")],
        block=8,
        batch_size=2,
        rank=1,
        world_size=2,
        document_ids=True,
    ),
    "mixture windows": lambda: Mixture(
        [MixtureSource(DOCS[:10], 1.0, "a"), MixtureSource(DOCS[10:], 2.0, "b")],
        block=6,
        batch_size=4,
        objective="windows",
    ),
    # 2 ranks x 4 rows x 4 tokens, then 1 row of 16 a rank from token 96 (step 4).
    "mixture block_schedule": lambda: Mixture(
        [MixtureSource(DOCS[:10], 1.0, "a"), MixtureSource(DOCS[10:], 2.0, "b")],
        block=4,
        batch_size=4,
        rank=1,
        world_size=2,
        document_ids=True,
        block_schedule=BlockSchedule.parse("4:96,16"),
    ),
}
STEPS = 60  # crosses epoch ends of the finite streams


def _same(a: Batch, b: Batch) -> bool:
    return a.fields() == b.fields() and all(
        np.array_equal(x, y) for x, y in zip(a.as_tuple(), b.as_tuple(), strict=True)
    )


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_batches_read_and_next_cursor_agree(name: str) -> None:
    stream = STREAMS[name]()
    assert isinstance(stream, ResumableStream)
    batches = stream.batches()
    for _ in range(STEPS):
        before = stream.cursor
        batch = next(batches, None)
        if batch is None:
            assert stream.next_cursor(*before, 1) is None
            break
        assert _same(batch, stream.read(*before))
        following = stream.next_cursor(*before, 1)
        if following is not None:  # None: the stream ends here
            assert stream.cursor == following
        assert stream.steps_left(*before) >= 1


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_a_state_saved_at_any_step_resumes_the_rest_bitwise(name: str) -> None:
    stream = STREAMS[name]()
    states, batches = [], []
    source = stream.batches()
    for _ in range(25):
        states.append(stream.state_dict())
        batch = next(source, None)
        if batch is None:
            break
        batches.append(batch)
    for at in (0, 3, len(batches) - 1):
        fresh = STREAMS[name]()
        fresh.load_state_dict(states[at])
        rest = list(itertools.islice(fresh.batches(), len(batches) - at))
        assert all(_same(a, b) for a, b in zip(rest, batches[at:], strict=True))


@pytest.mark.parametrize(
    "name", ["corpus global", "mixture", "mixture block_schedule", "token stream"]
)
def test_the_torch_adapter_wraps_any_stream_for_any_worker_count(name: str) -> None:
    expected = [b.as_tuple() for b in itertools.islice(STREAMS[name]().batches(), 9)]
    for workers in (0, 2):
        loader = DataLoader(StreamDataset(STREAMS[name]()), batch_size=None, num_workers=workers)
        got = list(itertools.islice(loader, 9))
        assert len(got) == len(expected)
        for items, arrays in zip(got, expected, strict=True):
            assert [torch.as_tensor(a).tolist() for a in arrays] == [t.tolist() for t in items]


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_a_discarded_stream_is_freed_without_the_cyclic_collector(name: str) -> None:
    import gc
    import weakref

    stream = STREAMS[name]()
    next(stream.batches())
    stream.state_dict()
    ref = weakref.ref(stream)
    enabled = gc.isenabled()
    gc.disable()
    try:
        del stream
        assert ref() is None  # no reference cycle keeps its O(documents) plans alive
    finally:
        if enabled:
            gc.enable()
