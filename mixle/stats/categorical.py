"""``CategoricalDistribution``: a distribution over the integers ``0 .. K-1``.

The simplest complete implementation of the protocol in :mod:`mixle.stats.base`, and the
label field of composite observations such as ``(label, document)``. Its sufficient
statistic is the weighted count of each category, held exactly (see
:mod:`mixle.stats._exact`), so split-and-combine equals one accumulator bitwise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from mixle._checks import exact_int, positive_int
from mixle.errors import ArgumentError, ArgumentTypeError, CheckpointError
from mixle.stats._exact import ExactSums
from mixle.stats.base import (
    DataSequenceEncoder,
    DistributionSampler,
    ParameterEstimator,
    SequenceEncodableProbabilityDistribution,
    SequenceEncodableStatisticAccumulator,
    StatisticAccumulatorFactory,
    as_weights,
)
from mixle.stats.registry import register

__all__ = [
    "CategoricalAccumulator",
    "CategoricalAccumulatorFactory",
    "CategoricalDistribution",
    "CategoricalEncoder",
    "CategoricalEstimator",
    "CategoricalSampler",
    "as_probabilities",
]

_SUM_TOLERANCE = 1e-9


def as_probabilities(values: Any, what: str) -> np.ndarray:
    """Validate a probability vector: 1-D, at least one entry, finite, >= 0, sums to 1.

    The sum may differ from 1 by at most ``1e-9`` (rounding in the caller's arithmetic).

    Raises
    ------
    ArgumentTypeError
        Not a 1-D numeric array.
    ArgumentError
        Empty, a negative or non-finite entry (position named), or a sum other than 1.
    """
    if values is None:
        raise ArgumentTypeError(f"{what} must be a 1-D array of numbers. Got None instead.")
    shape = np.shape(values)
    array = as_weights(values, shape[0] if len(shape) == 1 else 0, what)
    if array.shape[0] == 0:
        raise ArgumentError(f"{what} must hold at least one probability (K >= 1). Got none.")
    total = math.fsum(array.tolist())
    if abs(total - 1.0) > _SUM_TOLERANCE:
        raise ArgumentError(f"{what} must sum to 1. Got {array.tolist()} (sum {total!r}) instead.")
    return array


class CategoricalEncoder(DataSequenceEncoder):
    """Encode category ids as a 1-D int64 array, each checked to lie in ``[0, K)``."""

    def __init__(self, num_categories: int) -> None:
        self.num_categories = positive_int("num_categories", num_categories)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CategoricalEncoder) and other.num_categories == self.num_categories

    def __hash__(self) -> int:
        return hash(("CategoricalEncoder", self.num_categories))

    def __repr__(self) -> str:
        return f"CategoricalEncoder(num_categories={self.num_categories})"

    def seq_encode(self, x: Sequence[Any]) -> np.ndarray:
        """Return the ids of ``x`` as int64.

        Raises
        ------
        ArgumentError
            An entry is not an exact integer in ``[0, K)`` (its position named).
        """
        if isinstance(x, np.ndarray) and x.ndim == 1 and x.dtype.kind in "iu":
            values = x.astype(np.int64)
        else:
            items = list(x)
            values = np.empty(len(items), dtype=np.int64)
            for i, item in enumerate(items):
                values[i] = exact_int(f"category at position {i}", item)
        bad = (values < 0) | (values >= self.num_categories)
        if bad.any():
            pos = int(np.flatnonzero(bad)[0])
            raise ArgumentError(
                f"category at position {pos} must be in [0, {self.num_categories}). "
                f"Got {int(values[pos])} instead."
            )
        return values


@register("CategoricalDistribution")
class CategoricalDistribution(SequenceEncodableProbabilityDistribution):
    """``P(x = k) = probs[k]`` for ``k`` in ``0 .. K-1``.

    Parameters
    ----------
    probs
        ``K >= 1`` nonnegative probabilities summing to 1 (see :func:`as_probabilities`).
    """

    def __init__(self, probs: Any) -> None:
        self.probs = as_probabilities(probs, "`probs`")
        self.probs.setflags(write=False)
        with np.errstate(divide="ignore"):
            self._log_probs = np.log(self.probs)

    @property
    def num_categories(self) -> int:
        return int(self.probs.shape[0])

    def log_density(self, x: Any) -> float:
        """Return ``log probs[x]`` (``-inf`` for a category of probability 0)."""
        return float(self.seq_log_density([x])[0])

    def seq_log_density(self, enc: Any) -> np.ndarray:
        """Return ``log probs[k]`` for every id of ``enc`` (encoded or a plain sequence)."""
        return self._log_probs[self.dist_to_encoder().seq_encode(enc)]

    def sampler(self, seed: int | None = None) -> CategoricalSampler:
        return CategoricalSampler(self, seed)

    def estimator(self, pseudo_count: float | None = None) -> CategoricalEstimator:
        return CategoricalEstimator(self.num_categories, pseudo_count=pseudo_count)

    def dist_to_encoder(self) -> CategoricalEncoder:
        return CategoricalEncoder(self.num_categories)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "CategoricalDistribution", "version": 1, "probs": self.probs.tolist()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CategoricalDistribution:
        """Rebuild a distribution written by :meth:`to_dict` (``CheckpointError`` if malformed)."""
        if d.get("version") != 1:
            raise CheckpointError(
                f"CategoricalDistribution dict version must be 1. Got {d.get('version')!r} instead."
            )
        try:
            return cls(d["probs"])
        except (KeyError, ArgumentError) as exc:
            raise CheckpointError(f"CategoricalDistribution dict is invalid: {exc}") from exc


class CategoricalSampler(DistributionSampler):
    """Inverse-CDF draws from a ``numpy.random.Generator(seed)``."""

    def __init__(self, dist: CategoricalDistribution, seed: int | None = None) -> None:
        self.dist = dist
        self.rng = np.random.default_rng(None if seed is None else exact_int("seed", seed))

    def sample(self, size: int | None = None) -> Any:
        """Draw one id (``int``) or ``size`` of them (int64 array)."""
        n = 1 if size is None else positive_int("size", size)
        cdf = np.cumsum(self.dist.probs)
        draws = np.searchsorted(cdf, self.rng.random(n) * cdf[-1], side="right")
        draws = np.minimum(draws, self.dist.num_categories - 1).astype(np.int64)
        return int(draws[0]) if size is None else draws


class CategoricalAccumulator(SequenceEncodableStatisticAccumulator):
    """Exact weighted category counts; ``value()`` is a float64 array of ``K`` counts."""

    def __init__(self, num_categories: int) -> None:
        self.num_categories = positive_int("num_categories", num_categories)
        self._counts = ExactSums(self.num_categories)

    def update(self, x: Any, weight: float, estimate: Any) -> None:
        self.seq_update(self.acc_to_encoder().seq_encode([x]), np.array([weight]), estimate)

    def seq_update(self, enc: Any, weights: Any, estimate: Any) -> None:
        """Add ``weights[i]`` to the count of category ``enc[i]``."""
        ids = self.acc_to_encoder().seq_encode(enc)
        self._counts.add(ids, as_weights(weights, ids.shape[0]))

    def initialize(self, x: Any, weight: float, rng: np.random.Generator) -> None:
        self.update(x, weight, None)

    def seq_initialize(self, enc: Any, weights: Any, rng: np.random.Generator) -> None:
        self.seq_update(enc, weights, None)

    def combine(self, other: Any) -> CategoricalAccumulator:
        """Add ``other``'s counts (exactly); both must have the same ``K``."""
        if (
            not isinstance(other, CategoricalAccumulator)
            or other.num_categories != self.num_categories
        ):
            raise ArgumentTypeError(
                f"can only combine with a CategoricalAccumulator over {self.num_categories} categories. "
                f"Got {other!r} instead."
            )
        self._counts.combine(other._counts)
        return self

    def value(self) -> np.ndarray:
        return self._counts.floats()

    def from_value(self, v: Any) -> CategoricalAccumulator:
        counts = as_weights(v, self.num_categories, "categorical counts")
        self._counts.set_floats(counts)
        return self

    def acc_to_encoder(self) -> CategoricalEncoder:
        return CategoricalEncoder(self.num_categories)


class CategoricalAccumulatorFactory(StatisticAccumulatorFactory):
    """Makes empty :class:`CategoricalAccumulator` objects over ``K`` categories."""

    def __init__(self, num_categories: int) -> None:
        self.num_categories = positive_int("num_categories", num_categories)

    def make(self) -> CategoricalAccumulator:
        return CategoricalAccumulator(self.num_categories)


class CategoricalEstimator(ParameterEstimator):
    """Maximum-likelihood (or pseudo-count smoothed) estimate of category probabilities.

    ``probs[k] = (count[k] + pseudo_count) / (sum(count) + K * pseudo_count)``.

    Parameters
    ----------
    num_categories
        ``K``, the number of categories.
    pseudo_count
        ``None`` (plain maximum likelihood) or a finite number ``>= 0`` added to every
        count.
    """

    def __init__(self, num_categories: int, *, pseudo_count: float | None = None) -> None:
        self.num_categories = positive_int("num_categories", num_categories)
        self.pseudo_count = as_pseudo_count(pseudo_count)

    def accumulator_factory(self) -> CategoricalAccumulatorFactory:
        return CategoricalAccumulatorFactory(self.num_categories)

    def estimate(self, nobs: float | None, suff_stat: Any) -> CategoricalDistribution:
        """Return the distribution of the smoothed relative counts in ``suff_stat``.

        Raises
        ------
        ArgumentError
            The counts are malformed, or they and the pseudo-count are all 0.
        """
        counts = as_weights(suff_stat, self.num_categories, "categorical counts")
        return CategoricalDistribution(normalized(counts, self.pseudo_count, "categorical counts"))


def as_pseudo_count(value: Any) -> float | None:
    """Validate an optional pseudo-count: ``None`` or a finite number ``>= 0``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | np.number):
        raise ArgumentTypeError(f"`pseudo_count` must be a number or None. Got {value!r} instead.")
    result = float(value)
    if not (math.isfinite(result) and result >= 0):
        raise ArgumentError(f"`pseudo_count` must be finite and >= 0. Got {result!r} instead.")
    return result


def normalized(counts: np.ndarray, pseudo_count: float | None, what: str) -> np.ndarray:
    """Return ``(counts + pseudo_count) / sum(...)``; raise ``ArgumentError`` on a zero total."""
    smoothed = counts + (pseudo_count or 0.0)
    total = math.fsum(smoothed.tolist())
    if total <= 0:
        raise ArgumentError(
            f"{what} have total weight 0, so no probabilities can be estimated; "
            "give the data positive weight or pass a positive pseudo_count."
        )
    return smoothed / total
