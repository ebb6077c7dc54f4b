"""Pieces shared by the distributions built from parts (mixtures, composites)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mixle.errors import ArgumentError, ArgumentTypeError, CorpusError
from mixle.stats.base import StatisticAccumulatorFactory

__all__ = ["PartsAccumulatorFactory", "part_name", "parts", "prefixed"]


class PartsAccumulatorFactory(StatisticAccumulatorFactory):
    """A factory of accumulators made of one accumulator per part (``make`` in subclasses)."""

    def __init__(self, factories: Sequence[StatisticAccumulatorFactory]) -> None:
        self.factories = list(factories)


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


def prefixed(exc: CorpusError, where: str) -> CorpusError:
    """The same error class, its message prefixed by ``where`` (e.g. the part's name)."""
    return type(exc)(f"{where}: {exc}")
