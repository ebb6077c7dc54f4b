"""The exact mixture schedule: every prefix within one row of its share, O(1) lookups."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from mixle.data._schedule import MixtureSchedule, WeightSchedule, round_weights


def _max_deviation(schedule: WeightSchedule, rows: int) -> float:
    sources = schedule.sources_between(0, rows)
    onehot = np.zeros((rows, len(schedule.counts)), dtype=np.int64)
    onehot[np.arange(rows), sources] = 1
    counts = onehot.cumsum(axis=0)
    shares = np.array(schedule.counts, dtype=np.float64) / schedule.period
    prefix = np.arange(1, rows + 1, dtype=np.float64)[:, None]
    return float(np.abs(counts - prefix * shares).max())


def _check_prefixes(weights: list[float]) -> WeightSchedule:
    schedule = WeightSchedule.build(weights)
    rows = min(2 * schedule.period + 17, 140_000)
    assert _max_deviation(schedule, rows) < 1.0
    for source in range(len(weights)):
        for t in (0, 1, schedule.period - 1, schedule.period, rows):
            assert schedule.count(source, t) == int(
                np.count_nonzero(schedule.sources_between(0, t) == source)
            )
    return schedule


@given(
    st.lists(
        st.one_of(st.floats(min_value=1e-6, max_value=1e3), st.integers(1, 1000)),
        min_size=1,
        max_size=20,
    )
)
def test_every_prefix_is_within_one_row_of_its_share(weights: list[float]) -> None:
    _check_prefixes(weights)


def test_extreme_weights_and_twenty_sources() -> None:
    schedule = _check_prefixes([0.999, 0.001])
    assert schedule.counts == (999, 1)  # exact: no rounding
    _check_prefixes([1.0] * 19 + [1e-5])
    _check_prefixes(list(np.random.default_rng(3).random(20)))
    _check_prefixes([0.0, 0.5, 0.0, 0.5])


def test_rounding_is_exact_for_short_decimals_and_reported_otherwise() -> None:
    assert round_weights([0.7, 0.3]) == (7, 3)
    assert round_weights([1, 2]) == (1, 2)
    schedule = WeightSchedule.build([1.0, 2.0**0.5])
    assert schedule.period == 1 << 16
    for share, used in schedule.rounding:
        assert abs(float(used) - share) <= 1 / (1 << 16)
    assert sum(schedule.rounding[i][1] for i in range(2)) == Fraction(1)
    assert 0 not in round_weights([1.0, 1e-9])  # a positive weight never vanishes


def test_lookup_names_source_and_its_own_row() -> None:
    schedule = MixtureSchedule([0, 50], [[3.0, 1.0], [1.0, 1.0]])
    seen = [0, 0]
    for row in range(300):
        source, own = schedule.source_of(row)
        assert own == seen[source]  # each source's rows in order, none skipped
        seen[source] += 1
        assert list(schedule.counts_before(row + 1)) == seen
    sources, local = schedule.rows_between(37, 211)
    assert [tuple(map(int, pair)) for pair in zip(sources, local, strict=True)] == [
        schedule.source_of(row) for row in range(37, 211)
    ]
