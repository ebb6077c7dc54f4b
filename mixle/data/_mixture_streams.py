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

from mixle.data._mixing_rule import RowSchedule
from mixle.data._mixture_best_fit import build_best_fit_rows
from mixle.data._mixture_phased import MixtureBlocks, phased_sources
from mixle.data._mixture_records import SourceStream
from mixle.data._mixture_source import MixtureSource, SourceRows, build_rows
from mixle.data._mixture_windows import SourceWindows
from mixle.data._options import OrderOptions
from mixle.data._packing_options import PackingOptions
from mixle.data._plan_store import PlanStore

__all__ = ["phased_streams", "source_streams"]


def source_streams(
    sources: Sequence[MixtureSource],
    *,
    windows: bool,
    packing: PackingOptions,
    block: int,
    seed: int,
    boundary_id: int | None,
    pad_id: int,
    order: OrderOptions,
    plan_store: PlanStore | None,
) -> list[SourceStream]:
    """One stream per source: windows, or packed rows of ``packing`` in ``order``
    (raises on the first source that is empty or that ``order``'s sizes do not fit)."""
    if windows:
        return [SourceWindows(s, block=block, seed=seed, boundary_id=boundary_id) for s in sources]
    build: Callable[..., Sequence[SourceRows]] = (
        partial(build_best_fit_rows, packing=packing) if packing.is_best_fit else build_rows
    )
    return list(
        build(
            sources,
            block=block,
            seed=seed,
            boundary_id=boundary_id,
            pad_id=pad_id,
            order=order,
            plan_store=plan_store,
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
