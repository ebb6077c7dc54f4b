"""How a mixture decides which source each global row comes from: the mixing-rule contract.

A :class:`~mixle.data.Mixture` takes a *mixing rule* (``Mixture(..., schedule=rule)``)
and asks it once, at construction, for a :class:`RowSchedule` over its phases: given
the phases' first rows, every phase's weights and every source's size, the rule
returns the object the mixture reads from then on. A row schedule answers, in closed
form and with no per-step state,

- which source global row ``k`` comes from and which row of that source's own stream
  it is (:meth:`RowSchedule.source_of`, vectorised as :meth:`RowSchedule.lookup`),
  O(1) per row (O(log phases) to find the phase);
- how many of the global rows ``[0, k)`` each source contributed
  (:meth:`RowSchedule.counts_before`) and how many it was meant to
  (:meth:`RowSchedule.target_rows`), for any ``k``;
- per phase, the integer counts per period that the phase uses
  (:attr:`PhaseCounts.counts`, part of the state identity) and how each weight was
  rounded (:attr:`PhaseCounts.rounding`).

A source's rows must come in order of its own stream (the ``j``-th row the schedule
hands source ``i`` is row ``j`` of ``i``'s stream, counted across phases), so nothing is
repeated or skipped; :class:`~mixle.data._schedule.MixtureSchedule` is such a schedule,
and every rule here builds one (a new rule usually only derives the weights it is given).

:class:`ExactSchedule` is the default rule: the weights as given, laid out by the exact
schedule of :mod:`mixle.data._schedule`. A rule's ``name`` and ``params()`` enter the
mixture's stream identity unless the name is ``"exact"`` (so states saved before rules
existed, and every default state, stay byte-identical), which makes a state saved under
one rule refused by another with the field named (``schedule in checkpoint: ...``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from mixle.data._schedule import MixtureSchedule
from mixle.errors import ArgumentError, ArgumentTypeError

__all__ = [
    "DEFAULT_RULE_NAME",
    "ExactSchedule",
    "MixingRule",
    "PhaseCounts",
    "RowSchedule",
    "built_schedule",
    "checked_rule",
    "rule_from_table",
    "rule_identity",
]

DEFAULT_RULE_NAME = "exact"
"""The name of the default rule, whose states carry no ``schedule`` identity field."""


class PhaseCounts(Protocol):
    """One phase of a row schedule: ``counts[i]`` rows of source ``i`` per ``period`` rows."""

    @property
    def counts(self) -> tuple[int, ...]: ...

    @property
    def period(self) -> int: ...

    @property
    def rounding(self) -> tuple[tuple[float, Fraction], ...]:
        """Per source, ``(normalised float weight, counts[i] / period)``."""
        ...


@runtime_checkable
class RowSchedule(Protocol):
    """The compiled schedule a mixture reads (see the module docstring).

    ``starts[p]`` is the first global row of phase ``p`` (``starts[0] == 0``, strictly
    increasing) and ``phases[p]`` its counts. Every method is a pure function of its
    argument: no state changes, so any row can be read in any order.
    """

    @property
    def starts(self) -> Sequence[int]: ...

    @property
    def phases(self) -> Sequence[PhaseCounts]: ...

    def source_of(self, row: int) -> tuple[int, int]:
        """``(source, the source's own row index)`` of global row ``row``."""
        ...

    def lookup(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`source_of` of every row of the int64 array ``rows``: two int64 arrays."""
        ...

    def counts_before(self, row: int) -> np.ndarray:
        """Rows each source contributed to global rows ``[0, row)`` (int64)."""
        ...

    def target_rows(self, row: int) -> np.ndarray:
        """Rows each source was meant to contribute to ``[0, row)`` (float64)."""
        ...


@runtime_checkable
class MixingRule(Protocol):
    """How a mixture turns its weights into a :class:`RowSchedule`.

    ``name`` identifies the rule (``"exact"`` is the default's); ``params()`` is a
    JSON-able dict of everything else that changes the schedule; both go into the
    state identity of a non-default rule. ``build(starts, weights, sizes)`` gets the
    phases' first rows, one weight sequence per phase (validated: finite, ``>= 0``, not
    all zero; in the sources' order) and ``sizes[i]``, the targets one epoch of source
    ``i`` trains (its token count, counting boundaries and less one per epoch for packed
    rows; its windows for the windows objective; always ``>= 1``). It must be a pure
    function of those arguments and the rule's parameters, and give a source with a
    positive weight in a phase a positive count in it. ``params()`` are the keywords
    that build the rule again (``type(rule)(**rule.params())`` is an equal rule), which
    is how a mixture file names one (``[schedule]``, see :func:`rule_from_table`).
    """

    @property
    def name(self) -> str: ...

    def params(self) -> dict[str, Any]: ...

    def build(
        self, starts: Sequence[int], weights: Sequence[Sequence[float]], sizes: Sequence[int]
    ) -> RowSchedule: ...


@dataclass(frozen=True, slots=True)
class ExactSchedule:
    """The default rule: each phase's weights as given, scheduled exactly.

    After every prefix of ``t`` rows of a phase every source's count is within one row
    of ``t * n_i / P``, its weight rounded to ``n_i / P`` (see
    :mod:`mixle.data._schedule`). The sources' sizes play no part.
    """

    name: ClassVar[str] = DEFAULT_RULE_NAME

    def params(self) -> dict[str, Any]:
        """``{}``: the exact rule has no parameters."""
        return {}

    def build(
        self, starts: Sequence[int], weights: Sequence[Sequence[float]], sizes: Sequence[int]
    ) -> MixtureSchedule:
        """The exact schedule of ``weights`` (``sizes`` unused)."""
        return MixtureSchedule(starts, weights)


def checked_rule(value: Any) -> MixingRule:
    """``value`` when it is a :class:`MixingRule`; :class:`ExactSchedule` for ``None``.

    Raises
    ------
    ArgumentTypeError
        Anything else.
    """
    if value is None:
        return ExactSchedule()
    if not isinstance(value, MixingRule) or not isinstance(value.name, str):
        raise ArgumentTypeError(
            "`schedule` must be a mixing rule (a `name`, `params()` and "
            "`build(starts, weights, sizes)`), e.g. ExactSchedule() or "
            f"TemperatureSchedule(alpha=0.3). Got {type(value).__name__} instead."
        )
    return value


def built_schedule(
    rule: MixingRule,
    starts: Sequence[int],
    weights: Sequence[Sequence[float]],
    sizes: Sequence[int],
) -> RowSchedule:
    """``rule.build(starts, weights, sizes)``, checked against the contract's shape.

    Raises
    ------
    ArgumentTypeError
        The rule returned something that is not a :class:`RowSchedule`.
    ArgumentError
        Its phases start elsewhere than ``starts``, a phase has counts for another
        number of sources, or a source with a positive weight in a phase has no rows
        in it (each naming the rule and the phase).
    """
    schedule = rule.build(starts, weights, sizes)
    if not isinstance(schedule, RowSchedule):
        raise ArgumentTypeError(
            f"mixing rule {rule.name!r} built a {type(schedule).__name__}, not a row schedule "
            "(starts, phases, source_of, lookup, counts_before, target_rows)."
        )
    if list(schedule.starts) != list(starts) or len(schedule.phases) != len(weights):
        raise ArgumentError(
            f"mixing rule {rule.name!r} built phases starting at rows "
            f"{list(schedule.starts)}; the mixture's phases start at {list(starts)}."
        )
    for index, (phase, row) in enumerate(zip(schedule.phases, weights, strict=True)):
        counts = phase.counts
        if len(counts) != len(row) or any(
            w > 0 and not n for w, n in zip(row, counts, strict=True)
        ):
            raise ArgumentError(
                f"mixing rule {rule.name!r} gave phase {index} the counts {list(counts)} for "
                f"the weights {list(row)}: one count per source, positive where the weight is."
            )
    return schedule


def rule_identity(rule: MixingRule) -> dict[str, Any] | None:
    """``{"name": rule.name, **rule.params()}``, or ``None`` for the default rule."""
    if rule.name == DEFAULT_RULE_NAME:
        return None
    return {"name": rule.name, **rule.params()}


def rule_from_table(
    table: Mapping[str, Any], rules: Mapping[str, Callable[..., MixingRule]], where: str
) -> MixingRule:
    """The rule a ``{"rule": name, **params}`` table names, built as ``rules[name](**params)``.

    Raises
    ------
    ArgumentError, ArgumentTypeError
        No or an unknown ``rule`` (the known ones listed), a parameter the rule does
        not take, or a bad parameter value (the rule's own error), each naming ``where``.
    """
    name = table.get("rule")
    if not isinstance(name, str) or name not in rules:
        raise ArgumentError(
            f"{where} needs `rule`, one of {', '.join(map(repr, sorted(rules)))}. Got {name!r}."
        )
    params = {key: value for key, value in table.items() if key != "rule"}
    try:
        return rules[name](**params)
    except TypeError as exc:
        if isinstance(exc, ArgumentTypeError):
            raise ArgumentTypeError(f"{where}: {exc}") from None
        raise ArgumentError(
            f"{where}: the parameters of rule {name!r} do not fit it ({exc}); "
            f"got {', '.join(map(repr, sorted(params))) or 'none'}."
        ) from None
    except ArgumentError as exc:
        raise type(exc)(f"{where}: {exc}") from None
