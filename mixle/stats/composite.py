"""``CompositeDistribution``/``CompositeEstimator``: independent fields of tuple observations.

An observation is a tuple ``(x_0, ..., x_{F-1})``; field ``f`` follows component ``f``
independently of the others, so ``log p(x) = sum_f log p_f(x_f)``. The encoding is the
tuple of each field's encoding, each field's accumulator sees only its field (with the
observation's weight), and the statistic is the tuple of the fields' statistics — so a
composite is exactly as foldable as its fields. Example: ``(label, document)`` with a
:class:`~mixle.stats.CategoricalDistribution` label and a document-observation
transformer leaf.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle._checks import positive_int
from mixle.errors import ArgumentError, ArgumentTypeError, CheckpointError
from mixle.stats._compose import (
    PartsAccumulatorFactory,
    combine_parts,
    from_part_values,
    naming_part,
    parts,
)
from mixle.stats._sampling import part_samplers, sampler_rng
from mixle.stats.base import (
    DataSequenceEncoder,
    DistributionSampler,
    ParameterEstimator,
    SequenceEncodableProbabilityDistribution,
    SequenceEncodableStatisticAccumulator,
    StatisticAccumulatorFactory,
    as_weights,
)
from mixle.stats.registry import from_dict, register, require_version

__all__ = [
    "CompositeAccumulator",
    "CompositeAccumulatorFactory",
    "CompositeDistribution",
    "CompositeEncoder",
    "CompositeEncoding",
    "CompositeEstimator",
    "CompositeSampler",
]


def _fields(items: Any, kind: type, what: str) -> list[Any]:
    return parts(items, kind, what, "field", "a composite needs at least one field")


@dataclass(frozen=True, slots=True)
class CompositeEncoding:
    """Encoded tuple observations: ``fields[f]`` is field ``f``'s encoding."""

    fields: tuple[Any, ...]


class CompositeEncoder(DataSequenceEncoder):
    """Encode tuple observations as the tuple of each field's encoding."""

    def __init__(self, encoders: Sequence[DataSequenceEncoder]) -> None:
        self.encoders = tuple(_fields(encoders, DataSequenceEncoder, "encoders"))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CompositeEncoder) and other.encoders == self.encoders

    def __hash__(self) -> int:
        return hash(("CompositeEncoder", self.encoders))

    def __repr__(self) -> str:
        return f"CompositeEncoder({list(self.encoders)!r})"

    def seq_encode(self, x: Sequence[Any]) -> CompositeEncoding:
        """Encode a sequence of ``F``-tuples (a :class:`CompositeEncoding` passes through).

        Raises
        ------
        ArgumentError
            An observation is not a tuple/list of ``F`` fields (its index named), or a
            field's encoder rejects a value (the field named).
        """
        if isinstance(x, CompositeEncoding):
            return x
        observations = list(x)
        if not observations:
            raise ArgumentError("`x` must hold at least one observation. Got none.")
        width = len(self.encoders)
        for i, obs in enumerate(observations):
            if not isinstance(obs, tuple | list) or len(obs) != width:
                raise ArgumentError(
                    f"observation {i} must be a tuple of {width} fields. Got {obs!r} instead."
                )
        encoded = []
        for f, encoder in enumerate(self.encoders):
            with naming_part("field", f, encoder):
                encoded.append(encoder.seq_encode([obs[f] for obs in observations]))
        return CompositeEncoding(tuple(encoded))

    def encoded_len(self, enc: Any) -> int:  # type: ignore[override]
        return self.encoders[0].encoded_len(enc.fields[0])

    def encoded_slice(self, enc: Any, start: int, stop: int) -> CompositeEncoding:  # type: ignore[override]
        return CompositeEncoding(
            tuple(
                e.encoded_slice(part, start, stop)
                for e, part in zip(self.encoders, enc.fields, strict=True)
            )
        )


@register("CompositeDistribution")
class CompositeDistribution(SequenceEncodableProbabilityDistribution):
    """Independent fields: ``log p((x_0, ..., x_{F-1})) = sum_f log p_f(x_f)``.

    Parameters
    ----------
    components
        One distribution per field (``F >= 1``).
    """

    def __init__(self, components: Sequence[SequenceEncodableProbabilityDistribution]) -> None:
        self.components = _fields(
            components, SequenceEncodableProbabilityDistribution, "components"
        )
        self._encoder = CompositeEncoder([c.dist_to_encoder() for c in self.components])

    def seq_log_density(self, enc: Any) -> np.ndarray:
        """Return the sum over fields of each field's log-density."""
        encoded = self._encoder.seq_encode(enc)
        total = np.zeros(self._encoder.encoded_len(encoded), dtype=np.float64)
        for component, part in zip(self.components, encoded.fields, strict=True):
            total += np.asarray(component.seq_log_density(part), dtype=np.float64)
        return total

    def log_density(self, x: Any) -> float:
        return float(self.seq_log_density([x])[0])

    def sampler(self, seed: int | None = None) -> CompositeSampler:
        return CompositeSampler(self, seed)

    def estimator(self, pseudo_count: float | None = None) -> CompositeEstimator:
        """Return the composite of every field's estimator (``pseudo_count`` goes to each)."""
        return CompositeEstimator([c.estimator(pseudo_count) for c in self.components])

    def dist_to_encoder(self) -> CompositeEncoder:
        return self._encoder

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "CompositeDistribution",
            "version": 1,
            "components": [c.to_dict() for c in self.components],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], **kwargs: Any) -> CompositeDistribution:
        """Rebuild from :meth:`to_dict`; keyword arguments go to every field's ``from_dict``."""
        require_version(d, "CompositeDistribution dict")
        try:
            return cls([from_dict(c, **kwargs) for c in d["components"]])
        except (KeyError, TypeError, ArgumentError) as exc:
            raise CheckpointError(f"CompositeDistribution dict is invalid: {exc!r}") from exc


