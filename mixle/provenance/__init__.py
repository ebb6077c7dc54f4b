"""Provenance: what a ``mixle train`` run trained on, rebuilt in closed form.

:func:`resolve_run` turns a run's checkpoint directory, or a corpus (or mixture) and
its stream options, into a :class:`RunSpec` that rebuilds the run's batch source for
any rank without torch and without replaying the run. See ``docs/provenance.md``.
"""

from __future__ import annotations

from mixle.provenance._run import BatchId, RunRecord, RunSpec, resolve_run

__all__ = ["BatchId", "RunRecord", "RunSpec", "resolve_run"]
