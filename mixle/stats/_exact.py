"""Exact sums of float64 weights, so that accumulators combine without rounding.

Every finite float64 is an integer multiple of ``2**-1074`` (the smallest subnormal), so
a sum of them is held exactly as a Python integer count of that unit. Adding is integer
addition — associative and commutative — hence splitting data across accumulators and
combining them gives *bitwise* the statistic of one accumulator. Reading the sum back is
one correctly rounded integer division.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ExactSums"]

_UNIT_EXPONENT = 1074  # float64 values are integer multiples of 2**-1074


def _units(value: float) -> int:
    numerator, denominator = value.as_integer_ratio()  # denominator is a power of two
    return numerator * ((1 << _UNIT_EXPONENT) // denominator)


class ExactSums:
    """``size`` running sums of float64 values, exact until read.

    Parameters
    ----------
    size
        Number of sums (e.g. categories or mixture components).
    """

    def __init__(self, size: int) -> None:
        self._units = [0] * size

    def __len__(self) -> int:
        return len(self._units)

    def add(self, index: np.ndarray, values: np.ndarray) -> None:
        """Add ``values[i]`` to sum ``index[i]`` for every ``i`` (finite values, valid indices).

        Equal ``(index, value)`` pairs are grouped first, so unit weights cost one
        multiplication per distinct pair rather than one per value.
        """
        if index.shape[0] == 0:
            return
        order = np.lexsort((values, index))
        idx, val = index[order], values[order]
        starts = np.flatnonzero(
            np.concatenate(([True], (idx[1:] != idx[:-1]) | (val[1:] != val[:-1])))
        )
        counts = np.diff(np.append(starts, idx.shape[0]))
        for start, count in zip(starts.tolist(), counts.tolist(), strict=True):
            self._units[int(idx[start])] += count * _units(float(val[start]))

    def add_columns(self, values: np.ndarray) -> None:
        """Add column ``k`` of the ``(n, size)`` array ``values`` to sum ``k``."""
        n, size = values.shape
        self.add(np.tile(np.arange(size, dtype=np.int64), n), values.reshape(-1))

    def combine(self, other: ExactSums, index: list[int] | None = None) -> None:
        """Add ``other``'s sum ``i`` into sum ``index[i]`` (default: sum ``i``), exactly."""
        targets = range(len(other._units)) if index is None else index
        for target, units in zip(targets, other._units, strict=True):
            self._units[target] += units

    def extend(self, count: int) -> None:
        """Append ``count`` new sums, each 0."""
        self._units.extend([0] * count)

    def set_floats(self, values: np.ndarray) -> None:
        """Replace the sums by the float64 ``values`` (exactly)."""
        self._units = [_units(float(v)) for v in values.tolist()]

    def floats(self) -> np.ndarray:
        """Return the sums as float64, each correctly rounded."""
        return np.array([u / (1 << _UNIT_EXPONENT) for u in self._units], dtype=np.float64)
