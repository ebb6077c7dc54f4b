"""The ``np.unique`` replacements of the read path agree with ``np.unique``."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from mixle._arrays import distinct, in_first_seen_order

_VALUES = arrays(np.int64, st.integers(0, 60), elements=st.integers(-5, 20))


@given(_VALUES)
def test_distinct_is_the_sorted_unique_values(values: np.ndarray) -> None:
    np.testing.assert_array_equal(distinct(values), np.unique(values))


@given(_VALUES)
def test_in_first_seen_order_keeps_each_value_once_where_it_first_appears(
    values: np.ndarray,
) -> None:
    _, first = np.unique(values, return_index=True)
    got = in_first_seen_order(values)
    np.testing.assert_array_equal(got, values[np.sort(first)])
    assert got is not values
