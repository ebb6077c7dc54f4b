"""Run one work unit of a plan into the output: step two of a distributed ingest.

:func:`run_unit` converts unit ``i`` of an :class:`~.plan.IngestPlan` and leaves in the
output (local directory or object-store URL)::

    OUTPUT/.mixle-ingest/plan.json                   the plan (written by the first unit)
    OUTPUT/.mixle-ingest/unit-NNNNNN/shard-*.tokens   the unit's shards
    OUTPUT/.mixle-ingest/unit-NNNNNN/manifest.json    the unit's own manifest
    OUTPUT/.mixle-ingest/unit-NNNNNN/done.json        the completion record, last

The record holds the plan id, the unit's statistics and its shard entries (sizes and
SHA-256 digests), so the commit step publishes the corpus from the records alone.

Safe to rerun and to run twice at once: a unit is converted into a private temporary
directory and appears under its final name in one step (a directory rename on local
disk), or its record is uploaded after its files (object stores; the files are a pure
function of the plan, so racing uploads store the same bytes). A unit whose record
exists is not converted again. A worker killed mid-unit leaves only a temporary
directory, which the commit step removes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from mixle._io import rename_atomically
from mixle.corpus.format.manifest import parse_manifest
from mixle.corpus.format.spec import MANIFEST_NAME
from mixle.corpus.ingestion.area import OutputArea
from mixle.corpus.ingestion.formats import get_format
from mixle.corpus.ingestion.input_readers import describe_location
from mixle.corpus.ingestion.inputs import WorkUnit
from mixle.corpus.ingestion.output_guard import claim_output
from mixle.corpus.ingestion.plan import IngestPlan, plan_differences
from mixle.corpus.ingestion.records import record_problems, seal_record
from mixle.corpus.ingestion.workers import DONE_NAME, convert_unit, write_json_atomic
from mixle.errors import ArgumentError, CorpusExistsError, IngestError

__all__ = [
    "PLAN_NAME",
    "WORK_DIR_NAME",
    "ensure_plan",
    "line_base",
    "read_output_plan",
    "run_claimed_unit",
    "run_unit",
    "unit_name",
]

#: Hidden directory inside the output holding an ingest in progress.
WORK_DIR_NAME = ".mixle-ingest"
PLAN_NAME = "plan.json"
_PLAN = f"{WORK_DIR_NAME}/{PLAN_NAME}"
_TEMPORARY = ".tmp-"


def unit_name(index: int) -> str:
    """The directory name of unit ``index`` (``unit-000042``)."""
    return f"unit-{index:06d}"


def ensure_plan(plan: IngestPlan, output: OutputArea) -> None:
    """Record ``plan`` in ``output``, or check that the plan already there is the same.

    Raises
    ------
    CorpusExistsError
        ``output`` already holds a committed corpus.
    IngestError
        ``output`` holds units of a different plan (the message lists the differences).
    """
    if output.exists(MANIFEST_NAME):
        raise CorpusExistsError(
            f"{output.output} already holds a corpus; remove it (or pass --overwrite with "
            "--executor dask) before ingesting into it again."
        )
    previous = read_output_plan(output)
    if previous is None:
        if output.create_bytes(_PLAN, plan_json(plan)):
            return
        # Another task recorded its plan first: ours must be the same.
        previous = read_output_plan(output)
        if previous is None:
            raise IngestError(f"{output.describe(_PLAN)} disappeared while it was recorded.")
    if previous.plan_id != plan.plan_id:
        differences = plan_differences(previous.to_dict(), plan.to_dict(), "the output's plan")
        raise IngestError(
            f"{output.describe(WORK_DIR_NAME)} holds units of a different plan (other inputs or "
            f"options): {'; '.join(differences) or 'plan ids differ'}. Use the same command, "
            "or remove the output first."
        )


def read_output_plan(output: OutputArea) -> IngestPlan | None:
    """The plan recorded in ``output`` by its first unit, or ``None``.

    Raises
    ------
    IngestError
        The recorded file is not a plan this mixle reads (the file is named).
    """
    where = output.describe(_PLAN)
    try:
        value = output.read_json(_PLAN)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise IngestError(f"{where}: not a JSON object.")
        return IngestPlan.from_dict(value, where)
    except IngestError as exc:
        raise IngestError(
            f"{exc} Remove {output.describe(WORK_DIR_NAME)} and run the units again."
        ) from exc


def plan_json(plan: IngestPlan) -> bytes:
    """The plan as stored in the output (sorted keys, like every ingest record)."""
    return json.dumps(plan.to_dict(), sort_keys=True).encode("utf-8")


def run_unit(
    plan: IngestPlan,
    index: int,
    output: str | os.PathLike[str],
    *,
    storage_options: Any = None,
) -> dict[str, Any]:
    """Convert unit ``index`` of ``plan`` into ``output`` and return its completion record.

    Parameters
    ----------
    plan
        The plan (:func:`~mixle.corpus.ingestion.plan.plan_ingest` or
        :meth:`IngestPlan.read`); its dtype must be fixed.
    index
        The unit, ``0 <= index < len(plan.units)``.
    output
        Local corpus directory or fsspec URL; the same for every unit of the plan.
    storage_options
        fsspec options for a URL ``output``.

    Returns
    -------
    dict
        The record: ``plan`` (id), ``unit``, ``documents``, ``tokens``, ``skipped``,
        ``lines``, ``input_bytes``, ``dtype`` and ``shards`` (entries with digests).
        When the unit was already done, the existing record (nothing is converted).

    Raises
    ------
    IngestError
        A bad record (names file, line and position; with ``on_error="raise"``), an
        unreadable input, or a different plan in ``output``. Nothing of the unit is kept.
    ArgumentError
        ``index`` is out of range, or the plan cannot run distributed.
    CorpusExistsError
        ``output`` already holds a committed corpus.
    OutputInUseError
        Another ingest, a coordinator or a commit holds the (local) output's lock
        exclusively; other tasks (shared holders) do not conflict.
    """
    area = OutputArea(os.fspath(output), storage_options)
    with claim_output(area, shared=True):  # the tasks of one plan share the output
        return run_claimed_unit(plan, index, output, storage_options=storage_options)


def run_claimed_unit(
    plan: IngestPlan,
    index: int,
    output: str | os.PathLike[str],
    *,
    storage_options: Any = None,
) -> dict[str, Any]:
    """:func:`run_unit` without taking the output's lock, for a caller that holds it:
    the coordinator of a Dask or process-pool run holds it exclusively on behalf of
    all its workers (which would otherwise be refused by that very lock)."""
    area = OutputArea(os.fspath(output), storage_options)
    plan.require_distributable()
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(plan.units):
        raise ArgumentError(
            f"`index` must be a unit of the plan, 0 <= index < {len(plan.units)}. Got {index!r} instead."
        )
    ensure_plan(plan, area)
    name = unit_name(index)
    plan_id = plan.plan_id
    existing = _finished_record(area, plan, index)
    if existing is not None:
        return existing
    unit = plan.units[index]
    if area.is_url:
        temporary = tempfile.mkdtemp(prefix=f"mixle-{name}-")
    else:
        temporary = area.path(f"{WORK_DIR_NAME}/{name}{_TEMPORARY}{os.getpid()}-{uuid.uuid4().hex}")
    try:
        record = _convert(plan, unit, temporary, plan_id)
        if area.is_url:
            area.upload_directory(temporary, f"{WORK_DIR_NAME}/{name}", last=DONE_NAME)
            return record
        return _place(area, temporary, name, record, plan)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def _finished_record(area: OutputArea, plan: IngestPlan, index: int) -> dict[str, Any] | None:
    """The record of unit ``index`` when the unit is finished and intact, else ``None``
    (missing, of another plan, damaged or not describing its files: run it again)."""
    name = unit_name(index)
    directory = f"{WORK_DIR_NAME}/{name}"
    try:
        record = area.read_json(f"{directory}/{DONE_NAME}")
        if not (isinstance(record, dict) and record.get("plan") == plan.plan_id):
            return None
        if record.get("unit") != index:
            return None
        manifest = area.read_bytes(f"{directory}/{MANIFEST_NAME}")
    except IngestError:
        return None
    sizes = area.sizes(directory)
    if record_problems(name, record, manifest, sizes, plan.dtype, plan.job["on_error"]):
        return None
    return dict(record)


def _convert(plan: IngestPlan, unit: WorkUnit, directory: str, plan_id: str) -> dict[str, Any]:
    """Convert ``unit`` into ``directory``; write and return its record."""
    result = convert_unit(unit, plan.unit_job(), directory)
    if "failed" in result:
        failure = result["failed"]
        if failure["location"] is None:
            raise IngestError(f"{failure['reason']} Nothing was committed.")
        where = describe_location(unit, tuple(failure["location"]), line_base(unit))
        raise IngestError(
            f"{where}: {failure['reason']}. Nothing was committed; fix the input or pass "
            "--on-error skip."
        )
    with open(os.path.join(directory, MANIFEST_NAME), "rb") as handle:
        manifest = parse_manifest(handle.read(), directory)
    record = seal_record(
        dict(
            result,
            plan=plan_id,
            unit=unit.index,
            shards=[entry.to_dict() for entry in manifest.shards],
        )
    )
    write_json_atomic(os.path.join(directory, DONE_NAME), record)
    return record


def line_base(
    unit: WorkUnit,
    units: Sequence[WorkUnit] | None = None,
    results: Mapping[int, Mapping[str, Any]] | None = None,
) -> int:
    """Lines of ``unit``'s file before the unit (only computed to name a bad record).

    With the plan's ``units`` and their ``results`` (the units' records), the sum of
    the lines the earlier units of the same file recorded; without them, counted in
    the file by the unit's format (:meth:`~.formats.InputFormat.lines_before`).
    """
    if units is not None and results is not None:
        return sum(
            results[other.index]["lines"]
            for other in units[: unit.index]
            if other.input == unit.input and other.path == unit.path
        )
    return get_format(unit.format).lines_before(unit)


def _place(
    area: OutputArea, temporary: str, name: str, record: dict[str, Any], plan: IngestPlan
) -> dict[str, Any]:
    """Rename the converted unit to its final name (or keep a finished twin's)."""
    final = area.path(f"{WORK_DIR_NAME}/{name}")
    for _ in range(3):
        try:
            # Not durable: a unit whose rename a crash loses is only run again.
            rename_atomically(temporary, final)
            return record
        except OSError:
            existing = _finished_record(area, plan, record["unit"])
            if existing is not None:
                return existing  # a concurrent run of this unit finished first
            # Leftovers without a record of this plan: move them aside, then retry.
            stale = f"{final}{_TEMPORARY}stale-{uuid.uuid4().hex}"
            with contextlib.suppress(FileNotFoundError):
                rename_atomically(final, stale)
            shutil.rmtree(stale, ignore_errors=True)
    raise IngestError(f"could not place unit {name} in {area.describe(WORK_DIR_NAME)}.")
