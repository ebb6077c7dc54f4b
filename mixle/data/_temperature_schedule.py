"""Temperature sampling as a mixing rule: weights proportional to ``weight * size ** alpha``.

Multilingual and multi-domain pretraining often samples source ``i`` with probability
``q_i ** alpha / sum_j q_j ** alpha``, where ``q_i`` is the source's share of the data
(XLM, mT5): ``alpha = 1`` reads every source at its natural share (every source passes
through its epochs at the same pace), smaller ``alpha`` flattens towards uniform and
upsamples the small sources (``alpha -> 0``), larger ``alpha`` sharpens towards the big
ones. :class:`TemperatureSchedule` derives each phase's weights that way from every
source's size (the targets one epoch of it trains: its tokens, see
:class:`~mixle.data._mixing_rule.MixingRule`), multiplied by the weights given (equal
weights give plain temperature sampling; a zero weight still leaves a source out), then
lays them out with the exact schedule. So the guarantee is the exact schedule's, for
the derived weights: after every prefix of ``t`` rows every source's count is within one
row of ``t`` times its derived weight rounded to ``n_i / P`` (``P`` = 65536 unless the
derived weights are short fractions; :meth:`~mixle.data.Mixture.rounding` reports each).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from mixle.data._schedule import MixtureSchedule
from mixle.errors import ArgumentError, ArgumentTypeError

__all__ = ["TemperatureSchedule"]


@dataclass(frozen=True, slots=True)
class TemperatureSchedule:
    """Weights ``weight_i * size_i ** alpha``, scheduled exactly (see the module docstring).

    Parameters
    ----------
    alpha
        The exponent: a finite number ``> 0`` (``1``: every source at its share of the
        data; ``0.3``: the common choice that upsamples small sources).

    Raises
    ------
    ArgumentTypeError
        ``alpha`` is not a real number (a bool, a string...).
    ArgumentError
        ``alpha`` is ``<= 0``, NaN or infinite.

    Examples
    --------
    >>> from mixle.data import Mixture, MixtureSource, TemperatureSchedule
    >>> import numpy as np
    >>> big = [np.arange(100)] * 30
    >>> small = [np.arange(100)] * 3
    >>> mixture = Mixture(
    ...     [MixtureSource(big, 1.0, "big"), MixtureSource(small, 1.0, "small")],
    ...     block=8,
    ...     schedule=TemperatureSchedule(alpha=0.5),
    ... )
    >>> [round(entry["weight"], 3) for entry in mixture.rounding()]
    [0.76, 0.24]
    """

    alpha: float
    name: ClassVar[str] = "temperature"

    def __post_init__(self) -> None:
        alpha = self.alpha
        if isinstance(alpha, bool) or not isinstance(alpha, int | float):
            raise ArgumentTypeError(
                f"`alpha` of TemperatureSchedule must be a real number. Got {alpha!r} "
                f"({type(alpha).__name__}) instead."
            )
        if not math.isfinite(alpha) or alpha <= 0:
            raise ArgumentError(
                f"`alpha` of TemperatureSchedule must be a finite number > 0. Got {alpha!r} instead."
            )
        object.__setattr__(self, "alpha", float(alpha))

    def params(self) -> dict[str, Any]:
        """``{"alpha": alpha}`` (part of the state identity)."""
        return {"alpha": self.alpha}

    def weights(self, weights: Sequence[float], sizes: Sequence[int]) -> list[float]:
        """The derived weights of one phase, normalised to sum to 1.

        Computed in log space (``size ** alpha`` overflows a float for large sizes and
        ``alpha``); a source with a positive weight keeps a positive derived weight (at
        least the smallest normal float), a zero weight stays zero.

        Raises
        ------
        ArgumentError
            ``weights`` and ``sizes`` differ in length, a size is not a positive integer,
            or no weight is positive.
        """
        if len(weights) != len(sizes):
            raise ArgumentError(
                f"TemperatureSchedule got {len(weights)} weight(s) for {len(sizes)} source size(s)."
            )
        for index, size in enumerate(sizes):
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ArgumentError(
                    f"size of source {index} must be a positive integer. Got {size!r} instead."
                )
        logs = [
            math.log(w) + self.alpha * math.log(n) if w > 0 else -math.inf
            for w, n in zip(weights, sizes, strict=True)
        ]
        top = max(logs)
        if top == -math.inf:
            raise ArgumentError("TemperatureSchedule needs at least one positive weight.")
        raw = [0.0 if x == -math.inf else max(math.exp(x - top), sys.float_info.min) for x in logs]
        total = math.fsum(raw)
        return [x / total for x in raw]

    def build(
        self, starts: Sequence[int], weights: Sequence[Sequence[float]], sizes: Sequence[int]
    ) -> MixtureSchedule:
        """The exact schedule of every phase's derived :meth:`weights`."""
        return MixtureSchedule(starts, [self.weights(phase, sizes) for phase in weights])
