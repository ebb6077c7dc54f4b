"""The order of bucket batches in an epoch: closed-form curricula, O(log) per batch.

An epoch of a :class:`~mixle.data.VariableLengthStream` has ``batches[k]`` global
batches of bucket ``k`` (shortest bucket first). A curriculum lays them out as a
sequence of *segments*: each segment holds a fixed count of batches of every bucket
(the plan, a small ``(segments, buckets)`` integer table), and inside a segment the
batches are in a keyed pseudo-random order (a :class:`~mixle.data._permutation.
FeistelPermutation` of the segment keyed by the stream's key, the epoch and the segment).
Batch ``i`` of the epoch is found without building the order: a binary search over
the segment ends, one permutation lookup, a binary search over the segment's bucket
counts. The batches of a bucket are numbered (its *ordinals*) segment by segment: those
of a segment all come after those of the segments before it (in a segment they are
placed in the keyed order). The inverse, the batch index of a bucket's ordinal
(:meth:`CurriculumPlan.indices`), is as cheap: a binary search over the bucket's
segment counts, one inverse permutation lookup.

Curricula (:data:`CURRICULA`):

- ``"natural"``: one segment holding every batch: the buckets interleaved at random
  in proportion to their batch counts (every batch holds the same token count, so in
  proportion to their tokens), as OLMo-core's ``VSLNaturalCurriculum``.
- ``"grow_p2"``: OLMo-core's ``VSLGrowP2Curriculum`` ("Dataset Decomposition",
  Pouransari et al. 2024): the epoch is ``num_cycles`` cycles, each bucket's batches
  split evenly over them (the first cycles take one more where they do not divide);
  each cycle is ``K`` sub-cycles (``K`` buckets), and bucket ``k``'s batches of the
  cycle are shared over them with odds ``2 ** (e - 1)``, where ``e`` starts at ``K - k``
  and rises by one per sub-cycle up to ``K``, then wraps to ``1`` and rises again. The
  shortest bucket is strongest in the first sub-cycle, bucket ``k`` peaks in sub-cycle
  ``k`` and the longest in the last: each cycle grows from short to long sequences.
  The shares are rounded by largest remainder (exact totals, ties to the earlier
  sub-cycle); no batch is dropped (OLMo-core trims every bucket to a multiple of
  ``num_cycles``). Every bucket must have batches: grow_p2 asks for each of them.
"""

from __future__ import annotations

import numpy as np

from mixle._checks import one_of, positive_int
from mixle.data._permutation import FeistelPermutation
from mixle.errors import ArgumentError

__all__ = ["CURRICULA", "CurriculumPlan", "grow_p2_odds", "plan_curriculum"]

CURRICULA = ("natural", "grow_p2")
_DOMAIN = 0x56534C  # "VSL": keys the segment orders apart from the piece orders


def grow_p2_odds(num_buckets: int) -> np.ndarray:
    """``odds[k, s]``: bucket ``k``'s weight in sub-cycle ``s`` of a grow_p2 cycle."""
    odds = np.empty((num_buckets, num_buckets), dtype=np.int64)
    for bucket in range(num_buckets):
        start = num_buckets - bucket
        for sub in range(num_buckets):
            exponent = start + sub if start + sub <= num_buckets else num_buckets - sub
            odds[bucket, sub] = 2 ** (exponent - 1)
    return odds


def _split(total: int, weights: np.ndarray) -> np.ndarray:
    """``total`` apportioned to ``weights`` by largest remainder (ties: earlier first)."""
    quotas = total * weights
    shares = quotas // weights.sum()
    remainders = quotas % weights.sum()
    left = total - int(shares.sum())
    shares[np.argsort(-remainders, kind="stable")[:left]] += 1
    return shares


