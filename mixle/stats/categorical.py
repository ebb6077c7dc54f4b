"""``CategoricalDistribution``: a distribution over a finite set of labels.

The simplest complete implementation of the protocol in :mod:`mixle.stats.base`, and the
label field of composite observations such as ``(label, document)``. Categories are the
integers ``0 .. K-1`` (``CategoricalDistribution([p_0, ..., p_{K-1}])``) or any strings
and integers (``CategoricalDistribution({"python": 0.4, "prose": 0.6})``). The
sufficient statistic is the weighted count of each category, held exactly (see
:mod:`mixle.stats._exact`), so split-and-combine equals one accumulator bitwise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle._checks import exact_int, positive_int
from mixle.errors import ArgumentError, ArgumentTypeError, CheckpointError
from mixle.stats._exact import ExactSums
from mixle.stats._sampling import draw_indices, sampler_rng
from mixle.stats.base import (
    DataSequenceEncoder,
    DistributionSampler,
    ParameterEstimator,
    SequenceEncodableProbabilityDistribution,
    SequenceEncodableStatisticAccumulator,
    StatisticAccumulatorFactory,
    as_weights,
)
from mixle.stats.registry import register, require_version

__all__ = [
    "CategoricalAccumulator",
    "CategoricalAccumulatorFactory",
    "CategoricalDistribution",
    "CategoricalEncoder",
    "CategoricalEstimator",
    "CategoricalSampler",
    "CategoryIndices",
    "as_probabilities",
    "as_pseudo_count",
    "normalized",
]

Label = str | int

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


def _as_label(value: Any, what: str) -> Label:
    """A category label: a string or an exact integer (JSON-able, hashable)."""
    if isinstance(value, str):
        return value
    return exact_int(what, value)


def as_categories(categories: Any) -> tuple[Label, ...] | None:
    """Normalise ``categories``: ``None`` (learn them from data), ``K`` (the ids ``0 .. K-1``)
    or a sequence of distinct string/integer labels.

    Raises
    ------
    ArgumentError, ArgumentTypeError
        ``K`` is not a positive integer; the labels are empty, repeated, or neither
        strings nor integers (the position named).
    """
    if categories is None:
        return None
    if isinstance(categories, int | np.integer) and not isinstance(categories, bool):
        return tuple(range(positive_int("categories", categories)))
    if isinstance(categories, str) or not isinstance(categories, Sequence | np.ndarray):
        raise ArgumentTypeError(
            "`categories` must be a number of categories, a sequence of labels or None. "
            f"Got {categories!r} instead."
        )
    labels = tuple(
        _as_label(c, f"category label at position {i}") for i, c in enumerate(categories)
    )
    if not labels:
        raise ArgumentError("`categories` must hold at least one label (K >= 1). Got none.")
    if len(set(labels)) != len(labels):
        raise ArgumentError(f"`categories` must be distinct. Got {list(labels)} instead.")
    return labels


def _sorted_labels(labels: Sequence[Label]) -> list[Label]:
    """Integers ascending, then strings ascending: a deterministic order for learned labels."""
    return sorted(
        labels, key=lambda x: (isinstance(x, str), x if isinstance(x, int) else 0, str(x))
    )


def _is_range(labels: tuple[Label, ...]) -> bool:
    return all(isinstance(x, int) and x == i for i, x in enumerate(labels))


@dataclass(frozen=True, slots=True)
class CategoryIndices:
    """Encoded categorical observations: ``index[i]`` is the position of observation ``i``
    in the encoder's category list (int64)."""

    index: np.ndarray

    def __len__(self) -> int:
        return int(self.index.shape[0])

    def __getitem__(self, item: slice) -> CategoryIndices:
        return CategoryIndices(self.index[item])


