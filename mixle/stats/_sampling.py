"""Pieces the samplers share: the seeded generator, child seeds and inverse-CDF draws."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mixle._checks import exact_int

__all__ = ["draw_indices", "part_samplers", "sampler_rng"]


def sampler_rng(seed: int | None) -> np.random.Generator:
    """``numpy.random.default_rng(seed)``; ``seed`` an exact integer or ``None`` (fresh entropy).

    Raises
    ------
    ArgumentTypeError
        ``seed`` is not an exact integer.
    """
    return np.random.default_rng(None if seed is None else exact_int("seed", seed))


def part_samplers(parts: Sequence[Any], rng: np.random.Generator) -> list[Any]:
    """One sampler per part, each seeded by the next draw of ``rng`` (in part order), so
    equal seeds of the whole give equal draws of every part."""
    return [part.sampler(seed=int(rng.integers(2**62))) for part in parts]


def draw_indices(probs: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` int64 indices drawn from ``probs`` by inverse CDF (one uniform each).

    The uniforms are scaled by the CDF's last entry, so ``probs`` need not sum to 1
    exactly; an index is never past the last entry.
    """
    cdf = np.cumsum(probs)
    picks = np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right")
    return np.minimum(picks, probs.shape[0] - 1).astype(np.int64)
