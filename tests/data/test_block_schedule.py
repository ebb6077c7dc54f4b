"""Context length per phase (issue #27, item 1): ``StreamingCorpus(block_schedule=...)``.

The switch is exact: every target of the epoch's stream comes out once, across the
boundary, compared with the brute-force packing of the same order; resume at any step
on either side is bitwise; elastic shapes of the same tokens per global batch continue
the same global batches; another schedule's state is refused by name.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from mixle.data import Batch, BlockPhase, BlockSchedule, StreamingCorpus, pack_documents
from mixle.data.torch import StreamingDataset
from mixle.errors import ArgumentError, ArgumentTypeError, StateMismatchError


def _documents(lengths: Sequence[int], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 10_000, size=n, dtype=np.int64) for n in lengths]


def _ranks(
    documents: Sequence[np.ndarray],
    schedule: BlockSchedule,
    world: int,
    batch: int,
    **kw: Any,
) -> list[StreamingCorpus]:
    return [
        StreamingCorpus(
            documents,
            rank=r,
            world_size=world,
            batch_size=batch,
            block=schedule.first_block,
            layout="global",
            block_schedule=schedule,
            boundary_id=0,
            **kw,
        )
        for r in range(world)
    ]


def _global_steps(ranks: list[StreamingCorpus], count: int) -> list[list[Batch]]:
    """``count`` global batches from the ranks' cursors: each rank's part, in rank order."""
    iterators = [corpus.batches() for corpus in ranks]
    return [[next(it) for it in iterators] for _ in range(count)]


def _joined(step: list[Batch]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (
        np.concatenate([b.context for b in step]),
        np.concatenate([b.targets for b in step]),
        np.concatenate([b.loss_mask for b in step]),
    )


def _assert_same(a: list[list[Batch]], b: list[list[Batch]]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        for u, v in zip(_joined(x), _joined(y), strict=True):
            assert u.shape == v.shape and u.dtype == v.dtype
            np.testing.assert_array_equal(u, v)


def test_the_second_phase_continues_the_stream_in_longer_rows() -> None:
    documents = _documents([30, 7, 51, 12, 3, 44, 19, 26, 60, 8] * 3)
    schedule = BlockSchedule.parse("4:0.5,16")
    (corpus,) = _ranks(documents, schedule, world=1, batch=8)
    steps = list(corpus.iter_epoch(0))
    blocks = [b.block for b in steps]
    switch = blocks.index(16)
    assert set(blocks[:switch]) == {4} and set(blocks[switch:]) == {16}
    assert [b.num_rows for b in steps[:switch]] == [8] * switch
    assert {b.num_rows for b in steps[switch:]} == {2}  # 8 x 4 = 2 x 16 tokens a step
    # The last row of phase 0 ends on the token phase 1's first row starts with.
    before, after = steps[switch - 1], steps[switch]
    assert before.targets[-1, -1] == after.context[0, 0]
    assert corpus.phase_at(0, switch * 32) == (1, 16)
    assert corpus.phase_at(0, (switch - 1) * 32) == (0, 4)
    assert corpus.cursor_key == "token" and corpus.cursor_step == 32
    # Half of the epoch's targets, rounded down to whole global batches.
    targets = sum(len(d) for d in documents) + len(documents) - 2
    assert switch * 32 == (targets // 2) // 32 * 32


@settings(max_examples=30, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 60), min_size=1, max_size=25),
    blocks=st.lists(st.sampled_from([2, 4, 8, 16]), min_size=1, max_size=3),
    cuts=st.lists(st.integers(1, 400), min_size=2, max_size=2, unique=True),
    world=st.sampled_from([1, 2]),
    seed=st.integers(0, 3),
)
def test_every_target_comes_out_exactly_once_across_boundaries(
    lengths: list[int], blocks: list[int], cuts: list[int], world: int, seed: int
) -> None:
    documents = _documents(lengths, seed)
    until = sorted(cuts)[: len(blocks) - 1]
    phases = [(u, b) for u, b in zip(until, blocks, strict=False)] + [(None, blocks[-1])]
    schedule = BlockSchedule(phases)
    tokens = world * 16 * blocks[0]  # tokens per global batch: every block divides it
    ends = [0] + [u // tokens * tokens for u in until]
    if any(later <= earlier for earlier, later in itertools.pairwise(ends)):
        with pytest.raises(ArgumentError, match="holds no whole global batch"):
            _ranks(documents, schedule, world, 16)[0].num_batches(0)
        return
    ranks = _ranks(documents, schedule, world, 16)
    order = ranks[0].rank_document_indices(0)
    reference = pack_documents(documents, order, 1, boundary_id=0)
    expected = reference.targets[reference.loss_mask]
    steps = [list(corpus.iter_epoch(0)) for corpus in ranks]
    none = np.empty(0, dtype=np.int64)
    got = np.concatenate(
        [none, *(b.targets[b.loss_mask] for step in zip(*steps, strict=True) for b in step)]
    )
    np.testing.assert_array_equal(got, expected)
    # Inputs too: each row's context is the stream right before its targets.
    contexts = np.concatenate(
        [none, *(b.context[b.loss_mask] for step in zip(*steps, strict=True) for b in step)]
    )
    np.testing.assert_array_equal(contexts, reference.context[reference.loss_mask])
    for step in zip(*steps, strict=True):
        assert sum(b.num_rows * b.block for b in step) == tokens


@settings(max_examples=15, deadline=None)
@given(stop=st.integers(0, 40), seed=st.integers(0, 5))
def test_resume_at_any_step_either_side_is_bitwise(stop: int, seed: int) -> None:
    documents = _documents(np.random.default_rng(seed).integers(1, 40, size=40).tolist(), seed)
    schedule = BlockSchedule.parse("4:0.4,8:0.7,16")
    ranks = _ranks(documents, schedule, world=2, batch=4)
    total = ranks[0].num_batches(0)
    stop = min(stop, total - 1)
    reference = _global_steps(ranks, total + 3)  # into epoch 1 (all in the last phase)
    first = _ranks(documents, schedule, world=2, batch=4)
    _global_steps(first, stop)
    state = json.loads(json.dumps(first[0].state_dict()))
    assert state["version"] == 3 and state["token"] == stop * 32
    resumed = _ranks(documents, schedule, world=2, batch=4)
    for corpus in resumed:
        corpus.load_state_dict(state)
    _assert_same(_global_steps(resumed, total + 3 - stop), reference[stop:])


@pytest.mark.parametrize(("world", "batch"), [(1, 16), (4, 4)])
def test_elastic_resume_across_the_boundary_keeps_the_global_batches(
    world: int, batch: int
) -> None:
    documents = _documents(np.random.default_rng(7).integers(1, 50, size=60).tolist())
    schedule = BlockSchedule.parse("2:0.5,8")  # 16 x 2 then 4 x 8 tokens a step per 2 ranks
    ranks = _ranks(documents, schedule, world=2, batch=8)
    total = ranks[0].num_batches(0)
    reference = _global_steps(ranks, total)
    switch = next(i for i, step in enumerate(reference) if step[0].block == 8)
    stop = switch - 2
    first = _ranks(documents, schedule, world=2, batch=8)
    _global_steps(first, stop)
    resumed = _ranks(documents, schedule, world=world, batch=batch)
    for corpus in resumed:
        corpus.load_state_dict(first[0].state_dict())
    _assert_same(_global_steps(resumed, total - stop), reference[stop:])


def test_phases_end_in_later_epochs_with_total_tokens() -> None:
    documents = _documents([20, 9, 33, 5, 14, 27])  # 113 targets: 4 global batches of 32
    schedule = BlockSchedule.parse("4:0.75,8", total_tokens=3 * 128)  # three epochs
    (corpus,) = _ranks(documents, schedule, world=1, batch=8)
    assert corpus.epoch_size(0) == 128
    blocks = [[b.block for b in corpus.iter_epoch(e)] for e in range(3)]
    # Phase 0 ends at 288 tokens of the run: in epoch 2, after its first global batch.
    assert blocks == [[4] * 4, [4] * 4, [4, 8, 8, 8]]
    assert corpus.phase_at(2, 32) == (1, 8)
    order = corpus.rank_document_indices(2)
    reference = pack_documents(documents, order, 1, boundary_id=0)
    got = np.concatenate([b.targets[b.loss_mask] for b in corpus.iter_epoch(2)])
    np.testing.assert_array_equal(got, reference.targets[reference.loss_mask])


def test_a_state_of_another_schedule_is_refused_by_name() -> None:
    documents = _documents([20, 9, 33, 5, 14, 27, 40, 3])
    (corpus,) = _ranks(documents, BlockSchedule.parse("4:0.5,8"), world=1, batch=8)
    state = corpus.state_dict()
    (other,) = _ranks(documents, BlockSchedule.parse("4:0.25,8"), world=1, batch=8)
    with pytest.raises(StateMismatchError, match="block_schedule in checkpoint"):
        other.load_state_dict(state)
    (bigger,) = _ranks(documents, BlockSchedule.parse("4:0.5,8"), world=1, batch=4)
    with pytest.raises(StateMismatchError, match="tokens_per_batch in checkpoint: 32"):
        bigger.load_state_dict(state)
    plain = StreamingCorpus(
        documents, rank=0, world_size=1, batch_size=8, block=4, layout="global", boundary_id=0
    )
    with pytest.raises(StateMismatchError, match="version-3"):
        plain.load_state_dict(state)
    with pytest.raises(StateMismatchError, match="version-2"):
        corpus.load_state_dict(plain.state_dict())


def test_a_token_off_the_phase_grid_is_refused() -> None:
    documents = _documents([20, 9, 33, 5, 14, 27, 40, 3])
    (corpus,) = _ranks(documents, BlockSchedule.parse("4:0.5,8"), world=1, batch=8)
    with pytest.raises(ArgumentError, match="resume at a multiple of the 32 tokens"):
        corpus.read(0, 6)


@pytest.mark.parametrize(
    ("phases", "message"),
    [
        ([], "at least one phase"),
        ([(100, 0), (None, 8)], r"phase 0 `block` must be a positive integer. Got 0"),
        ([(100, 4), (None, -8)], r"phase 1 `block` must be a positive integer"),
        ([(100, 4), (50, 8), (None, 16)], "phase 1 `until` 50 is not after phase 0's 100"),
        ([(0.5, 4), (0.5, 8), (None, 16)], "increasing order"),
        ([(100, 4), (0.5, 8), (None, 16)], "every `until` as token counts"),
        ([(1.5, 4), (None, 8)], "strictly between 0 and 1"),
        ([(None, 4), (None, 8)], "phase 0 `until` is missing"),
        ([(100, 4), (200, 8)], "phase 1 is the last"),
        ([(True, 4), (None, 8)], "token count"),
        (["x"], "phase 0 must be a BlockPhase"),
    ],
)
def test_bad_schedules_name_the_phase_and_field(phases: list[Any], message: str) -> None:
    with pytest.raises(ArgumentError, match=message):
        BlockSchedule(phases)


@pytest.mark.parametrize(
    ("text", "message"),
    [("4:abc,8", "phase 0 '4:abc' must read"), ("", "non-empty"), ("4:0.5,x8", "phase 1")],
)
def test_bad_schedule_text(text: str, message: str) -> None:
    with pytest.raises(ArgumentError, match=message):
        BlockSchedule.parse(text)


def test_numpy_numbers_are_read_as_their_kind() -> None:
    counts = BlockSchedule([(np.int64(100), np.int64(4)), (None, 8)])
    assert counts.phases[0] == BlockPhase(4, 100) and type(counts.phases[0].until) is int
    fractions = BlockSchedule([(np.float64(0.5), 4), (None, 8)])
    assert type(fractions.phases[0].until) is float and fractions.phases[0].until == 0.5


def test_parse_reads_batches_and_token_counts() -> None:
    schedule = BlockSchedule.parse("16x2048:1000000,4x8192")
    assert schedule.phases == (BlockPhase(2048, 1000000, 16), BlockPhase(8192, None, 4))
    assert schedule.largest_block == 8192


def test_stream_arguments_that_do_not_fit_the_schedule_are_refused() -> None:
    documents = _documents([20, 9, 33])
    schedule = BlockSchedule.parse("4:0.5,8")

    def build(**kw: Any) -> StreamingCorpus:
        args: dict[str, Any] = {
            "rank": 0,
            "world_size": 1,
            "batch_size": 8,
            "block": 4,
            "layout": "global",
        }
        args.update(kw)
        args.setdefault("block_schedule", schedule)
        return StreamingCorpus(documents, **args)

    # The per-rank layout takes schedules too: tests/data/test_block_schedule_per_rank.py.
    assert build(layout="per-rank").cursor_key == "token"
    with pytest.raises(ArgumentError, match="does not support packing='best_fit'"):
        build(packing="best_fit")
    with pytest.raises(ArgumentError, match="first block"):
        build(block=8)
    with pytest.raises(ArgumentError, match="phase 1 `block` 8 does not cut 4 tokens"):
        build(batch_size=1)
    with pytest.raises(ArgumentError, match="phase 1 `batch_size` 3 with block 8"):
        StreamingCorpus(
            documents,
            rank=0,
            world_size=1,
            batch_size=8,
            block=4,
            layout="global",
            block_schedule=BlockSchedule([(100, 4), (None, 8, 3)]),
        )
    with pytest.raises(ArgumentTypeError, match="must be a BlockSchedule"):
        build(block_schedule="4:0.5,8")


def test_the_torch_dataset_serves_the_phases_unchanged() -> None:
    documents = _documents(np.random.default_rng(3).integers(1, 40, size=40).tolist())
    (corpus,) = _ranks(documents, BlockSchedule.parse("4:0.5,16"), world=1, batch=8)
    reference = [b.as_tuple() for b in corpus.iter_epoch(0)]
    got = list(DataLoader(StreamingDataset(corpus, num_epochs=1), batch_size=None))
    assert len(got) == len(reference) and {r[0].shape[1] for r in reference} == {4, 16}
    for items, expected in zip(got, reference, strict=True):
        for item, array in zip(items, expected, strict=True):
            np.testing.assert_array_equal(item.numpy(), array)
