"""Set operations on 1-D integer arrays for the read path, without ``np.unique``.

``np.unique`` in numpy 2.4 imports ``numpy.ma`` on its first call (about 20 ms), which a
restarted run would pay before its first batch; these helpers sort and compare instead.
"""

from __future__ import annotations

import numpy as np

__all__ = ["distinct", "in_first_seen_order", "run_indices"]


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values of 1-D ``values``, ascending (a new array)."""
    ordered = np.sort(values)
    if ordered.shape[0] < 2:
        return ordered
    keep = np.empty(ordered.shape[0], dtype=np.bool_)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def in_first_seen_order(values: np.ndarray) -> np.ndarray:
    """The distinct values of 1-D ``values``, each once, in order of first appearance."""
    if values.shape[0] < 2:
        return values.copy()
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    first = np.empty(ordered.shape[0], dtype=np.bool_)
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    return values[np.sort(order[first])]


def run_indices(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The int64 indices ``starts[j], ..., starts[j] + counts[j] - 1`` of each run ``j``,
    concatenated (``counts`` nonnegative; O(total count), no per-run Python loop)."""
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    ends = np.cumsum(counts)
    # Each index is its position plus its run's shift (start minus the run's position).
    shifts = np.asarray(starts, dtype=np.int64) - (ends - counts)
    return np.arange(total, dtype=np.int64) + np.repeat(shifts, counts)