class CompositeSampler(DistributionSampler):
    """Draws each field independently; field samplers are seeded from one generator.

    ``field_kwargs[f]`` (optional) holds keyword arguments for field ``f``'s sampler,
    e.g. ``{"prompt": [0], "n_tokens": 20}`` for a document leaf.
    """

    def __init__(self, dist: CompositeDistribution, seed: int | None = None) -> None:
        self.dist = dist
        self._samplers = part_samplers(dist.components, sampler_rng(seed))

    def sample(
        self, size: int | None = None, *, field_kwargs: Sequence[Mapping[str, Any]] | None = None
    ) -> Any:
        """Draw one tuple, or a list of ``size`` tuples."""
        kwargs = [{} for _ in self._samplers] if field_kwargs is None else list(field_kwargs)
        if len(kwargs) != len(self._samplers):
            raise ArgumentError(
                f"`field_kwargs` must hold one mapping per field ({len(self._samplers)}). "
                f"Got {len(kwargs)} instead."
            )
        n = 1 if size is None else positive_int("size", size)
        draws = [
            tuple(s.sample(**kw) for s, kw in zip(self._samplers, kwargs, strict=True))
            for _ in range(n)
        ]
        return draws[0] if size is None else draws


class CompositeAccumulator(SequenceEncodableStatisticAccumulator):
    """One accumulator per field; ``value()`` is the tuple of their values."""

    def __init__(self, factories: Sequence[StatisticAccumulatorFactory]) -> None:
        self.fields = [f.make() for f in factories]
        self._encoder = CompositeEncoder([acc.acc_to_encoder() for acc in self.fields])

    def seq_update(self, enc: Any, weights: Any, estimate: Any) -> None:
        """Fold field ``f`` of every observation into accumulator ``f``, same weights.

        ``estimate`` is the current :class:`CompositeDistribution` (or ``None``).
        """
        encoded = self._encoder.seq_encode(enc)
        w = as_weights(weights, self._encoder.encoded_len(encoded))
        for f, (acc, part) in enumerate(zip(self.fields, encoded.fields, strict=True)):
            current = None if estimate is None else estimate.components[f]
            with naming_part("field", f, acc):
                acc.seq_update(part, w, current)

    def update(self, x: Any, weight: float, estimate: Any) -> None:
        self.seq_update([x], np.array([weight]), estimate)

    def seq_initialize(self, enc: Any, weights: Any, rng: np.random.Generator) -> None:
        encoded = self._encoder.seq_encode(enc)
        w = as_weights(weights, self._encoder.encoded_len(encoded))
        for acc, part in zip(self.fields, encoded.fields, strict=True):
            acc.seq_initialize(part, w, rng)

    def initialize(self, x: Any, weight: float, rng: np.random.Generator) -> None:
        self.seq_initialize([x], np.array([weight]), rng)

    def combine(self, other: Any) -> CompositeAccumulator:
        if not isinstance(other, CompositeAccumulator) or len(other.fields) != len(self.fields):
            raise ArgumentTypeError(
                f"can only combine with a CompositeAccumulator of {len(self.fields)} fields. "
                f"Got {type(other).__name__}."
            )
        combine_parts(self.fields, other.fields, "field")
        return self

    def value(self) -> tuple[Any, ...]:
        return tuple(acc.value() for acc in self.fields)

    def from_value(self, v: Any) -> CompositeAccumulator:
        if not isinstance(v, tuple) or len(v) != len(self.fields):
            raise ArgumentTypeError(f"`v` must be a tuple of {len(self.fields)} field statistics.")
        from_part_values(self.fields, v)
        return self

    def acc_to_encoder(self) -> CompositeEncoder:
        return self._encoder


class CompositeAccumulatorFactory(PartsAccumulatorFactory[CompositeAccumulator]):
    """Makes composite accumulators over fresh field accumulators."""

    accumulator = CompositeAccumulator


class CompositeEstimator(ParameterEstimator):
    """Estimates every field from its own statistic.

    Parameters
    ----------
    estimators
        One estimator per field (``F >= 1``).
    """

    def __init__(self, estimators: Sequence[ParameterEstimator]) -> None:
        self.estimators = _fields(estimators, ParameterEstimator, "estimators")

    def accumulator_factory(self) -> CompositeAccumulatorFactory:
        return CompositeAccumulatorFactory([e.accumulator_factory() for e in self.estimators])

    def estimate(self, nobs: float | None, suff_stat: Any) -> CompositeDistribution:
        """Return the composite of each field's estimate (errors name the field)."""
        stat = suff_stat.value() if isinstance(suff_stat, CompositeAccumulator) else suff_stat
        if not isinstance(stat, tuple) or len(stat) != len(self.estimators):
            raise ArgumentTypeError(
                f"`suff_stat` must be a tuple of {len(self.estimators)} field statistics. "
                f"Got {type(suff_stat).__name__}."
            )
        fields = []
        for f, (est, value) in enumerate(zip(self.estimators, stat, strict=True)):
            with naming_part("field", f, est):
                fields.append(est.estimate(nobs, value))
        return CompositeDistribution(fields)
