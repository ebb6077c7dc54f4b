"""Block schedules in the per-rank layout (issue #27, item 1): each rank's own stream in
phases, ``StreamingCorpus(layout="per-rank", block_schedule=...)``.

Every rank switches at the same step (the phases are run tokens, ``K`` per step, the
epochs' steps counted identically on every rank); each rank's epoch comes out exactly
once, every adjacent pair a target once, compared with the brute-force stream of its
share of the order (``tests/data/_reference.py``); resume at any step on either side is
bitwise; a change of shape is refused by name, as in the unscheduled per-rank layout.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from mixle.data import Batch, BlockSchedule, LengthBandit, StreamingCorpus, global_document_order
from mixle.data.torch import StreamingDataset
from mixle.errors import ArgumentError, StateMismatchError
from tests.data._reference import reference_stream
from tests.data.resume_helpers import assert_items_equal


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
    kw.setdefault("boundary_id", 0)
    return [
        StreamingCorpus(
            documents,
            rank=r,
            world_size=world,
            batch_size=batch,
            block=schedule.first_block,
            block_schedule=schedule,
            **kw,
        )
        for r in range(world)
    ]


def _steps(ranks: list[StreamingCorpus], count: int) -> list[list[Batch]]:
    """``count`` steps from the ranks' cursors (across epochs): each rank's batch."""
    iterators = [corpus.batches() for corpus in ranks]
    return [[next(it) for it in iterators] for _ in range(count)]


def _assert_same(a: list[list[Batch]], b: list[list[Batch]]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        for u, v in zip(x, y, strict=True):
            for p, q in zip(u.as_tuple(), v.as_tuple(), strict=True):
                assert p.shape == q.shape and p.dtype == q.dtype
                np.testing.assert_array_equal(p, q)


def _epoch_steps(documents: Sequence[np.ndarray], world: int, tokens: int, epoch: int) -> int:
    """Brute force: the steps of ``epoch`` (every rank's smallest count of ``tokens``
    targets a step), from the reference streams."""
    order = global_document_order(len(documents), seed=0, epoch=epoch)
    counts = []
    for rank in range(world):
        stream = reference_stream(documents, order[rank::world].tolist(), 0)
        counts.append(-(-max(len(stream) - 1, 0) // tokens))
    return min(counts)


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 60), min_size=1, max_size=30),
    blocks=st.lists(st.sampled_from([2, 4, 8, 16]), min_size=1, max_size=3),
    cuts=st.lists(st.integers(1, 12), min_size=2, max_size=2, unique=True),
    slack=st.integers(0, 10**6),
    world=st.integers(1, 4),
    seed=st.integers(0, 3),
    boundary=st.booleans(),
)
def test_every_rank_pair_is_a_target_exactly_once_across_boundaries(
    lengths: list[int],
    blocks: list[int],
    cuts: list[int],
    slack: int,
    world: int,
    seed: int,
    boundary: bool,
) -> None:
    documents = _documents(lengths, seed)
    rank_tokens = 16 * blocks[0]  # R: tokens per rank per step; every block divides it
    tokens = world * rank_tokens  # K
    # Token counts of the run, `slack` past whole steps: rounded down to whole steps.
    steps_until = sorted(cuts)[: len(blocks) - 1]
    until = [c * tokens + slack % tokens for c in steps_until]
    schedule = BlockSchedule([*zip(until, blocks, strict=False), (None, blocks[-1])])
    boundary_id = 0 if boundary else None
    ranks = _ranks(documents, schedule, world, 16, seed=seed, boundary_id=boundary_id)
    before = 0  # steps of the epochs before
    for epoch in (0, 1):  # the boundaries fall in either
        steps = ranks[0].num_batches(epoch)
        assert all(corpus.num_batches(epoch) == steps for corpus in ranks)
        order = global_document_order(len(documents), seed=seed, epoch=epoch)
        per_rank = [list(corpus.iter_epoch(epoch)) for corpus in ranks]
        for rank, batches in enumerate(per_rank):
            share = order[rank::world].tolist()
            stream = np.array(reference_stream(documents, share, boundary_id))
            covered = stream[: steps * rank_tokens + 1]  # even batches: the first steps
            none = np.empty(0, dtype=np.int64)
            got = np.concatenate([none, *(b.targets[b.loss_mask] for b in batches)])
            np.testing.assert_array_equal(got, covered[1:])
            contexts = np.concatenate([none, *(b.context[b.loss_mask] for b in batches)])
            np.testing.assert_array_equal(contexts, covered[:-1])
        for step, parts in enumerate(zip(*per_rank, strict=True)):
            # Every rank in the same phase at every step of the run, R tokens each.
            phase = sum(before + step >= c for c in steps_until)
            assert {b.block for b in parts} == {blocks[phase]}, (epoch, step)
            assert all(b.num_rows * b.block == rank_tokens for b in parts)
            expected = (phase, blocks[phase])
            assert ranks[-1].phase_at(epoch, step * rank_tokens) == expected
        before += steps


def test_phases_count_run_tokens_over_epochs_of_different_steps() -> None:
    # Per-rank epochs differ in steps (each the smallest rank's count): the switch is
    # still at run token 9 x K, the same step on every rank, wherever that epoch begins.
    documents = _documents(np.random.default_rng(5).integers(1, 30, size=23).tolist(), 1)
    world, tokens = 3, 3 * 4 * 4
    schedule = BlockSchedule.parse(f"4:{9 * tokens},8")
    ranks = _ranks(documents, schedule, world, 4)
    counts = [_epoch_steps(documents, world, 16, e) for e in range(4)]
    assert [ranks[0].num_batches(e) for e in range(4)] == counts
    assert len(set(counts)) > 1 and sum(counts[:3]) > 9 > counts[0]
    run = _steps(ranks, sum(counts[:3]))
    blocks = [{b.block for b in step} for step in run]
    assert blocks == [{4}] * 9 + [{8}] * (len(run) - 9)
    epoch = next(e for e in range(4) if sum(counts[: e + 1]) > 9)
    local = (9 - sum(counts[:epoch])) * 16  # the rank's own token of the switch
    assert ranks[1].phase_at(epoch, local) == (1, 8)
    assert ranks[1].phase_at(epoch, local - 16) == (0, 4)


def test_a_fraction_is_of_epoch_zeros_run_tokens() -> None:
    documents = _documents([30, 7, 51, 12, 3, 44, 19, 26, 60, 8] * 3)
    ranks = _ranks(documents, BlockSchedule.parse("4:0.5,16"), 2, 8)
    steps = ranks[0].num_batches(0)
    blocks = [b.block for b in ranks[1].iter_epoch(0)]
    switch = blocks.index(16)
    assert switch == (steps * 64) // 2 // 64 and set(blocks[switch:]) == {16}
    before, after = list(ranks[1].iter_epoch(0))[switch - 1 : switch + 1]
    assert before.targets[-1, -1] == after.context[0, 0]  # the stream continues
    assert {b.num_rows for b in ranks[1].iter_epoch(0)} == {8, 2}
    assert ranks[0].cursor_key == "token" and ranks[0].cursor_step == 32


@settings(max_examples=15, deadline=None)
@given(stop=st.integers(0, 60), seed=st.integers(0, 5), world=st.integers(1, 4))
def test_resume_at_any_step_either_side_is_bitwise(stop: int, seed: int, world: int) -> None:
    documents = _documents(np.random.default_rng(seed).integers(1, 40, size=45).tolist(), seed)
    schedule = BlockSchedule.parse("4:0.4,8:0.9,16", total_tokens=3 * 45 * 20)
    ranks = _ranks(documents, schedule, world, 4)
    total = sum(ranks[0].num_batches(e) for e in range(3))
    stop = min(stop, total - 1)
    reference = _steps(ranks, total)
    first = _ranks(documents, schedule, world, 4)
    _steps(first, stop)
    states = [json.loads(json.dumps(corpus.state_dict())) for corpus in first]
    assert {s["version"] for s in states} == {4}
    resumed = _ranks(documents, schedule, world, 4)
    for corpus, state in zip(resumed, states, strict=True):
        corpus.load_state_dict(state)
    _assert_same(_steps(resumed, total - stop), reference[stop:])


def test_a_shape_change_is_refused_by_name() -> None:
    documents = _documents(np.random.default_rng(2).integers(1, 40, size=40).tolist())
    schedule = BlockSchedule.parse("4:0.5,8")
    two = _ranks(documents, schedule, 2, 8)
    _steps(two, 3)
    state = two[0].state_dict()
    (one,) = _ranks(documents, schedule, 1, 16)  # same tokens per step, another shape
    with pytest.raises(StateMismatchError, match="world_size in checkpoint: 2 / in stream: 1"):
        one.load_state_dict(state)
    with pytest.raises(StateMismatchError, match="layout='global' to resume on another"):
        one.load_state_dict(state)
    other_batch = _ranks(documents, BlockSchedule.parse("2:0.5,8"), 2, 16)[0]
    with pytest.raises(StateMismatchError, match="block in checkpoint"):
        other_batch.load_state_dict(state)
    with pytest.raises(StateMismatchError, match="rank in checkpoint: 0 / in stream: 1"):
        two[1].load_state_dict(state)


def test_states_of_other_streams_are_refused_by_field() -> None:
    documents = _documents([20, 9, 33, 5, 14, 27, 40, 3] * 2)
    (corpus,) = _ranks(documents, BlockSchedule.parse("4:0.5,8"), 1, 8)
    state = corpus.state_dict()
    (other,) = _ranks(documents, BlockSchedule.parse("4:0.25,8"), 1, 8)
    with pytest.raises(StateMismatchError, match="block_schedule in checkpoint"):
        other.load_state_dict(state)
    plain = StreamingCorpus(documents, rank=0, world_size=1, batch_size=8, block=4, boundary_id=0)
    with pytest.raises(StateMismatchError, match=r"version-4 \(per-rank \(block_schedule\)"):
        plain.load_state_dict(state)
    with pytest.raises(StateMismatchError, match="version-1"):
        corpus.load_state_dict(plain.state_dict())
    (global_,) = _ranks(documents, BlockSchedule.parse("4:0.5,8"), 1, 8, layout="global")
    with pytest.raises(StateMismatchError, match="version-4"):
        global_.load_state_dict(state)
    with pytest.raises(StateMismatchError, match="version-3"):
        corpus.load_state_dict(global_.state_dict())
    # A state without a schedule is unchanged: version 1, no schedule field.
    assert plain.state_dict()["version"] == 1
    assert "block_schedule" not in plain.state_dict()["stream"]
    past = dict(state, token=corpus.epoch_size(0) + 32)
    with pytest.raises(StateMismatchError, match="which has only"):
        corpus.load_state_dict(past)


def test_a_token_off_a_step_is_refused() -> None:
    documents = _documents([20, 9, 33, 5, 14, 27, 40, 3] * 2)
    (corpus,) = _ranks(documents, BlockSchedule.parse("4:0.5,8"), 1, 8)
    with pytest.raises(ArgumentError, match="resume at a multiple of the 32 tokens per rank"):
        corpus.read(0, 8)
    corpus.seek(0, 64)
    assert corpus.cursor == (0, 64)
    # The seed's views count steps: batch k is the batch at token k x R.
    np.testing.assert_array_equal(corpus.batch_at(0, 3)[0], corpus.read(0, 96).context)
    assert corpus.advance(0, 0, 2) == (0, 64)


def test_arguments_that_do_not_fit_are_refused_by_name() -> None:
    documents = _documents([20, 9, 33, 5, 14, 27, 40, 3])
    schedule = BlockSchedule.parse("4:0.5,8")

    def build(**kw: Any) -> StreamingCorpus:
        args: dict[str, Any] = {"rank": 0, "world_size": 2, "batch_size": 8, "block": 4}
        args.update(kw)
        return StreamingCorpus(documents, block_schedule=schedule, **args)

    with pytest.raises(ArgumentError, match="needs even_batches=True on more than one rank"):
        build(even_batches=False)
    assert build(even_batches=False, world_size=1).num_batches(0) > 0
    with pytest.raises(ArgumentError, match="does not support packing='best_fit'"):
        build(packing="best_fit")
    with pytest.raises(ArgumentError, match="first block"):
        build(block=8)
    with pytest.raises(ArgumentError, match="phase 1 `block` 8 does not cut 8 tokens"):
        build(batch_size=1)
    bandit = LengthBandit(np.array([len(d) for d in documents]), edges=[10], seed=0)
    with pytest.raises(ArgumentError, match="stateful `sequence_selector`"):
        build(sequence_selector=bandit)
    with pytest.raises(ArgumentError, match="order='blocks' needs a layout"):
        build(order="blocks")


def _every_other(order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    return order[(epoch % 2) :: 2]


def test_a_selector_that_drops_documents_places_every_epoch() -> None:
    # A plain (stateless) selector changes each epoch's documents: the epochs' steps are
    # counted from the selected orders, the same on every rank.
    documents = _documents(np.random.default_rng(4).integers(1, 30, size=40).tolist())
    schedule = BlockSchedule.parse("4:960,8")  # 10 steps of 2 x 48 tokens
    ranks = _ranks(documents, schedule, 2, 12, sequence_selector=_every_other)
    counts = [ranks[0].num_batches(e) for e in range(3)]
    run = _steps(ranks, sum(counts))
    assert [{b.block for b in step} for step in run] == [{4}] * 10 + [{8}] * (len(run) - 10)
    fresh = _ranks(documents, schedule, 2, 12, sequence_selector=_every_other)
    for corpus in fresh:
        corpus.seek(2, 0)
    _assert_same(_steps(fresh, counts[2]), run[sum(counts[:2]) :])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_the_torch_dataset_serves_each_ranks_phases(num_workers: int) -> None:
    documents = _documents(np.random.default_rng(3).integers(1, 40, size=50).tolist())
    schedule = BlockSchedule.parse("4:0.5,16")
    for rank in range(2):
        corpus = _ranks(documents, schedule, 2, 8)[rank]
        reference = [b.as_tuple() for b in corpus.iter_epoch(0)]
        loader = DataLoader(
            StreamingDataset(corpus, num_epochs=1),
            batch_size=None,
            num_workers=num_workers,
            multiprocessing_context="fork" if num_workers else None,
        )
        got = list(loader)
        assert len(got) == len(reference) and {r[0].shape[1] for r in reference} == {4, 16}
        for items, expected in zip(got, reference, strict=True):
            for item, array in zip(items, expected, strict=True):
                np.testing.assert_array_equal(item.numpy(), array)


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")
@pytest.mark.parametrize(("before", "after"), [(2, 0), (0, 2)])
def test_a_stateful_loader_resumes_across_the_switch_with_other_workers(
    before: int, after: int
) -> None:
    documents = _documents(np.random.default_rng(9).integers(1, 40, size=50).tolist())
    schedule = BlockSchedule.parse("4:0.5,16")

    def loader(dataset: StreamingDataset, workers: int) -> StatefulDataLoader:
        return StatefulDataLoader(
            dataset,
            batch_size=None,
            num_workers=workers,
            multiprocessing_context="fork" if workers else None,
        )

    corpus = _ranks(documents, schedule, 2, 8)[1]
    expected = [b.as_tuple() for e in range(2) for b in corpus.iter_epoch(e)]
    taken = corpus.num_batches(0) // 2 + 1  # past the switch
    first = loader(StreamingDataset(_ranks(documents, schedule, 2, 8)[1], num_epochs=2), before)
    iterator = iter(first)
    head = [tuple(t.numpy() for t in next(iterator)) for _ in range(taken)]
    state = first.state_dict()
    del iterator
    assert_items_equal(head, expected[:taken])
    dataset = StreamingDataset(_ranks(documents, schedule, 2, 8)[1], num_epochs=2)
    resumed = loader(dataset, after)
    resumed.load_state_dict(dataset.loader_state_for(state, num_workers=after))
    assert_items_equal([tuple(t.numpy() for t in item) for item in resumed], expected[taken:])


def test_for_current_rank_reads_the_place_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    documents = _documents(np.random.default_rng(6).integers(1, 40, size=30).tolist())
    schedule = BlockSchedule.parse("4:0.5,8")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    corpus = StreamingCorpus.for_current_rank(
        documents, block=4, batch_size=8, block_schedule=schedule, boundary_id=0
    )
    expected = _ranks(documents, schedule, 2, 8)[1]
    assert corpus.rank == 1 and corpus.stream_identity() == expected.stream_identity()
    _assert_same([[b] for b in corpus.iter_epoch(0)], [[b] for b in expected.iter_epoch(0)])


def test_a_plan_store_keeps_the_unplaced_plans_and_resumes_the_same(tmp_path: Path) -> None:
    from mixle.corpus.storage.plan_cache import PlanFiles

    documents = _documents(np.random.default_rng(8).integers(1, 40, size=40).tolist())
    schedule = BlockSchedule.parse("4:1280,8")  # 10 steps of 2 x 64 tokens
    plain = _ranks(documents, schedule, 2, 16)
    total = sum(plain[0].num_batches(e) for e in range(3))
    reference = _steps(plain, total)
    stored = _ranks(documents, schedule, 2, 16, plan_store=PlanFiles(str(tmp_path)))
    _assert_same(_steps(stored, total), reference)
    assert any(tmp_path.iterdir())
    assert {corpus.state_dict()["version"] for corpus in stored} == {4}
    # A restarted process loads the plans (epoch 2's start counts epochs 0 and 1).
    again = _ranks(documents, schedule, 2, 16, plan_store=PlanFiles(str(tmp_path)))
    first = _ranks(documents, schedule, 2, 16)
    _steps(first, 12)
    for corpus, state in zip(again, [c.state_dict() for c in first], strict=True):
        corpus.load_state_dict(state)
    _assert_same(_steps(again, total - 12), reference[12:])