class CategoricalEncoder(DataSequenceEncoder):
    """Encode categorical observations.

    With known ``categories`` (``K`` or a label sequence) the encoding is a
    :class:`CategoryIndices`; an observation outside them raises. With
    ``categories=None`` (an estimator learning its labels) the encoding is the tuple of
    validated labels.
    """

    def __init__(self, categories: Any = None) -> None:
        self.categories = as_categories(categories)
        self._index = (
            None if self.categories is None else {c: i for i, c in enumerate(self.categories)}
        )
        self._range = self.categories is not None and _is_range(self.categories)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CategoricalEncoder) and other.categories == self.categories

    def __hash__(self) -> int:
        return hash(("CategoricalEncoder", self.categories))

    def __repr__(self) -> str:
        if self.categories is None:
            return "CategoricalEncoder(categories=None)"
        if self._range:
            return f"CategoricalEncoder(categories={len(self.categories)})"
        return f"CategoricalEncoder(categories={list(self.categories)!r})"

    def seq_encode(self, x: Sequence[Any]) -> CategoryIndices | tuple[Label, ...]:
        """Encode a sequence of labels (a :class:`CategoryIndices` passes through).

        Raises
        ------
        ArgumentError
            A label is neither a string nor an exact integer, or is not one of the
            categories (its position named).
        """
        if isinstance(x, CategoryIndices):
            return x
        if self.categories is None:
            return tuple(_as_label(item, f"category at position {i}") for i, item in enumerate(x))
        k = len(self.categories)
        if self._range and isinstance(x, np.ndarray) and x.ndim == 1 and x.dtype.kind in "iu":
            index = x.astype(np.int64)
            bad = (index < 0) | (index >= k)
            if bad.any():
                pos = int(np.flatnonzero(bad)[0])
                raise ArgumentError(
                    f"category at position {pos} must be in [0, {k}). Got {int(index[pos])} instead."
                )
            return CategoryIndices(index)
        assert self._index is not None
        items = list(x)
        index = np.empty(len(items), dtype=np.int64)
        for i, item in enumerate(items):
            label = _as_label(item, f"category at position {i}")
            position = self._index.get(label)
            if position is None:
                allowed = f"in [0, {k})" if self._range else f"one of {list(self.categories)!r}"
                raise ArgumentError(
                    f"category at position {i} must be {allowed}. Got {label!r} instead."
                )
            index[i] = position
        return CategoryIndices(index)


