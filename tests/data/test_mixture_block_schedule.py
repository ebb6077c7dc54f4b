"""``Mixture(block_schedule=...)`` (issue #27, item 1, mixtures): context length per phase.

Every source counts its own tokens: across the switch, every adjacent token pair of
each source epoch is a target exactly once, in order, compared with the brute-force
stream of the source's epoch orders; the schedule still assigns every global row the
source it assigns without a block schedule; resume at any step on either side is
bitwise; elastic shapes of the same tokens per global batch continue the same global
batches; another schedule's state (or a state of none) is refused by name.
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

from mixle.data import Batch, BlockSchedule, Mixture, MixturePhase, MixtureSource
from mixle.data._mixture_source import source_seed
from mixle.data._order import global_document_order
from mixle.errors import ArgumentError, StateMismatchError
from tests.data._reference import reference_stream

PAD = 7777


def _documents(lengths: Sequence[int], seed: int, low: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(low, low + 500, size=n, dtype=np.int64) for n in lengths]


WEB = _documents([30, 7, 51, 12, 3, 44, 19, 26, 60, 8, 15, 33], 1, 1)
CODE = _documents([9, 40, 2, 17, 25], 2, 1000)
MATH = _documents([5, 11, 3], 3, 2000)


def _mixture(
    schedule: BlockSchedule | None,
    *,
    world: int = 1,
    rank: int = 0,
    batch: int = 8,
    sources: Sequence[Sequence[np.ndarray]] = (WEB, CODE, MATH),
    weights: Sequence[float] = (0.6, 0.3, 0.1),
    **kw: Any,
) -> Mixture:
    names = ["web", "code", "math"]
    kw.setdefault("block", 4 if schedule is None else schedule.first_block)
    return Mixture(
        [MixtureSource(d, w, n) for d, w, n in zip(sources, weights, names, strict=False)],
        batch_size=batch,
        rank=rank,
        world_size=world,
        boundary_id=0,
        pad_id=PAD,
        seed=3,
        block_schedule=schedule,
        **kw,
    )


def _ranks(schedule: BlockSchedule, world: int, batch: int, **kw: Any) -> list[Mixture]:
    return [_mixture(schedule, world=world, rank=r, batch=batch, **kw) for r in range(world)]


def _global_steps(ranks: list[Mixture], count: int) -> list[Batch]:
    """``count`` global batches from the ranks' cursors: the ranks' parts end to end."""
    iterators = [m.batches() for m in ranks]
    steps = []
    for _ in range(count):
        parts = [next(it) for it in iterators]
        steps.append(
            Batch(
                np.concatenate([p.context for p in parts]),
                np.concatenate([p.targets for p in parts]),
                np.concatenate([p.loss_mask for p in parts]),
                source_ids=np.concatenate([p.source_ids for p in parts]),
            )
        )
    return steps


def _assert_same(a: list[Batch], b: list[Batch]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        for u, v in zip(x.as_tuple(), y.as_tuple(), strict=True):
            assert u.shape == v.shape and u.dtype == v.dtype
            np.testing.assert_array_equal(u, v)


def _source_pairs(steps: list[Batch], source: int) -> tuple[np.ndarray, np.ndarray]:
    """The (input, target) pairs the source's rows train, in row order."""
    contexts, targets = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    for step in steps:
        for j in np.flatnonzero(step.source_ids == source):
            mask = step.loss_mask[j]
            assert mask.any()  # no row of a source is all padding
            assert mask[: mask.sum()].all()  # padding only at the row's end
            assert (step.targets[j][~mask] == PAD).all()
            contexts.append(step.context[j][mask])
            targets.append(step.targets[j][mask])
    return np.concatenate(contexts), np.concatenate(targets)


def _reference_pairs(
    mixture: Mixture, source: int, documents: Sequence[np.ndarray], count: int
) -> tuple[np.ndarray, np.ndarray]:
    """The first ``count`` adjacent pairs of the source's epochs, built one token at a time."""
    contexts: list[int] = []
    targets: list[int] = []
    epoch = 0
    while len(targets) < count:
        order = mixture.rows[source].base.layout(epoch).document_order()  # type: ignore[attr-defined]
        stream = reference_stream(documents, order.tolist(), 0)
        contexts += stream[:-1]
        targets += stream[1:]
        epoch += 1
    return np.array(contexts[:count], np.int64), np.array(targets[:count], np.int64)


