"""Pieces shared by the distributions built from parts (mixtures, composites)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

from mixle.errors import ArgumentError, ArgumentTypeError, MixleError
from mixle.stats.base import SequenceEncodableStatisticAccumulator, StatisticAccumulatorFactory

__all__ = [
    "PartsAccumulatorFactory",
    "combine_parts",
    "from_part_values",
    "naming_part",
    "part_name",
    "parts",
    "prefixed",
]


_Accumulator = TypeVar("_Accumulator", bound=SequenceEncodableStatisticAccumulator)


class PartsAccumulatorFactory(StatisticAccumulatorFactory, Generic[_Accumulator]):
    """A factory of accumulators made of one accumulator per part.

    A subclass names the accumulator it makes in ``accumulator``: a class built from the
    list of part factories.
    """

    accumulator: Callable[[list[StatisticAccumulatorFactory]], _Accumulator]

    def __init__(self, factories: Sequence[StatisticAccumulatorFactory]) -> None:
        self.factories = list(factories)

    def make(self) -> _Accumulator:
        """A fresh accumulator over fresh part accumulators."""
        return self.accumulator(self.factories)


def part_name(noun: str, index: int, owner: Any) -> str:
    """``"component 1 (CategoricalEstimator)"``: how messages name a part."""
    return f"{noun} {index} ({type(owner).__name__})"


def parts(items: Any, kind: type, what: str, noun: str, need: str) -> list[Any]:
    """Validate a non-empty sequence of ``kind`` objects (each failure names the part).

    Raises
    ------
    ArgumentTypeError
        ``items`` is not a sequence, or part ``i`` is not a ``kind``.
    ArgumentError
        ``items`` is empty (the message says ``need``).
    """
    if isinstance(items, str | bytes) or not isinstance(items, Sequence):
        raise ArgumentTypeError(f"`{what}` must be a sequence. Got {type(items).__name__} instead.")
    result = list(items)
    if not result:
        raise ArgumentError(f"{need}. Got no {what}.")
    for index, item in enumerate(result):
        if not isinstance(item, kind):
            raise ArgumentTypeError(
                f"{noun} {index} must be a {kind.__name__}. Got {type(item).__name__} instead."
            )
    return result


def prefixed(exc: MixleError, where: str) -> MixleError:
    """The same error class, its message prefixed by ``where`` (e.g. the part's name)."""
    return type(exc)(f"{where}: {exc}")


@contextmanager
def naming_part(noun: str, index: int, owner: Any) -> Iterator[None]:
    """Re-raise a mixle error from the block as the same class, its message prefixed by
    the part's name (``"field 1 (CategoricalEstimator): ..."``)."""
    try:
        yield
    except MixleError as exc:
        raise prefixed(exc, part_name(noun, index, owner)) from exc


def combine_parts(
    mine: Sequence[SequenceEncodableStatisticAccumulator],
    theirs: Sequence[SequenceEncodableStatisticAccumulator],
    noun: str,
) -> None:
    """Combine ``theirs[k]`` into ``mine[k]`` for every part (equal lengths; errors name
    the part)."""
    for index, (part, other) in enumerate(zip(mine, theirs, strict=True)):
        with naming_part(noun, index, part):
            part.combine(other)


def from_part_values(
    accumulators: Sequence[SequenceEncodableStatisticAccumulator], values: Sequence[Any]
) -> None:
    """Load ``values[k]`` into ``accumulators[k]`` (``from_value``) for every part."""
    for accumulator, value in zip(accumulators, values, strict=True):
        accumulator.from_value(value)
