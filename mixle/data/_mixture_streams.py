"""The row streams of a mixture's sources, one per source, as the objective and the
packing ask.

``objective="windows"``: each source's endless stream of shuffled windows
(:class:`~mixle.data._mixture_windows.SourceWindows`); packed rows: each source's
endless stream of concatenated (:class:`~mixle.data._mixture_source.SourceRows`) or
best-fit (:class:`~mixle.data._mixture_best_fit.BestFitSourceRows`) rows; under a block
schedule the packed streams are cut into each phase's rows
(:class:`~mixle.data._mixture_phased.PhasedSourceRows`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

from mixle.data._mixing_rule import RowSchedule
from mixle.data._mixture_best_fit import build_best_fit_rows
from mixle.data._mixture_phased import MixtureBlocks, phased_sources
from mixle.data._mixture_records import SourceStream
from mixle.data._mixture_source import SourceRows, build_rows
from mixle.data._mixture_windows import SourceWindows

if TYPE_CHECKING:
    from mixle.data._mixture import Mixture

__all__ = ["phased_streams", "source_streams"]


def source_streams(mixture: Mixture) -> list[SourceStream]:
    """One stream per source of ``mixture``: windows, or packed rows of its ``packing``
    in its ``order`` (raises on the first source that is empty or that the order's
    sizes do not fit)."""
    if mixture.objective == "windows":
        return [
            SourceWindows(
                s, block=mixture.block, seed=mixture.seed, boundary_id=mixture.boundary_id
            )
            for s in mixture.sources
        ]
    packing = mixture.packing
    build: Callable[..., Sequence[SourceRows]] = (
        partial(build_best_fit_rows, packing=packing) if packing.is_best_fit else build_rows
    )
    return list(
        build(
            mixture.sources,
            block=mixture.block,
            seed=mixture.seed,
            boundary_id=mixture.boundary_id,
            pad_id=mixture.pad_id,
            order=mixture.order,
            plan_store=mixture.plan_store,
        )
    )


def phased_streams(
    rows: list[SourceStream], schedule: RowSchedule, blocks: MixtureBlocks | None
) -> list[SourceStream]:
    """The sources' streams cut into each block phase's rows (``rows`` themselves
    without a block schedule)."""
    if blocks is None:
        return rows
    counts = [schedule.counts_before(r) for r in blocks.row_starts]
    bases = [r for r in rows if isinstance(r, SourceRows)]
    assert len(bases) == len(rows)  # packed concatenate sources (checked)
    return list(phased_sources(bases, counts, blocks.blocks))