def test_the_second_phase_continues_every_source_in_longer_rows() -> None:
    schedule = BlockSchedule.parse("4:256,16")  # 8 x 4 tokens a step, then 2 x 16
    mixture = _mixture(schedule)
    steps = _global_steps([mixture], 16)
    assert [s.block for s in steps] == [4] * 8 + [16] * 8
    assert {s.num_rows * s.block for s in steps} == {32}
    assert mixture.state_dict()["token"] == 16 * 32 and mixture.state_dict()["version"] == 3
    # Phase 0 is the mixture without a schedule, bitwise.
    _assert_same(steps[:8], _global_steps([_mixture(None)], 8))
    # Every global row keeps the source the schedule gives it without a block schedule.
    rows = np.concatenate([s.source_ids for s in steps])
    np.testing.assert_array_equal(rows, mixture.schedule.lookup(np.arange(len(rows)))[0])
    for source, documents in enumerate((WEB, CODE, MATH)):
        got = _source_pairs(steps, source)
        expected = _reference_pairs(mixture, source, documents, len(got[1]))
        np.testing.assert_array_equal(got[0], expected[0])
        np.testing.assert_array_equal(got[1], expected[1])
    assert mixture.phase_at(0, 224) == (0, 4) and mixture.phase_at(0, 256) == (1, 16)
    assert mixture.largest_block == 16 and mixture.cursor_row(256 + 32) == 64 + 2


