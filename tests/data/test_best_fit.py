"""The best-fit kernel: every document placed once, rows within capacity, both backends alike."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle._gather import numba_available, set_gather_backend
from mixle.data._best_fit import MIN_BLOCK, _stable_order, best_fit_rows, row_budget
from mixle.data._documents import as_documents
from mixle.data._packing import StreamLayout
from mixle.data._plan_best_fit import BestFitRows, epoch_row_bound
from mixle.data._plan_global_best_fit import LayoutWindows
from mixle.errors import ArgumentError


def _check_pieces(lengths: np.ndarray, block: int, rows: int, truncate: bool = False) -> None:
    pieces = best_fit_rows(lengths, block, rows, truncate=truncate)
    assert pieces.rows == rows
    capacity = block + 1
    for r in range(rows):
        low, high = pieces.row_starts[r], pieces.row_starts[r + 1]
        at, length = pieces.at[low:high], pieces.length[low:high]
        assert (at[1:] == at[:-1] + length[:-1]).all()  # packed from slot 0, no gaps
        if high > low:
            assert at[0] == 0 and at[-1] + length[-1] <= capacity
    for document, size in enumerate(lengths.tolist()):
        mine = np.flatnonzero(pieces.item == document)
        if size == 0:
            assert mine.size == 0
            continue
        begin, length = pieces.begin[mine], pieces.length[mine]
        order = np.argsort(begin)
        begin, length = begin[order], length[order]
        assert begin[0] == 0
        # Consecutive pieces share one token: every adjacent pair is a target once.
        assert (begin[1:] == begin[:-1] + length[:-1] - 1).all()
        end = min(size, capacity) if truncate else size
        assert begin[-1] + length[-1] == end


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 40), min_size=1, max_size=60),
    st.integers(MIN_BLOCK, 17),
    st.integers(0, 3),
)
def test_every_document_is_placed_once_within_the_budget(
    lengths: list[int], block: int, extra: int
) -> None:
    array = np.array(lengths, dtype=np.int64)
    _check_pieces(array, block, row_budget(int(array.sum()), block) + extra)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=40), st.integers(MIN_BLOCK, 17))
def test_truncation_keeps_each_document_in_one_row(lengths: list[int], block: int) -> None:
    array = np.array(lengths, dtype=np.int64)
    _check_pieces(array, block, row_budget(int(np.minimum(array, block + 1).sum()), block), True)
    pieces = best_fit_rows(array, block, row_budget(int(array.sum()), block), truncate=True)
    assert pieces.truncated_tokens == int(np.maximum(array - block - 1, 0).sum())


def test_only_documents_longer_than_a_row_are_cut_on_a_log_normal_mix() -> None:
    rng = np.random.default_rng(0)
    lengths = np.maximum(rng.lognormal(np.log(500), 1.1, 4096).astype(np.int64), 1)
    block = 2048
    rows = row_budget(int(lengths.sum()), block)
    pieces = best_fit_rows(lengths, block, rows)
    assert pieces.cut_documents == int((lengths > block + 1).sum())
    assert 1 - pieces.used_slots / (rows * (block + 1)) < 0.005


def test_the_row_with_the_least_room_that_fits_takes_an_item() -> None:
    # Rows 0, 1, 2 take 6, 5, 4 first (longest first); free 2, 3, 4: the 3 goes to row 1.
    pieces = best_fit_rows(np.array([6, 3, 5, 4]), 7, 3)
    assert pieces.row_starts.tolist() == [0, 1, 3, 4]
    assert pieces.item.tolist() == [0, 2, 1, 3]


@pytest.mark.skipif(not numba_available(), reason="needs numba (mixle[fast])")
def test_numba_and_numpy_backends_give_the_same_pieces() -> None:
    rng = np.random.default_rng(1)
    lengths = rng.integers(0, 300, 2000)
    rows = row_budget(int(lengths.sum()), 128)
    reference = best_fit_rows(lengths, 128, rows)
    previous = set_gather_backend("numba")
    try:
        compiled = best_fit_rows(lengths, 128, rows)
    finally:
        set_gather_backend(previous)
    for name in ("row_starts", "item", "begin", "length", "at"):
        assert np.array_equal(getattr(reference, name), getattr(compiled, name)), name


def test_rows_wider_than_16_bits_are_packed_alike() -> None:
    # Blocks of 2**16 slots and more sort their sizes without the 16-bit radix key.
    lengths = np.array([70_000, 150_000, 3, 69_999, 0, 12], dtype=np.int64)
    block = 70_000
    _check_pieces(lengths, block, row_budget(int(lengths.sum()), block))


@pytest.mark.parametrize("bound", [2**10, 2**20, 2**40])
def test_the_row_grouping_is_a_stable_sort(bound: int) -> None:
    keys = np.random.default_rng(bound).integers(0, bound, 5000, dtype=np.int64)
    keys[::7] = keys[0]  # ties keep their order
    assert np.array_equal(_stable_order(keys, bound), np.argsort(keys, kind="stable"))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 500), min_size=1, max_size=30), st.integers(MIN_BLOCK, 64))
def test_no_split_of_the_slots_budgets_more_rows_than_the_bound(
    slots: list[int], block: int
) -> None:
    budgets = sum(row_budget(s, block) for s in slots)
    assert budgets <= epoch_row_bound(sum(slots), len(slots), block)


def test_a_fixed_epoch_row_count_below_the_budgets_is_refused() -> None:
    lengths = np.array([30, 5, 17, 40, 2], dtype=np.int64)
    layout = StreamLayout.build(np.arange(5), lengths, False)
    windows = LayoutWindows(layout, 2)
    rows = BestFitRows(windows, block=8, has_boundary=False, seed=0, epoch=0)
    more = BestFitRows(
        windows, block=8, has_boundary=False, seed=0, epoch=0, epoch_rows=rows.rows + 3
    )
    assert more.rows == rows.rows + 3 and more.window_rows(2) == rows.window_rows(2) + 3
    with pytest.raises(ArgumentError, match="`epoch_rows` must be at least"):
        BestFitRows(windows, block=8, has_boundary=False, seed=0, epoch=0, epoch_rows=rows.rows - 1)


def test_read_rows_count_their_targets_and_pad_past_their_pieces() -> None:
    rng = np.random.default_rng(5)
    documents = [rng.integers(1, 100, int(n)) for n in rng.integers(0, 40, 30)]
    lengths = np.array([len(d) for d in documents], dtype=np.int64)
    layout = StreamLayout.build(np.arange(30), lengths, True)
    rows = BestFitRows(LayoutWindows(layout, 7), block=12, has_boundary=True, seed=1, epoch=0)
    source = as_documents(documents)
    for first, count in ((0, 3), (4, 9), (5, 13), (rows.rows - 2, 5), (0, rows.rows + 2)):
        read = rows.read(source, first, count, pad_id=-7, boundary_id=0, with_ids=True)
        assert read.real == int(read.mask.sum())
        per_row = np.concatenate([[0], np.cumsum(read.mask.sum(axis=1))])
        np.testing.assert_array_equal(read.trained_before, per_row)
        assert read.document_ids is not None
        padding = read.document_ids < 0
        assert (read.rows[:, :-1][padding] == -7).all() and not read.mask[padding].any()
