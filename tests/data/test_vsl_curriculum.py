"""The VSL curricula: plans of bucket batches, the grow_p2 order, O(log) lookups."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.data._vsl_curriculum import grow_p2_odds, plan_curriculum
from mixle.errors import ArgumentError

KEY = (5, 77)


def test_grow_p2_odds_match_olmo_core() -> None:
    # OLMo-core's VSLGrowP2Curriculum._get_bucket_odds_for_cycle for four buckets.
    assert grow_p2_odds(4).tolist() == [[8, 4, 2, 1], [4, 8, 2, 1], [2, 4, 8, 1], [1, 2, 4, 8]]


@settings(max_examples=25, deadline=None)
@given(
    batches=st.lists(st.integers(1, 25), min_size=1, max_size=5),
    curriculum=st.sampled_from(["natural", "grow_p2"]),
    cycles=st.integers(1, 4),
    epoch=st.integers(0, 3),
)
def test_every_batch_of_every_bucket_exactly_once(
    batches: list[int], curriculum: str, cycles: int, epoch: int
) -> None:
    plan = plan_curriculum(curriculum, tuple(batches), key=KEY, num_cycles=cycles)
    assert plan.batches_per_bucket == tuple(batches)
    located = [plan.locate(epoch, i) for i in range(plan.num_batches)]
    assert sorted(located) == sorted((b, j) for b, n in enumerate(batches) for j in range(n))
    ends = np.cumsum(plan.counts.sum(axis=1))
    segments = np.searchsorted(ends, np.arange(plan.num_batches), side="right")
    for bucket in range(len(batches)):  # a segment's ordinals follow the earlier segments'
        pairs = [(int(s), j) for s, (b, j) in zip(segments, located, strict=True) if b == bucket]
        assert [j for _, j in sorted(pairs)] == sorted(j for _, j in pairs)


@settings(max_examples=30, deadline=None)
@given(
    batches=st.lists(st.integers(200, 2000), min_size=2, max_size=5),
    cycles=st.integers(1, 8),
)
def test_grow_p2_grows_from_short_to_long_in_every_cycle(batches: list[int], cycles: int) -> None:
    buckets = len(batches)
    plan = plan_curriculum("grow_p2", tuple(batches), key=KEY, num_cycles=cycles)
    counts = plan.counts.reshape(cycles, buckets, buckets)  # (cycle, sub-cycle, bucket)
    for cycle in counts:
        shortest, longest = cycle[:, 0], cycle[:, -1]
        assert (np.diff(shortest) <= 0).all() and (np.diff(longest) >= 0).all()
        assert [int(np.argmax(cycle[:, k])) for k in range(buckets)] == list(range(buckets))
        mean_bucket = (cycle * np.arange(buckets)).sum(axis=1) / cycle.sum(axis=1)
        assert mean_bucket[-1] > mean_bucket[0]
    # Each bucket spread evenly over the cycles (within one batch).
    per_cycle = counts.sum(axis=1)
    assert (per_cycle.max(axis=0) - per_cycle.min(axis=0) <= 1).all()


def test_grow_p2_located_order_follows_its_plan() -> None:
    plan = plan_curriculum("grow_p2", (240, 120, 60), key=KEY, num_cycles=2)
    start = 0
    for sub in plan.counts[:3]:  # the first cycle's sub-cycles, in order
        located = [plan.locate(1, start + i)[0] for i in range(int(sub.sum()))]
        assert np.bincount(located, minlength=3).tolist() == sub.tolist()
        start += int(sub.sum())
    assert [int(plan.counts[:3, k].argmax()) for k in range(3)] == [0, 1, 2]


def test_natural_interleaves_in_proportion() -> None:
    plan = plan_curriculum("natural", (300, 100), key=KEY)
    first_half = [plan.locate(0, i)[0] for i in range(200)]
    assert 120 < first_half.count(0) < 180  # 3:1 in expectation, shuffled


def test_grow_p2_refuses_an_empty_bucket_by_name() -> None:
    with pytest.raises(ArgumentError, match=r"bucket 1 \(length 64\) has no document pieces"):
        plan_curriculum(
            "grow_p2", (3, 0, 2), key=KEY, bucket_names=("a", "bucket 1 (length 64)", "c")
        )
    assert plan_curriculum("natural", (3, 0, 2), key=KEY).num_batches == 5