@register("CategoricalDistribution")
class CategoricalDistribution(SequenceEncodableProbabilityDistribution):
    """``P(x = c_k) = p_k`` over categories ``c_0 .. c_{K-1}``.

    Parameters
    ----------
    probs
        ``K >= 1`` nonnegative probabilities summing to 1: a sequence (categories
        ``0 .. K-1``) or a mapping ``label -> probability`` (string or integer labels).
    """

    def __init__(self, probs: Any) -> None:
        if isinstance(probs, Mapping):
            labels = as_categories(list(probs.keys()))
            values: Any = list(probs.values())
        else:
            labels, values = None, probs
        self.probs = as_probabilities(values, "`probs`")
        self.probs.setflags(write=False)
        self.categories: tuple[Label, ...] = labels or tuple(range(self.probs.shape[0]))
        self._encoder = CategoricalEncoder(self.categories)
        with np.errstate(divide="ignore"):
            self._log_probs = np.log(self.probs)

    @property
    def num_categories(self) -> int:
        return int(self.probs.shape[0])

    def prob(self, label: Any) -> float:
        """Return ``P(x = label)`` (``ArgumentError`` if ``label`` is not a category)."""
        encoded = self._encoder.seq_encode([label])
        assert isinstance(encoded, CategoryIndices)
        return float(self.probs[encoded.index[0]])

    def log_density(self, x: Any) -> float:
        """Return ``log P(x)`` (``-inf`` for a category of probability 0)."""
        return float(self.seq_log_density([x])[0])

    def seq_log_density(self, enc: Any) -> np.ndarray:
        """Return ``log P(x_i)`` for every observation (encoded or a plain sequence of labels)."""
        encoded = self._encoder.seq_encode(enc)
        assert isinstance(encoded, CategoryIndices)
        return self._log_probs[encoded.index]

    def sampler(self, seed: int | None = None) -> CategoricalSampler:
        return CategoricalSampler(self, seed)

    def estimator(self, pseudo_count: float | None = None) -> CategoricalEstimator:
        """Return an estimator over the same categories."""
        return CategoricalEstimator(self.categories, pseudo_count=pseudo_count)

    def dist_to_encoder(self) -> CategoricalEncoder:
        return self._encoder

    def to_dict(self) -> dict[str, Any]:
        ranged = _is_range(self.categories)
        return {
            "type": "CategoricalDistribution",
            "version": 1,
            "probs": self.probs.tolist(),
            "categories": None if ranged else list(self.categories),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CategoricalDistribution:
        """Rebuild a distribution written by :meth:`to_dict` (``CheckpointError`` if malformed)."""
        require_version(d, "CategoricalDistribution dict")
        try:
            labels = d.get("categories")
            if labels is None:
                return cls(d["probs"])
            if len(labels) != len(d["probs"]):
                raise ArgumentError("`categories` and `probs` differ in length.")
            return cls(dict(zip(as_categories(labels) or (), d["probs"], strict=True)))
        except (KeyError, TypeError, ArgumentError) as exc:
            raise CheckpointError(f"CategoricalDistribution dict is invalid: {exc}") from exc


class CategoricalSampler(DistributionSampler):
    """Inverse-CDF draws from a ``numpy.random.Generator(seed)``."""

    def __init__(self, dist: CategoricalDistribution, seed: int | None = None) -> None:
        self.dist = dist
        self.rng = sampler_rng(seed)

    def sample(self, size: int | None = None) -> Any:
        """Draw one label, or ``size`` of them (an int64 array for ids ``0 .. K-1``, else a list)."""
        n = 1 if size is None else positive_int("size", size)
        draws = draw_indices(self.dist.probs, n, self.rng)
        if _is_range(self.dist.categories):
            return int(draws[0]) if size is None else draws
        labels = [self.dist.categories[int(i)] for i in draws]
        return labels[0] if size is None else labels


class CategoricalAccumulator(SequenceEncodableStatisticAccumulator):
    """Exact weighted category counts.

    ``value()`` is a float64 array of ``K`` counts for known categories, or a dict
    ``label -> count`` when the categories are learned (``categories=None``).
    """

    def __init__(self, categories: Any = None) -> None:
        self._encoder = CategoricalEncoder(categories)
        self._learned: list[Label] | None = None if self._encoder.categories is not None else []
        self._positions: dict[Label, int] = {}
        self._counts = ExactSums(
            0 if self._encoder.categories is None else len(self._encoder.categories)
        )

    def _learned_index(self, labels: Sequence[Label]) -> np.ndarray:
        assert self._learned is not None
        index = np.empty(len(labels), dtype=np.int64)
        for i, label in enumerate(labels):
            position = self._positions.get(label)
            if position is None:
                position = self._positions[label] = len(self._learned)
                self._learned.append(label)
                self._counts.extend(1)
            index[i] = position
        return index

    def update(self, x: Any, weight: float, estimate: Any) -> None:
        self.seq_update([x], np.array([weight]), estimate)

    def seq_update(self, enc: Any, weights: Any, estimate: Any) -> None:
        """Add ``weights[i]`` to the count of observation ``i``'s category."""
        encoded = self._encoder.seq_encode(enc)
        if isinstance(encoded, CategoryIndices):
            index = encoded.index
        else:
            index = self._learned_index(encoded)
        self._counts.add(index, as_weights(weights, index.shape[0]))

    def initialize(self, x: Any, weight: float, rng: np.random.Generator) -> None:
        self.update(x, weight, None)

    def seq_initialize(self, enc: Any, weights: Any, rng: np.random.Generator) -> None:
        self.seq_update(enc, weights, None)

    def combine(self, other: Any) -> CategoricalAccumulator:
        """Add ``other``'s counts (exactly); both must have the same categories (or both learn)."""
        if not isinstance(other, CategoricalAccumulator) or other._encoder != self._encoder:
            raise ArgumentTypeError(
                f"can only combine with a CategoricalAccumulator of {self._encoder!r}. Got {other!r} instead."
            )
        if other._learned is None:
            self._counts.combine(other._counts)
        else:
            self._counts.combine(other._counts, self._learned_index(other._learned).tolist())
        return self

    def value(self) -> Any:
        counts = self._counts.floats()
        if self._learned is None:
            return counts
        return dict(zip(self._learned, counts.tolist(), strict=True))

    def from_value(self, v: Any) -> CategoricalAccumulator:
        if self._learned is None:
            self._counts.set_floats(as_weights(v, len(self._counts), "categorical counts"))
            return self
        if not isinstance(v, Mapping):
            raise ArgumentTypeError(
                f"learned categorical counts must be a dict. Got {type(v).__name__}."
            )
        self._learned, self._positions, self._counts = [], {}, ExactSums(0)
        labels = self._encoder.seq_encode(list(v.keys()))
        assert isinstance(labels, tuple)
        self._learned_index(labels)
        self._counts.set_floats(as_weights(list(v.values()), len(labels), "categorical counts"))
        return self

    def acc_to_encoder(self) -> CategoricalEncoder:
        return self._encoder


class CategoricalAccumulatorFactory(StatisticAccumulatorFactory):
    """Makes empty :class:`CategoricalAccumulator` objects over the same categories."""

    def __init__(self, categories: Any = None) -> None:
        self.categories = as_categories(categories)

    def make(self) -> CategoricalAccumulator:
        return CategoricalAccumulator(self.categories)


class CategoricalEstimator(ParameterEstimator):
    """Maximum-likelihood (or pseudo-count smoothed) estimate of category probabilities.

    ``p_k = (count_k + pseudo_count) / (sum(count) + K * pseudo_count)``.

    Parameters
    ----------
    categories
        ``K`` (the ids ``0 .. K-1``), a sequence of string/integer labels, or ``None``:
        learn the labels from the data (the estimate covers the labels seen, integers
        ascending then strings ascending). Fix them when a later batch may hold a label
        an earlier one lacked (e.g. in :func:`~mixle.stats.stream_em`).
    pseudo_count
        ``None`` (plain maximum likelihood) or a finite number ``>= 0`` added to every
        count.
    """

    def __init__(self, categories: Any = None, *, pseudo_count: float | None = None) -> None:
        self.categories = as_categories(categories)
        self.pseudo_count = as_pseudo_count(pseudo_count)

    def accumulator_factory(self) -> CategoricalAccumulatorFactory:
        return CategoricalAccumulatorFactory(self.categories)

    def estimate(self, nobs: float | None, suff_stat: Any) -> CategoricalDistribution:
        """Return the distribution of the smoothed relative counts in ``suff_stat``.

        Raises
        ------
        ArgumentError
            The counts are malformed, or they and the pseudo-count are all 0.
        """
        if isinstance(suff_stat, CategoricalAccumulator):
            suff_stat = suff_stat.value()
        if self.categories is None:
            if not isinstance(suff_stat, Mapping) or not suff_stat:
                raise ArgumentError(
                    "categorical counts must be a non-empty dict label -> count (no data seen?)."
                )
            labels = _sorted_labels(list(suff_stat.keys()))
            counts = as_weights([suff_stat[x] for x in labels], len(labels), "categorical counts")
            return CategoricalDistribution(
                dict(
                    zip(
                        labels,
                        normalized(counts, self.pseudo_count, "categorical counts").tolist(),
                        strict=True,
                    )
                )
            )
        counts = as_weights(suff_stat, len(self.categories), "categorical counts")
        probs = normalized(counts, self.pseudo_count, "categorical counts")
        if _is_range(self.categories):
            return CategoricalDistribution(probs)
        return CategoricalDistribution(dict(zip(self.categories, probs.tolist(), strict=True)))


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
