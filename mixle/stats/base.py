"""The estimator protocol every mixle leaf implements, and a generic fitting driver.

A *distribution* scores data and hands out an *estimator*; the estimator hands out an
*accumulator factory*; accumulators fold encoded data into sufficient statistics that
can be *combined* across partitions and turned back into a distribution by
:meth:`ParameterEstimator.estimate`. Encoded data comes from a
:class:`DataSequenceEncoder`, so the expensive conversion happens once per partition.

The one guarantee the protocol asks of an implementation is *foldability*: for any split
of a data set into partitions, accumulating each partition separately and combining the
accumulators gives the same statistic (to floating-point tolerance) as accumulating the
whole data set in one accumulator. :func:`estimate_partitions` relies on exactly that.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from mixle._checks import positive_int
from mixle.errors import ArgumentError, ArgumentTypeError

__all__ = [
    "DataSequenceEncoder",
    "DistributionSampler",
    "ParameterEstimator",
    "SequenceEncodableProbabilityDistribution",
    "SequenceEncodableStatisticAccumulator",
    "StatisticAccumulatorFactory",
    "as_weights",
    "estimate_partitions",
    "partitioned_estimate",
]


class DataSequenceEncoder(ABC):
    """Turns a sequence of observations into the encoded form accumulators consume."""

    @abstractmethod
    def seq_encode(self, x: Sequence[Any]) -> Any:
        """Encode a sequence of observations; the result has ``len(x)`` rows.

        Raises
        ------
        ArgumentError
            An observation is malformed (the message names its position).
        """

    @staticmethod
    def encoded_len(enc: Any) -> int:
        """Return the number of observations in ``enc`` (``len(enc)`` by default)."""
        return len(enc)

    @staticmethod
    def encoded_slice(enc: Any, start: int, stop: int) -> Any:
        """Return observations ``start:stop`` of ``enc`` (``enc[start:stop]`` by default)."""
        return enc[start:stop]


class DistributionSampler(ABC):
    """Draws observations from a distribution, reproducibly for a given seed."""

    @abstractmethod
    def sample(self, size: int | None = None) -> Any:
        """Draw one observation (``size=None``) or ``size`` of them.

        Conditional distributions add keyword-only arguments (e.g. ``context``).
        """


class SequenceEncodableProbabilityDistribution(ABC):
    """A distribution that can score single observations and encoded sequences of them."""

    @abstractmethod
    def log_density(self, x: Any) -> float:
        """Return the log density (or log probability) of one observation."""

    @abstractmethod
    def seq_log_density(self, enc: Any) -> np.ndarray:
        """Return the log density of every observation in ``enc`` as a float64 array."""

    @abstractmethod
    def sampler(self, seed: int | None = None) -> DistributionSampler:
        """Return a sampler; equal seeds give equal draws."""

    @abstractmethod
    def estimator(self, pseudo_count: float | None = None) -> ParameterEstimator:
        """Return an estimator whose :meth:`~ParameterEstimator.estimate` yields this family."""

    @abstractmethod
    def dist_to_encoder(self) -> DataSequenceEncoder:
        """Return the encoder whose output :meth:`seq_log_density` accepts."""

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-able description that :func:`mixle.stats.from_dict` restores."""


class SequenceEncodableStatisticAccumulator(ABC):
    """Folds (weighted) observations into a combinable sufficient statistic."""

    @abstractmethod
    def update(self, x: Any, weight: float, estimate: Any) -> None:
        """Fold one observation with ``weight``; ``estimate`` is the current distribution."""

    @abstractmethod
    def seq_update(self, enc: Any, weights: np.ndarray, estimate: Any) -> None:
        """Fold every observation of ``enc``, one weight per observation."""

    @abstractmethod
    def initialize(self, x: Any, weight: float, rng: np.random.Generator) -> None:
        """Fold one observation when no current estimate exists yet."""

    @abstractmethod
    def seq_initialize(self, enc: Any, weights: np.ndarray, rng: np.random.Generator) -> None:
        """Fold every observation of ``enc`` when no current estimate exists yet."""

    @abstractmethod
    def combine(self, other: Any) -> SequenceEncodableStatisticAccumulator:
        """Add ``other``'s statistic into this accumulator and return ``self``."""

    @abstractmethod
    def value(self) -> Any:
        """Return the statistic (what :meth:`ParameterEstimator.estimate` consumes)."""

    @abstractmethod
    def from_value(self, v: Any) -> SequenceEncodableStatisticAccumulator:
        """Replace this accumulator's statistic with ``v`` and return ``self``."""

    @abstractmethod
    def acc_to_encoder(self) -> DataSequenceEncoder:
        """Return the encoder whose output :meth:`seq_update` accepts."""


class StatisticAccumulatorFactory(ABC):
    """Makes fresh, empty accumulators that are mutually combinable."""

    @abstractmethod
    def make(self) -> SequenceEncodableStatisticAccumulator:
        """Return a new empty accumulator."""