class CurriculumPlan:
    """The segments of one epoch (module docstring); the same for every epoch.

    Parameters
    ----------
    counts
        ``(segments, buckets)`` batches of each bucket in each segment.
    key
        Nonnegative words keying the in-segment orders (the stream's seed and corpus).
    """

    def __init__(self, counts: np.ndarray, key: tuple[int, ...]) -> None:
        self.counts = counts[counts.sum(axis=1) > 0]
        self.key = key
        sizes = self.counts.sum(axis=1)
        self._ends = np.cumsum(sizes)
        self._inner_ends = np.cumsum(self.counts, axis=1)
        # Ordinal of each bucket's first batch in each segment.
        self._before = np.cumsum(self.counts, axis=0) - self.counts
        self._orders: dict[tuple[int, int], FeistelPermutation] = {}

    @property
    def num_batches(self) -> int:
        return int(self._ends[-1]) if self._ends.size else 0

    @property
    def batches_per_bucket(self) -> tuple[int, ...]:
        return tuple(int(n) for n in self.counts.sum(axis=0))

    def locate(self, epoch: int, index: int) -> tuple[int, int]:
        """``(bucket, ordinal)`` of batch ``index`` (``0 <= index < num_batches``) of ``epoch``."""
        segment = int(np.searchsorted(self._ends, index, side="right"))
        first = int(self._ends[segment - 1]) if segment else 0
        size = int(self._ends[segment]) - first
        position = int(self._order(epoch, segment, size)(np.asarray([index - first]))[0])
        ends = self._inner_ends[segment]
        bucket = int(np.searchsorted(ends, position, side="right"))
        offset = int(ends[bucket - 1]) if bucket else 0
        return bucket, int(self._before[segment, bucket]) + position - offset

    def indices(self, epoch: int, bucket: int, ordinals: np.ndarray) -> np.ndarray:
        """Batch indices in ``epoch`` of ``bucket``'s batches ``ordinals`` (each in
        ``[0, batches_per_bucket[bucket])``): :meth:`locate` inverted, in closed form."""
        ordinals = np.asarray(ordinals, dtype=np.int64)
        bucket_ends = self._before[:, bucket] + self.counts[:, bucket]
        segments = np.searchsorted(bucket_ends, ordinals, side="right")
        found = np.empty_like(ordinals)
        for segment in np.unique(segments).tolist():
            chosen = segments == segment
            first = int(self._ends[segment - 1]) if segment else 0
            size = int(self._ends[segment]) - first
            offset = int(self._inner_ends[segment, bucket - 1]) if bucket else 0
            positions = offset + ordinals[chosen] - int(self._before[segment, bucket])
            found[chosen] = first + self._order(epoch, segment, size).inverse(positions)
        return found

    def _order(self, epoch: int, segment: int, size: int) -> FeistelPermutation:
        """The keyed order of ``segment`` in ``epoch`` (kept for the latest epoch only)."""
        order = self._orders.get((epoch, segment))
        if order is None:
            if any(seen != epoch for seen, _ in self._orders):
                self._orders.clear()
            seed, *words = self.key
            order = FeistelPermutation(size, seed, epoch, domain=(*words, segment, _DOMAIN))
            self._orders[epoch, segment] = order
        return order


def plan_curriculum(
    curriculum: str,
    batches: tuple[int, ...],
    *,
    key: tuple[int, ...],
    num_cycles: int = 8,
    bucket_names: tuple[str, ...] | None = None,
) -> CurriculumPlan:
    """The :class:`CurriculumPlan` of ``curriculum`` for ``batches[k]`` batches of bucket ``k``.

    Raises
    ------
    ArgumentError
        ``curriculum`` is not one of :data:`CURRICULA`, ``num_cycles`` is not positive,
        or grow_p2 is asked for a bucket with no batches (named, from ``bucket_names``).
    """
    one_of("curriculum", curriculum, CURRICULA)
    num_cycles = positive_int("num_cycles", num_cycles)
    totals = np.asarray(batches, dtype=np.int64)
    if curriculum == "natural":
        return CurriculumPlan(totals[None, :], key)
    names = bucket_names or tuple(f"bucket {k}" for k in range(len(totals)))
    empty = [names[k] for k in np.flatnonzero(totals == 0)]
    if empty:
        raise ArgumentError(
            f"curriculum 'grow_p2' asks for every bucket, but {', '.join(empty)} has no "
            "document pieces: raise the smallest bucket (min_length) or use 'natural'."
        )
    num_buckets = len(totals)
    odds = grow_p2_odds(num_buckets)
    counts = np.zeros((num_cycles, num_buckets, num_buckets), dtype=np.int64)
    for bucket, total in enumerate(totals):
        per_cycle = _split(int(total), np.ones(num_cycles, dtype=np.int64))
        for cycle, in_cycle in enumerate(per_cycle):
            counts[cycle, :, bucket] = _split(int(in_cycle), odds[bucket])
    return CurriculumPlan(counts.reshape(num_cycles * num_buckets, num_buckets), key)
