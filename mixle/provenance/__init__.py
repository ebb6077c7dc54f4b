"""Provenance: what a ``mixle train`` run trained on, rebuilt in closed form.

:func:`resolve_run` turns a run's checkpoint directory, or a corpus (or mixture) and
its stream options, into a :class:`RunSpec` that rebuilds the run's batch source for
any rank without torch and without replaying the run; :func:`show_step` lists the
rows of one step, document by document (source, token range, targets, origin, id and,
with a :func:`load_decoder` decoder, text); :func:`where` lists every step, rank and
row in which one document was trained on. See ``docs/provenance.md``.
"""

from __future__ import annotations

from mixle.provenance._options import ShowOptions
from mixle.provenance._render import render_step
from mixle.provenance._run import BatchId, RunRecord, RunSpec, resolve_run
from mixle.provenance._show import DocumentSpan, RankRows, RowReport, StepReport, show_step
from mixle.provenance._text import BYTES, Decoder, load_decoder
from mixle.provenance._where import DocumentSightings, WhereReport, render_where, where
from mixle.provenance._where_options import WhereOptions

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
