"""A mixture's run planning, in closed form: run lengths, budgets, accounting, rounding.

Every answer comes from the schedule's closed-form row counts and each source's
closed-form real tokens, never from reading a batch: how many global rows a run of so
many rows, tokens or steps is (:func:`run_rows`), what each source must supply for it
and whether that exceeds its ``max_epochs`` (:func:`source_budget`,
:func:`check_budget`), what each source has supplied by a row (:func:`source_accounts`)
and how each phase's weights were rounded to exact rationals (:func:`weight_rounding`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mixle._checks import nonnegative_int
from mixle.data._mixture_phased import source_epochs, source_epochs_started
from mixle.data._mixture_records import SourceAccount, SourceBudget
from mixle.errors import ArgumentError

if TYPE_CHECKING:
    from mixle.data._mixture import Mixture

__all__ = ["check_budget", "run_rows", "source_accounts", "source_budget", "weight_rounding"]


def run_rows(mixture: Mixture, rows: int | None, tokens: int | None, steps: int | None) -> int:
    """Global rows of a run given as exactly one of rows, tokens (target positions) or
    steps (global batches).

    Raises
    ------
    ArgumentError, ArgumentTypeError
        None or more than one is given, or it is not a nonnegative integer.
    """
    given = [
        (n, v) for n, v in (("rows", rows), ("tokens", tokens), ("steps", steps)) if v is not None
    ]
    if len(given) != 1:
        raise ArgumentError("give the run length as exactly one of rows=, tokens= or steps=.")
    name, value = given[0]
    value = nonnegative_int(name, value)
    if name == "rows":
        return value
    if mixture.blocks is not None:
        return mixture.blocks.row_at(value if name == "tokens" else value * mixture.step_size)
    if name == "tokens":
        return -(-value // mixture.block)
    return value * mixture.global_batch_size


def source_budget(mixture: Mixture, total: int) -> list[SourceBudget]:
    """Rows, real tokens and epochs each source supplies to the first ``total`` rows."""
    counts = mixture.schedule.counts_before(total).tolist()
    return [
        SourceBudget(s.name, n, r.real_tokens(n), source_epochs(r, n), s.max_epochs)
        for s, r, n in zip(mixture.sources, mixture.rows, counts, strict=True)
    ]


def check_budget(budget: list[SourceBudget]) -> list[SourceBudget]:
    """``budget``, raising if a source would exceed its ``max_epochs``.

    Raises
    ------
    ArgumentError
        Names the source, the epochs needed and the allowed maximum.
    """
    for entry in budget:
        if entry.max_epochs is not None and entry.epochs > entry.max_epochs:
            raise ArgumentError(
                f"source {entry.name!r} needs {entry.epochs:.4g} epochs for this run "
                f"({entry.rows} rows, {entry.tokens} tokens), but max_epochs is "
                f"{entry.max_epochs}. Lower its weight, shorten the run, raise max_epochs "
                "or add documents."
            )
    return budget


def source_accounts(mixture: Mixture, row: int) -> list[SourceAccount]:
    """Per source, over global rows ``[0, row)``: rows, real tokens, epochs started, the
    realised and the target share."""
    row = nonnegative_int("row", row)
    counts = mixture.schedule.counts_before(row).tolist()
    targets = mixture.schedule.target_rows(row)
    tokens = [r.real_tokens(n) for r, n in zip(mixture.rows, counts, strict=True)]
    total = sum(tokens)
    return [
        SourceAccount(
            s.name,
            n,
            t,
            source_epochs_started(r, n),
            t / total if total else 0.0,
            float(target / row) if row else 0.0,
        )
        for s, r, n, t, target in zip(
            mixture.sources, mixture.rows, counts, tokens, targets, strict=True
        )
    ]


def weight_rounding(mixture: Mixture) -> list[dict[str, Any]]:
    """Per phase and source: the normalised float weight and the exact rational used."""
    return [
        {
            "start_row": start,
            "source": name,
            "weight": share,
            "used": f"{used.numerator}/{used.denominator}",
            "error": float(used) - share,
        }
        for start, schedule in zip(mixture.schedule.starts, mixture.schedule.phases, strict=True)
        for name, (share, used) in zip(mixture.names, schedule.rounding, strict=True)
    ]
