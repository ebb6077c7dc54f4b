"""The records of a mixture: its limits, the source-stream contract, phases, budgets
and accounts.

What :class:`~mixle.data.Mixture` takes (:class:`MixturePhase`) and hands out
(:class:`SourceBudget`, :class:`SourceAccount`), the protocol each source's stream of
rows implements (:class:`SourceStream`: packed rows, best-fit rows, windows, rows cut
by a block schedule) and the bounds of its cursor. No behaviour beyond the records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

__all__ = [
    "ENDLESS",
    "MAX_ROW",
    "OBJECTIVES",
    "MixturePhase",
    "SourceAccount",
    "SourceBudget",
    "SourceStream",
    "source_order_key",
]

OBJECTIVES = ("packed", "windows")
#: The length of a mixture's one epoch in rows and steps: the stream never ends.
ENDLESS = 2**62

# Largest cursor row accepted: rows are int64 on the way to a batch, and a row plus the
# read-ahead (64 global batches) must not wrap. 2**62 rows is a century at 10**9 a second.
MAX_ROW = 1 << 62


class SourceStream(Protocol):
    """One source's endless stream of rows (packed rows, or windows), as a mixture reads it."""

    name: str
    fingerprint: str
    num_documents: int
    rows_per_epoch: int

    def real_tokens(self, rows: int) -> int:
        """Real (trained) targets in the source's first ``rows`` rows, closed form."""
        ...

    def read(self, first: int, count: int, document_ids: bool) -> list[np.ndarray]:
        """The source's rows ``[first, first + count)``: arrays with ``count`` leading rows."""
        ...


@dataclass(frozen=True, slots=True)
class MixturePhase:
    """From global row ``start_row`` on, these ``weights`` (source name -> weight).

    Sources left out get weight 0 in the phase.
    """

    start_row: int
    weights: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class SourceBudget:
    """What a run of a given length needs from one source."""

    name: str
    rows: int
    tokens: int
    epochs: float
    max_epochs: float | None


@dataclass(frozen=True, slots=True)
class SourceAccount:
    """Closed-form accounting of one source over a prefix of global rows."""

    name: str
    rows: int
    real_tokens: int
    epochs_started: int
    realised_share: float
    target_share: float


def source_order_key(name: str) -> str:
    """The identity field of a source's epoch order."""
    return f"source {name!r} order"
