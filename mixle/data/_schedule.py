"""The exact schedule of a mixture: which source global row ``k`` comes from.

Weights are first rounded to integer counts ``n_i`` over a period ``P`` (exactly,
with the smallest such ``P`` up to 1000, when every weight is a short decimal or a
small fraction; else by largest remainders over ``P = 65536``, at most ``1/65536``
off per weight — :attr:`WeightSchedule.rounding` reports each). One period is then
laid out once by earliest-deadline-first: the ``j``-th row of source ``i`` (``j``
from 1) may occupy slot ``t`` (counted from 1) only if ``(j - 1) P / n_i < t < j P /
n_i + 1``, which is exactly the condition that after every prefix of ``t`` rows the
source's count ``c_i(t)`` satisfies ``|c_i(t) - t n_i / P| < 1``. Such a sequence
always exists (Tijdeman's chairman-assignment theorem), and earliest-deadline-first
finds one whenever one exists for unit jobs with integer windows; the layout is
checked against the windows after it is built. At ``t = P`` every count is exactly
``n_i``, so the period repeats and the property holds for every prefix of the endless
stream.

Lookups are O(1) (which source, and its own row index) and O(log P) (a source's
count in any prefix); nothing depends on previous steps. A period costs ``P`` int16
plus ``P`` int64 entries (under 1 MiB) and is built in O(P log sources).

:class:`MixtureSchedule` is the row schedule every rule of :mod:`mixle.data._mixing_rule`
builds (the contract a mixture reads is :class:`~mixle.data._mixing_rule.RowSchedule`).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from mixle.errors import ArgumentError

__all__ = ["MixtureSchedule", "WeightSchedule", "round_weights"]

RESOLUTION = 1 << 16
"""Period used when the weights have no exact small common denominator."""
_EXACT_LIMIT = 1000


def round_weights(weights: Sequence[float]) -> tuple[int, ...]:
    """Integer counts ``n_i`` with ``sum(n) == P`` whose ratios ``n_i / P`` are the weights.

    Exact when every normalised weight equals a fraction with denominator up to 1000
    (to within 1e-12 of the float) and their common denominator is at most 65536;
    otherwise the largest-remainder rounding of ``w_i * 65536`` (each count at most 1
    away from ``w_i * 65536``). A positive weight never rounds to 0.
    """
    total = math.fsum(weights)
    shares = [w / total for w in weights]
    fractions = [Fraction(s).limit_denominator(_EXACT_LIMIT) for s in shares]
    # A positive weight whose share is within 1e-12 of 0 is not exactly 0/P: it is
    # given its row by the largest-remainder rounding below.
    if all(
        abs(float(f) - s) <= 1e-12 and (f > 0) == (w > 0)
        for f, s, w in zip(fractions, shares, weights, strict=True)
    ):
        period = math.lcm(*(f.denominator for f in fractions))
        exact = [f * period for f in fractions]
        if period <= RESOLUTION and sum(exact) == period:
            return tuple(int(x) for x in exact)
    scaled = [s * RESOLUTION for s in shares]
    counts = [max(math.floor(x), 1 if w > 0 else 0) for x, w in zip(scaled, weights, strict=True)]
    # Largest remainders get the rows still missing (or, after the floor of 1 for tiny
    # weights, the largest counts give some back).
    missing = RESOLUTION - sum(counts)
    order = sorted(range(len(counts)), key=lambda i: (counts[i] - scaled[i], i))
    step = 1 if missing > 0 else -1
    if step < 0:
        order = sorted(range(len(counts)), key=lambda i: (-counts[i], i))
    positive = sum(1 for w in weights if w > 0)
    if positive > RESOLUTION:  # each needs a row of the period
        raise ArgumentError(
            f"a mixture phase gives {positive} sources a positive weight; at most "
            f"{RESOLUTION} can share a period."
        )
    # Giving back never takes a source's last row (a positive weight keeps >= 1).
    position = 0
    while missing:
        index = order[position % len(order)]
        position += 1
        if step < 0 and counts[index] <= 1:
            continue
        counts[index] += step
        missing -= step
    return tuple(counts)


def _layout_period(counts: Sequence[int]) -> np.ndarray:
    """One period of sources by earliest-deadline-first over the rows' windows."""
    period = sum(counts)
    slots = np.empty(period, dtype=np.int16)
    taken = [0] * len(counts)
    # Row j (from 1) of source i: release (j-1)P//n_i + 1, deadline ceil(jP/n_i).
    pending = [(1, i) for i, n in enumerate(counts) if n]
    ready: list[tuple[int, int]] = []
    for t in range(1, period + 1):
        while pending and pending[0][0] <= t:
            _, i = heapq.heappop(pending)
            heapq.heappush(ready, (-(-(taken[i] + 1) * period // counts[i]), i))
        deadline, i = heapq.heappop(ready)
        if deadline < t:  # pragma: no cover - excluded by Tijdeman's theorem
            raise AssertionError(f"mixture schedule missed a deadline at slot {t}")
        slots[t - 1] = i
        taken[i] += 1
        if taken[i] < counts[i]:
            heapq.heappush(pending, (taken[i] * period // counts[i] + 1, i))
    return slots


@dataclass(frozen=True, slots=True)
class WeightSchedule:
    """One set of weights laid out as a repeating period (see the module docstring).

    Attributes
    ----------
    counts
        ``n_i``: rows of source ``i`` per period; ``period == sum(counts)``.
    slots
        ``slots[s]``: the source of slot ``s`` of every period (int16).
    ranks
        ``ranks[s]``: how many rows of ``slots[s]`` come before slot ``s`` in the period.
    positions
        ``positions[i]``: the sorted slots of source ``i`` (int64).
    rounding
        Per source, ``(float weight share, n_i / P)``.
    """

    counts: tuple[int, ...]
    slots: np.ndarray
    ranks: np.ndarray
    positions: tuple[np.ndarray, ...]
    rounding: tuple[tuple[float, Fraction], ...]

    @classmethod
    def build(cls, weights: Sequence[float]) -> WeightSchedule:
        counts = round_weights(weights)
        slots = _layout_period(counts)
        positions = tuple(np.flatnonzero(slots == i).astype(np.int64) for i in range(len(counts)))
        ranks = np.empty(len(slots), dtype=np.int64)
        for where in positions:
            ranks[where] = np.arange(len(where), dtype=np.int64)
        total, period = math.fsum(weights), sum(counts)
        rounding = tuple(
            (w / total, Fraction(n, period)) for w, n in zip(weights, counts, strict=True)
        )
        return cls(counts, slots, ranks, positions, rounding)

    @property
    def period(self) -> int:
        return len(self.slots)

    def source_of(self, row: int) -> tuple[int, int]:
        """``(source, index among that source's rows)`` of row ``row`` (O(1))."""
        turn, slot = divmod(row, self.period)
        source = int(self.slots[slot])
        return source, turn * self.counts[source] + int(self.ranks[slot])

    def count(self, source: int, rows: int) -> int:
        """Rows of ``source`` among the first ``rows`` rows (O(log period))."""
        turn, slot = divmod(rows, self.period)
        return turn * self.counts[source] + int(self.positions[source].searchsorted(slot))

    def counts_before(self, rows: int) -> np.ndarray:
        """``count(i, rows)`` for every source, int64."""
        return np.array([self.count(i, rows) for i in range(len(self.counts))], dtype=np.int64)

    def sources_between(self, begin: int, end: int) -> np.ndarray:
        """Sources of rows ``[begin, end)``, int64 (vectorised)."""
        return self.slots[np.arange(begin, end, dtype=np.int64) % self.period].astype(np.int64)


class MixtureSchedule:
    """Phases of weights: phase ``p`` rules global rows ``[starts[p], starts[p + 1])``.

    Within a phase, rows follow that phase's :class:`WeightSchedule` counted from the
    phase's first row; each source continues from exactly the rows it consumed in the
    earlier phases (its offset), so nothing is repeated or skipped at a boundary.

    Parameters
    ----------
    starts
        First global row of each phase: ``starts[0] == 0``, strictly increasing.
    weights
        One weight sequence per phase (validated by the caller).
    """

    def __init__(self, starts: Sequence[int], weights: Sequence[Sequence[float]]) -> None:
        if not starts or starts[0] != 0:
            raise ArgumentError("the first phase of a mixture must start at row 0.")
        self.starts = list(starts)
        self.phases = [WeightSchedule.build(w) for w in weights]
        offsets = [np.zeros(len(weights[0]), dtype=np.int64)]
        for p in range(1, len(self.starts)):
            length = self.starts[p] - self.starts[p - 1]
            offsets.append(offsets[-1] + self.phases[p - 1].counts_before(length))
        self.offsets = offsets

    def phase_of(self, row: int) -> int:
        """Index of the phase that rules global row ``row`` (O(log phases))."""
        return bisect_right(self.starts, row) - 1

    def source_of(self, row: int) -> tuple[int, int]:
        """``(source, the source's own row index)`` of global row ``row``."""
        p = self.phase_of(row)
        source, local = self.phases[p].source_of(row - self.starts[p])
        return source, int(self.offsets[p][source]) + local

    def counts_before(self, row: int) -> np.ndarray:
        """Rows each source contributed to global rows ``[0, row)`` (int64, closed form)."""
        if row == 0:
            return np.zeros(len(self.offsets[0]), dtype=np.int64)
        p = self.phase_of(row - 1)
        return self.offsets[p] + self.phases[p].counts_before(row - self.starts[p])

    def target_rows(self, row: int) -> np.ndarray:
        """``sum over phases of (rounded weight x rows of the phase)`` within ``[0, row)``."""
        target = np.zeros(len(self.offsets[0]), dtype=np.float64)
        for p, schedule in enumerate(self.phases):
            begin = self.starts[p]
            end = self.starts[p + 1] if p + 1 < len(self.starts) else row
            span = max(min(end, row) - begin, 0)
            target += np.array(schedule.counts, dtype=np.float64) * span / schedule.period
        return target

    def lookup(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`source_of` for every global row of the int64 array ``rows``, vectorised:
        two int64 arrays (sources, the sources' own row indices)."""
        phase = np.searchsorted(self.starts, rows, side="right") - 1
        sources = np.empty(len(rows), dtype=np.int64)
        local = np.empty(len(rows), dtype=np.int64)
        # Not np.unique: its first call imports numpy.ma (~25 ms of a resumed process).
        for p in sorted(set(phase.tolist())):
            where = phase == p
            schedule = self.phases[p]
            turn, slot = np.divmod(rows[where] - self.starts[p], schedule.period)
            src = schedule.slots[slot].astype(np.int64)
            counts = np.asarray(schedule.counts, dtype=np.int64)
            sources[where] = src
            local[where] = self.offsets[p][src] + turn * counts[src] + schedule.ranks[slot]
        return sources, local

    def rows_between(self, begin: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`lookup` of global rows ``[begin, end)``."""
        return self.lookup(np.arange(begin, end, dtype=np.int64))
