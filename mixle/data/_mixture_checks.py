"""The checks of a mixture's arguments, each raising before any batch is read.

:func:`checked_sources` and :func:`checked_phases` validate the sources and the weight
phases, :func:`phase_weights` the weights every phase gives every source, and
:func:`check_objective` the options that only packed rows have. Every error names the
argument, the source or the phase, and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mixle._checks import nonnegative_int
from mixle.data._mixture_records import OBJECTIVES, MixturePhase
from mixle.data._mixture_source import (
    MixtureSource,
    check_unique_names,
    check_weight,
    check_weight_sum,
)
from mixle.data._packing_options import PackingOptions
from mixle.errors import ArgumentError, ArgumentTypeError

__all__ = ["check_objective", "checked_phases", "checked_sources", "phase_weights"]


def check_objective(
    objective: Any,
    packing: PackingOptions,
    *,
    document_ids: bool,
    attention_boundaries: bool,
    order: tuple[str | None, int | None, int | None, int | None],
) -> None:
    """Raise unless ``objective`` is one of :data:`OBJECTIVES` and, for windows, no
    option of packed rows (document ids, attention boundaries, best-fit packing, a
    document ``order`` or its sizes) is asked for.

    Raises
    ------
    ArgumentError
        Names the objective or the option.
    """
    if objective not in OBJECTIVES:
        raise ArgumentError(
            f"`objective` must be one of {', '.join(map(repr, OBJECTIVES))}. Got {objective!r}."
        )
    if objective != "windows":
        return
    for name, asked in (
        ("document_ids=True", document_ids),
        ("attention_boundaries=True", attention_boundaries),
        (f"packing={packing.name!r}", packing.is_best_fit),
    ):
        if asked:
            raise ArgumentError(
                f"`{name}` needs objective='packed': windows are not packed rows "
                "and carry no document ids."
            )
    if any(value is not None for value in order):
        raise ArgumentError(
            "`order`, `block_documents`, `window_blocks` and `order_version` need "
            "objective='packed': "
            "windows are shuffled by their own bijection."
        )


def phase_weights(
    sources: Sequence[MixtureSource], phases: Sequence[MixturePhase]
) -> list[list[float]]:
    """Every source's weight from row 0 and in each phase (0 where a phase leaves it out).

    Raises
    ------
    ArgumentError
        The weights of the sources or of a phase are all zero, or overflow their sum.
    """
    weights = [[s.weight for s in sources]]
    weights += [[float(p.weights.get(s.name, 0.0)) for s in sources] for p in phases]
    for index, row in enumerate(weights):
        where = (
            "the sources"
            if index == 0
            else f"phase {index} (from row {phases[index - 1].start_row})"
        )
        check_weight_sum(row, where)
        if not any(row):
            raise ArgumentError(
                f"the weights of {where} are all zero; give at least one source a positive weight."
            )
    return weights


def checked_sources(sources: Any) -> list[MixtureSource]:
    """``sources`` as a non-empty list of :class:`MixtureSource` of distinct names."""
    if isinstance(sources, str | bytes) or not isinstance(sources, Sequence):
        raise ArgumentTypeError(
            f"`sources` must be a sequence of MixtureSource. Got {type(sources).__name__}."
        )
    checked = list(sources)
    if not checked:
        raise ArgumentError("a mixture needs at least one source.")
    for source in checked:
        if not isinstance(source, MixtureSource):
            raise ArgumentTypeError(
                f"every source must be a MixtureSource. Got {type(source).__name__}."
            )
    check_unique_names((s.name for s in checked), "the mixture")
    return checked


def checked_phases(phases: Any, names: list[str]) -> list[MixturePhase]:
    """``phases`` (:class:`MixturePhase` or ``(start_row, weights)`` pairs) checked:
    strictly increasing starts after row 0, weights of known sources."""
    checked: list[MixturePhase] = []
    previous = 0
    for index, phase in enumerate(phases, 1):
        if not isinstance(phase, MixturePhase):
            start, weights = phase
            phase = MixturePhase(start, weights)
        start = nonnegative_int(f"start_row of phase {index}", phase.start_row)
        if start <= previous:
            raise ArgumentError(
                f"phase {index} starts at row {start}, not after the previous phase (row {previous}); "
                "phases must start at strictly increasing rows, the first after row 0."
            )
        if not isinstance(phase.weights, Mapping):
            raise ArgumentTypeError(f"weights of phase {index} must map source names to weights.")
        for name, weight in phase.weights.items():
            if name not in names:
                raise ArgumentError(
                    f"phase {index} names unknown source {name!r}; the sources are {', '.join(map(repr, names))}."
                )
            check_weight(weight, f"source {name!r} in phase {index}")
        checked.append(MixturePhase(start, dict(phase.weights)))
        previous = start
    return checked
