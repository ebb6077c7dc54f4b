"""``Mixture``: per-source packing, global batches, resume, phases, budgets, accounting."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from mixle.data import Mixture, MixturePhase, MixtureSource, pack_documents
from mixle.data._mixture_source import source_seed
from mixle.data._order import global_document_order
from mixle.errors import ArgumentError, ArgumentTypeError, StateMismatchError
from tests.data.resume_helpers import (
    assert_items_equal,
    assert_resumes_at_every_step,
    assert_resumes_on_two_ranks,
)

BLOCK = 8


def _docs(seed: int, count: int, low: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(low, low + 100, int(rng.integers(1, 40))) for _ in range(count)]


WEB, CODE, MATH = _docs(1, 40, 0), _docs(2, 9, 100), _docs(3, 4, 200)


def _mixture(
    *, weights: tuple[float, float, float] = (0.6, 0.3, 0.1), web: object = WEB, **kwargs: object
) -> Mixture:
    options: dict[str, object] = {"block": BLOCK, "batch_size": 3, "boundary_id": 999, "seed": 5}
    options.update(kwargs)
    sources = [
        MixtureSource(web, weights[0], "web"),
        MixtureSource(CODE, weights[1], "code"),
        MixtureSource(MATH, weights[2], "math"),
    ]
    return Mixture(sources, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "options", [{"order": "permutation"}, {"block_documents": 4, "window_blocks": 1}]
)
def test_each_source_is_its_own_packed_stream_reshuffled_every_epoch(
    options: dict[str, object],
) -> None:
    mixture = _mixture(document_ids=True, **options)
    rows = 600
    context, targets, mask, doc_ids, _, sources = mixture.rows_at(0, rows)
    for index, (name, docs) in enumerate((("web", WEB), ("code", CODE), ("math", MATH))):
        mine = np.flatnonzero(sources == index)
        per_epoch = mixture.rows[index].rows_per_epoch
        seed = source_seed(5, name, mixture.rows[index].fingerprint)
        orders = []
        for epoch in range(-(-len(mine) // per_epoch)):
            if options.get("order") == "permutation":
                order = global_document_order(len(docs), seed=seed, epoch=epoch)
            else:  # the blocks order: every document once
                order = mixture.rows[index].layout(epoch).document_order()
                assert sorted(order.tolist()) == list(range(len(docs)))
            orders.append(order.tolist())
            packed = pack_documents(docs, order, BLOCK, boundary_id=999)
            part = mine[epoch * per_epoch : (epoch + 1) * per_epoch]
            n = len(part)
            assert_items_equal(context[part], packed.context[:n])
            assert_items_equal(targets[part], packed.targets[:n])
            assert_items_equal(mask[part], packed.loss_mask[:n])
            assert set(doc_ids[part][mask[part]].tolist()) <= set(order.tolist())
        if len(orders) > 1:  # upsampled by reshuffled repeats (a 4-document source's
            # two epochs can agree by chance, 1 in 24: six cannot, but 1 in 24**5)
            if options.get("order") == "permutation":
                epochs = [global_document_order(len(docs), seed=seed, epoch=e) for e in range(6)]
            else:
                epochs = [mixture.rows[index].layout(e).document_order() for e in range(6)]
            assert len({tuple(order.tolist()) for order in epochs}) > 1


@pytest.mark.parametrize("objective", ["packed", "windows"])
def test_concatenation_over_ranks_is_the_same_for_every_world_size(objective: str) -> None:
    whole = _mixture(batch_size=12, objective=objective).batch_at_row(36)
    for world_size, batch_size in ((2, 6), (3, 4), (4, 3), (12, 1)):
        parts = [
            _mixture(
                rank=r, world_size=world_size, batch_size=batch_size, objective=objective
            ).batch_at_row(36)
            for r in range(world_size)
        ]
        assert_items_equal(tuple(np.concatenate(p) for p in zip(*parts, strict=True)), whole)


@pytest.mark.parametrize("objective", ["packed", "windows"])
def test_resumes_at_every_step_and_with_another_world_size(objective: str) -> None:
    assert_resumes_at_every_step(lambda: _mixture(objective=objective), steps=25)
    assert_resumes_on_two_ranks(lambda **kw: _mixture(objective=objective, **kw), skip=7)


def test_resume_is_constant_time_in_the_row() -> None:
    mixture = _mixture()
    far = 10**15
    mixture.load_state_dict({**mixture.state_dict(), "row": far})
    assert mixture.cursor == (0, far)
    batch = next(iter(mixture))
    assert batch[0].shape == (3, BLOCK)


def test_phase_boundary_continues_every_source_exactly() -> None:
    plain = _mixture()
    phased = _mixture(phases=[MixturePhase(40, {"web": 0.1, "math": 0.9})])
    head = plain.rows_at(0, 40)
    assert_items_equal(phased.rows_at(0, 40), head)
    counts = plain.schedule.counts_before(40)
    tail = phased.rows_at(40, 140)
    sources = tail[-1]
    assert 1 not in sources.tolist()  # "code" left out of the phase: weight 0
    for index in (0, 2):
        used = int(np.count_nonzero(sources == index))
        own = phased.rows[index].read(int(counts[index]), used, False)
        assert_items_equal(tail[0][sources == index], own[0][:, :-1])
    accounts = phased.accounting(140)
    assert [a.rows for a in accounts] == [
        int(counts[0]) + int(np.count_nonzero(sources == 0)),
        int(counts[1]),
        int(counts[2]) + int(np.count_nonzero(sources == 2)),
    ]


def test_weights_change_between_runs_only_by_appending_a_phase() -> None:
    first = _mixture()
    first.seek(30)
    state = first.state_dict()
    resumed = _mixture(phases=[(30, {"web": 1, "code": 1})])
    resumed.load_state_dict(state)
    assert resumed.cursor == (0, 30)
    with pytest.raises(StateMismatchError, match="phases"):
        _mixture(phases=[(29, {"web": 1})]).load_state_dict(state)  # starts before the row
    with pytest.raises(StateMismatchError, match="phases in checkpoint"):
        _mixture(weights=(0.5, 0.4, 0.1)).load_state_dict(state)
    with pytest.raises(StateMismatchError, match="source 'web' fingerprint"):
        _mixture(web=WEB[:-1]).load_state_dict(state)


def test_budget_raises_before_training_naming_source_epochs_and_maximum() -> None:
    sources = [MixtureSource(WEB, 0.5, "web"), MixtureSource(MATH, 0.5, "math", max_epochs=2)]
    mixture = Mixture(sources, block=BLOCK, batch_size=4)
    per_epoch = mixture.rows[1].rows_per_epoch
    fine = mixture.check_budget(rows=4 * per_epoch)
    assert fine[1].rows == 2 * per_epoch and fine[1].epochs == 2.0
    assert fine[0].tokens == mixture.rows[0].real_tokens(2 * per_epoch)
    with pytest.raises(ArgumentError, match=r"source 'math' needs 2\.\d+ epochs.*max_epochs is 2"):
        mixture.check_budget(rows=4 * per_epoch + 2)
    assert mixture.run_rows(tokens=81) == 11
    assert mixture.run_rows(steps=3) == 12


def test_accounting_matches_the_rows_produced() -> None:
    mixture = _mixture(phases=[(50, {"web": 1, "code": 3, "math": 1})])
    for row in (0, 1, 49, 50, 51, 333):
        accounts = mixture.accounting(row)
        _, _, mask, sources = mixture.rows_at(0, row)
        real = [int(mask[sources == i].sum()) for i in range(3)]
        assert [a.rows for a in accounts] == [int(np.count_nonzero(sources == i)) for i in range(3)]
        assert [a.real_tokens for a in accounts] == real
        total = sum(real)
        for account, tokens in zip(accounts, real, strict=True):
            assert math.isclose(account.realised_share, tokens / total if total else 0.0)
            assert abs(account.target_share * row - account.rows) < 2  # within a row per phase
        epochs = [
            -(-a.rows // r.rows_per_epoch) for a, r in zip(accounts, mixture.rows, strict=True)
        ]
        assert [a.epochs_started for a in accounts] == epochs


@pytest.mark.parametrize(
    ("weights", "error", "match"),
    [
        ((-1.0, 1.0), ArgumentError, "weight of source 'a' must be a finite number >= 0"),
        ((math.nan, 1.0), ArgumentError, "weight of source 'a'"),
        (("0.5", 1.0), ArgumentTypeError, "weight of source 'a' must be a number"),
        ((True, 1.0), ArgumentTypeError, "weight of source 'a' must be a number"),
        ((0.0, 0.0), ArgumentError, "all zero"),
    ],
)
def test_bad_weights_raise_naming_the_source(
    weights: tuple[object, object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        Mixture(
            [MixtureSource(WEB, weights[0], "a"), MixtureSource(CODE, weights[1], "b")],  # type: ignore[arg-type]
            block=BLOCK,
        )


def test_bad_sources_and_phases_raise_before_any_batch() -> None:
    with pytest.raises(ArgumentError, match="source name 'a' is used twice"):
        Mixture([MixtureSource(WEB, 1, "a"), MixtureSource(CODE, 1, "a")], block=BLOCK)
    with pytest.raises(ArgumentError, match="source 'empty' is empty"):
        Mixture(
            [MixtureSource(WEB, 1, "a"), MixtureSource([np.array([1])], 1, "empty")], block=BLOCK
        )
    sources = [MixtureSource(WEB, 1, "a"), MixtureSource(CODE, 1, "b")]
    with pytest.raises(
        ArgumentError, match="phase 2 starts at row 10, not after the previous phase"
    ):
        Mixture(sources, block=BLOCK, phases=[(20, {"a": 1}), (10, {"b": 1})])
    with pytest.raises(ArgumentError, match="phase 1 starts at row 0"):
        Mixture(sources, block=BLOCK, phases=[(0, {"a": 1})])
    with pytest.raises(ArgumentError, match="unknown source 'c'"):
        Mixture(sources, block=BLOCK, phases=[(5, {"c": 1})])
    with pytest.raises(ArgumentError, match=r"phase 1 \(from row 5\) are all zero"):
        Mixture(sources, block=BLOCK, phases=[(5, {"a": 0})])
    with pytest.raises(ArgumentError, match="max_epochs of source 'a'"):
        MixtureSource(WEB, 1, "a", max_epochs=0)


def test_iteration_is_deterministic_across_instances() -> None:
    first = list(itertools.islice(iter(_mixture()), 10))
    again = list(itertools.islice(iter(_mixture()), 10))
    assert_items_equal(first, again)