class ParameterEstimator(ABC):
    """Turns a combined statistic into a distribution."""

    @abstractmethod
    def accumulator_factory(self) -> StatisticAccumulatorFactory:
        """Return the factory for this estimator's accumulators."""

    @abstractmethod
    def estimate(
        self, nobs: float | None, suff_stat: Any
    ) -> SequenceEncodableProbabilityDistribution:
        """Return the distribution estimated from ``suff_stat`` (an accumulator's ``value()``)."""


def as_weights(weights: Any, n: int, what: str = "`weights`") -> np.ndarray:
    """Validate observation weights: a 1-D float64 array of ``n`` finite values >= 0.

    ``None`` means unit weights.

    Raises
    ------
    ArgumentTypeError
        ``weights`` is not one-dimensional or not numeric.
    ArgumentError
        Its length is not ``n``, or a weight is negative or not finite (position named).
    """
    if weights is None:
        return np.ones(n, dtype=np.float64)
    array = np.asarray(weights)
    if array.ndim != 1 or array.dtype.kind not in "biuf":
        raise ArgumentTypeError(
            f"{what} must be a 1-D array of numbers. Got shape {array.shape} and dtype {array.dtype} instead."
        )
    if array.shape[0] != n:
        raise ArgumentError(
            f"{what} must hold one weight per observation ({n}). Got {array.shape[0]} instead."
        )
    array = array.astype(np.float64)
    bad = ~np.isfinite(array) | (array < 0)
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise ArgumentError(
            f"{what} must be finite and nonnegative. Got {float(array[pos])!r} at position {pos} instead."
        )
    return array


def estimate_partitions(
    estimator: ParameterEstimator,
    partitions: Sequence[tuple[Any, Any]],
    *,
    prev_estimate: Any = None,
) -> SequenceEncodableProbabilityDistribution:
    """Run accumulate -> combine -> estimate over already-encoded partitions.

    Each partition is ``(enc, weights)`` (``weights=None`` for unit weights) and gets its
    own accumulator from one factory, as a data-parallel worker would; the accumulators
    are combined left to right and the estimator turns the result into a distribution.

    Parameters
    ----------
    estimator
        Any :class:`ParameterEstimator`.
    partitions
        At least one ``(encoded data, weights)`` pair.
    prev_estimate
        Passed to ``seq_update`` (the current distribution of an EM-style loop);
        ``None`` uses ``seq_initialize`` with a fixed-seed generator instead.

    Raises
    ------
    ArgumentError
        ``partitions`` is empty.
    """
    if len(partitions) == 0:
        raise ArgumentError("`partitions` must hold at least one (enc, weights) pair. Got none.")
    factory = estimator.accumulator_factory()
    total: SequenceEncodableStatisticAccumulator | None = None
    nobs = 0.0
    for index, (enc, weights) in enumerate(partitions):
        accumulator = factory.make()
        encoder = accumulator.acc_to_encoder()
        w = as_weights(weights, encoder.encoded_len(enc), f"weights of partition {index}")
        nobs += math.fsum(w.tolist())
        if prev_estimate is None:
            accumulator.seq_initialize(enc, w, np.random.default_rng(index))
        else:
            accumulator.seq_update(enc, w, prev_estimate)
        total = accumulator if total is None else total.combine(accumulator)
    assert total is not None  # partitions is non-empty
    return estimator.estimate(nobs, total.value())


def partitioned_estimate(
    estimator: ParameterEstimator,
    data: Sequence[Any],
    weights: Any = None,
    *,
    num_partitions: int = 1,
    prev_estimate: Any = None,
) -> SequenceEncodableProbabilityDistribution:
    """Encode ``data``, split it into ``num_partitions`` contiguous parts, and estimate.

    The split mirrors how a data-parallel job divides a batch: part ``k`` holds
    observations ``[k*n//p, (k+1)*n//p)``. By foldability the result does not depend on
    ``num_partitions`` beyond floating-point rounding.

    Raises
    ------
    ArgumentError
        ``num_partitions`` is not a positive integer or exceeds ``len(data)``; the
        weights are invalid (see :func:`as_weights`).
    """
    parts = positive_int("num_partitions", num_partitions)
    n = len(data)
    if parts > n:
        raise ArgumentError(
            f"`num_partitions` must be at most the number of observations ({n}). Got {parts} instead."
        )
    w = as_weights(weights, n)
    encoder = estimator.accumulator_factory().make().acc_to_encoder()
    enc = encoder.seq_encode(data)
    bounds = [k * n // parts for k in range(parts + 1)]
    partitions = [
        (encoder.encoded_slice(enc, bounds[k], bounds[k + 1]), w[bounds[k] : bounds[k + 1]])
        for k in range(parts)
    ]
    return estimate_partitions(estimator, partitions, prev_estimate=prev_estimate)