@settings(max_examples=30, deadline=None)
@given(
    lengths=st.lists(st.lists(st.integers(2, 50), min_size=1, max_size=12), min_size=1, max_size=3),
    weights=st.lists(st.integers(1, 5), min_size=3, max_size=3),
    blocks=st.lists(st.sampled_from([2, 4, 8, 16]), min_size=1, max_size=3),
    cuts=st.lists(st.integers(1, 12), min_size=2, max_size=2, unique=True),
    world=st.sampled_from([1, 2]),
    seed=st.integers(0, 3),
)
def test_every_source_pair_is_a_target_exactly_once_across_switches(
    lengths: list[list[int]],
    weights: list[int],
    blocks: list[int],
    cuts: list[int],
    world: int,
    seed: int,
) -> None:
    sources = [_documents(n, seed + i, 1000 * i + 1) for i, n in enumerate(lengths)]
    tokens = world * 16 * blocks[0]  # tokens per global batch: every block divides it
    until = [c * tokens for c in sorted(cuts)[: len(blocks) - 1]]
    schedule = BlockSchedule([*zip(until, blocks, strict=False), (None, blocks[-1])])
    ranks = _ranks(schedule, world, 16, sources=sources, weights=weights[: len(sources)])
    count = (until[-1] // tokens if until else 0) + 6
    steps = _global_steps(ranks, count)
    for step in steps:
        assert step.num_rows * step.block == tokens
    for source, documents in enumerate(sources):
        got = _source_pairs(steps, source)
        expected = _reference_pairs(ranks[0], source, documents, len(got[1]))
        np.testing.assert_array_equal(got[0], expected[0])
        np.testing.assert_array_equal(got[1], expected[1])
    # The accounting's real targets are the pairs trained, in closed form.
    row = ranks[0].cursor_row(count * tokens)
    for source, account in enumerate(ranks[0].accounting(row)):
        assert account.real_tokens == len(_source_pairs(steps, source)[1])


def test_permutation_sources_follow_their_seed_orders() -> None:
    mixture = _mixture(BlockSchedule.parse("4:128,8"), order="permutation")
    for index, documents in enumerate((WEB, CODE, MATH)):
        rows = mixture.rows[index]
        seed = source_seed(3, rows.name, rows.fingerprint)
        for epoch in range(3):
            order = global_document_order(len(documents), seed=seed, epoch=epoch)
            layout = rows.base.layout(epoch)  # type: ignore[attr-defined]
            np.testing.assert_array_equal(layout.document_order(), order)
    steps = _global_steps([mixture], 30)
    got = _source_pairs(steps, 2)
    expected = _reference_pairs(mixture, 2, MATH, len(got[1]))
    np.testing.assert_array_equal(got[1], expected[1])


@settings(max_examples=15, deadline=None)
@given(stop=st.integers(0, 24))
def test_resume_at_any_step_either_side_is_bitwise(stop: int) -> None:
    schedule = BlockSchedule.parse("2:0.3,4:0.6,16", total_tokens=24 * 32)
    reference = _global_steps(_ranks(schedule, 2, 8), 28)
    first = _ranks(schedule, 2, 8)
    _global_steps(first, stop)
    state = json.loads(json.dumps(first[0].state_dict()))
    assert state["version"] == 3 and state["token"] == stop * 32
    resumed = _ranks(schedule, 2, 8)
    for mixture in resumed:
        mixture.load_state_dict(state)
    _assert_same(_global_steps(resumed, 28 - stop), reference[stop:])


@pytest.mark.parametrize(("world", "batch"), [(1, 16), (4, 4)])
def test_elastic_resume_across_the_boundary_keeps_the_global_batches(
    world: int, batch: int
) -> None:
    schedule = BlockSchedule.parse("2:320,8")  # 2 x 8 rows of 2 tokens, then 2 x 2 of 8
    reference = _global_steps(_ranks(schedule, 2, 8), 20)
    first = _ranks(schedule, 2, 8)
    _global_steps(first, 8)
    resumed = _ranks(schedule, world, batch)
    for mixture in resumed:
        mixture.load_state_dict(first[1].state_dict())
    _assert_same(_global_steps(resumed, 12), reference[8:])


def test_read_and_next_cursor_place_any_step() -> None:
    schedule = BlockSchedule.parse("4:256,16")
    reference = _global_steps([_mixture(schedule)], 12)
    whole = _mixture(schedule)
    for step in range(12):
        _, token = whole.next_cursor(0, 0, step)  # type: ignore[misc]
        _assert_same(
            [whole.read(0, token).replace(source_ids=reference[step].source_ids)], [reference[step]]
        )
    with pytest.raises(ArgumentError, match="multiple of the 32 tokens"):
        whole.read(0, 16)
    with pytest.raises(ArgumentError, match="span block schedule phases 0 and 1"):
        whole.read_rows(60, 70)


def test_weight_phases_and_block_phases_coexist() -> None:
    schedule = BlockSchedule.parse("4:256,16")
    phases = [MixturePhase(40, {"web": 1.0}), MixturePhase(70, {"code": 1.0})]
    mixture = _mixture(schedule, phases=phases)
    steps = _global_steps([mixture], 12)
    rows = np.concatenate([s.source_ids for s in steps])
    assert (rows[40:64] == 0).all() and (rows[64:70] == 0).all() and (rows[70:] == 1).all()
    for source, documents in enumerate((WEB, CODE)):
        got = _source_pairs(steps, source)
        expected = _reference_pairs(mixture, source, documents, len(got[1]))
        np.testing.assert_array_equal(got[1], expected[1])
    # A phase appended after the saved cursor still resumes (as without a schedule).
    state = _mixture(schedule, phases=phases[:1]).state_dict()
    mixture.load_state_dict(state)


def test_a_state_of_another_schedule_or_of_none_is_refused_by_name() -> None:
    mixture = _mixture(BlockSchedule.parse("4:256,16"))
    state = mixture.state_dict()
    other = _mixture(BlockSchedule.parse("4:128,16"))
    with pytest.raises(StateMismatchError, match="block_schedule in checkpoint"):
        other.load_state_dict(state)
    with pytest.raises(StateMismatchError, match="block_schedule in checkpoint: None"):
        mixture.load_state_dict(_mixture(None).state_dict())
    with pytest.raises(StateMismatchError, match="block_schedule in stream: None"):
        _mixture(None).load_state_dict(state)
    bigger = _mixture(BlockSchedule.parse("4:256,16"), batch=4)
    with pytest.raises(StateMismatchError, match="tokens_per_batch in checkpoint: 32"):
        bigger.load_state_dict(state)
    off_grid = {**state, "token": 40}
    with pytest.raises(StateMismatchError, match="`token` 40 is not a multiple"):
        mixture.load_state_dict(off_grid)


def test_no_schedule_keeps_the_old_state() -> None:
    state = _mixture(None).state_dict()
    assert state["version"] == 2 and "row" in state
    assert "block_schedule" not in state["stream"] and "tokens_per_batch" not in state["stream"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"objective": "windows"}, "does not support objective='windows'"),
        ({"packing": "best_fit"}, "does not support packing='best_fit'"),
        ({"block": 8}, r"`block` must be the block schedule's first block \(4\)"),
    ],
)
def test_unsupported_mixtures_are_refused_by_name(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ArgumentError, match=message):
        _mixture(BlockSchedule.parse("4:256,16"), **options)


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        (BlockSchedule.parse("4:0.5,16"), "phase 0 `until` is a fraction .* no `total_tokens`"),
        (BlockSchedule.parse("4:20,16"), "phase 0 ends at token 20 .* holds no whole global"),
        (BlockSchedule.parse("4:256,64"), "phase 1 `block` 64 does not cut 32 tokens"),
        (BlockSchedule.parse("8x4:256,4x16"), "phase 1 `batch_size` 4 with block 16"),
    ],
)
def test_bad_schedules_are_refused_naming_the_phase(schedule: BlockSchedule, message: str) -> None:
    with pytest.raises(ArgumentError, match=message):
        _mixture(schedule)
    with pytest.raises(ArgumentError, match="block schedule phase 1 `block` must be a positive"):
        BlockSchedule.parse("4:256,0")


