"""Provenance: what a ``mixle train`` run trained on, rebuilt in closed form.

:func:`resolve_run` turns a run's checkpoint directory, or a corpus (or mixture) and
its stream options, into a :class:`RunSpec` that rebuilds the run's batch source for
any rank without torch and without replaying the run; :func:`show_step` lists the
rows of one step, document by document (source, token range, targets, origin, id and,
with a :func:`load_decoder` decoder, text); :func:`where` lists every step, rank and
row in which one document was trained on. See ``docs/provenance.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mixle._lazy import attribute_names, load_attribute

if TYPE_CHECKING:
    from mixle.provenance._options import ShowOptions
    from mixle.provenance._render import render_step
    from mixle.provenance._run import BatchId, RunRecord, RunSpec, resolve_run
    from mixle.provenance._show import DocumentSpan, RankRows, RowReport, StepReport, show_step
    from mixle.provenance._text import BYTES, Decoder, load_decoder
    from mixle.provenance._where import DocumentSightings, WhereReport, render_where, where
    from mixle.provenance._where_options import WhereOptions

# Each public name and the module that defines it; loaded by ``__getattr__`` on first use,
# so mixle show --help / mixle where --help load only the option classes.
_HOMES: dict[str, str] = {
    "ShowOptions": "mixle.provenance._options",
    "render_step": "mixle.provenance._render",
    "BatchId": "mixle.provenance._run",
    "RunRecord": "mixle.provenance._run",
    "RunSpec": "mixle.provenance._run",
    "resolve_run": "mixle.provenance._run",
    "DocumentSpan": "mixle.provenance._show",
    "RankRows": "mixle.provenance._show",
    "RowReport": "mixle.provenance._show",
    "StepReport": "mixle.provenance._show",
    "show_step": "mixle.provenance._show",
    "BYTES": "mixle.provenance._text",
    "Decoder": "mixle.provenance._text",
    "load_decoder": "mixle.provenance._text",
    "DocumentSightings": "mixle.provenance._where",
    "WhereReport": "mixle.provenance._where",
    "render_where": "mixle.provenance._where",
    "where": "mixle.provenance._where",
    "WhereOptions": "mixle.provenance._where_options",
}

__all__ = [
    "BYTES",
    "BatchId",
    "Decoder",
    "DocumentSightings",
    "DocumentSpan",
    "RankRows",
    "RowReport",
    "RunRecord",
    "RunSpec",
    "ShowOptions",
    "StepReport",
    "WhereOptions",
    "WhereReport",
    "load_decoder",
    "render_step",
    "render_where",
    "resolve_run",
    "show_step",
    "where",
]


def __getattr__(name: str) -> object:
    """Import the module that defines ``name`` on first use and cache the attribute."""
    return load_attribute(globals(), _HOMES, name)


def __dir__() -> list[str]:
    return attribute_names(globals(), __all__)