def test_budget_counts_the_phases() -> None:
    mixture = _mixture(BlockSchedule.parse("4:256,16"))
    steps = _global_steps([_mixture(BlockSchedule.parse("4:256,16"))], 20)
    budget = mixture.budget(steps=20)
    for source, entry in enumerate(budget):
        assert entry.rows == int(sum((s.source_ids == source).sum() for s in steps))
        assert entry.tokens == len(_source_pairs(steps, source)[1])
    assert mixture.run_rows(steps=20) == 64 + 12 * 2
    limited = Mixture(
        [MixtureSource(WEB, 0.6, "web"), MixtureSource(MATH, 0.4, "math", max_epochs=2)],
        block=4,
        batch_size=8,
        boundary_id=0,
        block_schedule=BlockSchedule.parse("4:256,16"),
    )
    with pytest.raises(ArgumentError, match="source 'math' needs"):
        limited.check_budget(steps=40)


def test_the_torch_dataset_serves_the_phases_with_two_workers() -> None:
    from torch.utils.data import DataLoader

    from mixle.data.torch import StreamDataset

    schedule = BlockSchedule.parse("4:128,16")
    reference = [b.as_tuple() for b in itertools.islice(_mixture(schedule).batches(), 10)]
    loader = DataLoader(StreamDataset(_mixture(schedule)), batch_size=None, num_workers=2)
    got = list(itertools.islice(iter(loader), 10))
    assert {r[0].shape[1] for r in reference} == {4, 16}
    for items, expected in zip(got, reference, strict=True):
        for item, array in zip(items, expected, strict=True):
            np.testing.assert_array_equal(item.numpy(), array)


@settings(max_examples=6, deadline=None)
@given(
    blocks=st.lists(st.sampled_from([2, 4, 8]), min_size=2, max_size=3),
    cuts=st.lists(st.integers(1, 6), min_size=2, max_size=2, unique=True),
)
def test_sightings_tile_every_document_once_an_epoch_in_the_rows_read(
    blocks: list[int], cuts: list[int]
) -> None:
    from mixle.data import sightings

    tokens = 2 * 4 * blocks[0]
    until = [c * tokens for c in sorted(cuts)[: len(blocks) - 1]]
    schedule = BlockSchedule([*zip(until, blocks, strict=False), (None, blocks[-1])])
    ranks = _ranks(schedule, 2, 4)
    mixture = ranks[0]
    for source, documents in enumerate((WEB, CODE, MATH)):
        for document, values in enumerate(documents):
            for epoch in (0, 1):
                found = sightings(mixture, document, epochs=[epoch], source=source)
                spans = sorted((s.start, s.stop) for s in found)
                assert spans, (source, document, epoch)
                # Contiguous, no overlap, to the document's end (the epoch stream's
                # first token is never a target).
                assert spans[0][0] in (0, 1) and spans[-1][1] == len(values)
                assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
                for s in found[:3]:
                    batch = ranks[s.rank].read(0, (s.step - 1) * tokens)
                    row = s.row
                    assert batch.source_ids[row] == source
                    targets = batch.targets[row][batch.loss_mask[row]].tolist()
                    piece = values[s.start : s.stop].tolist()
                    assert any(targets[k : k + len(piece)] == piece for k in range(len(targets)))
