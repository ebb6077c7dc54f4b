"""Commit an ingest: check every unit's record, publish the corpus, manifest last.

Step three of an ingest (after the plan and the units). :func:`commit_ingest` reads
only small JSON files (the plan, each unit's record and manifest) and one listing of
file sizes; the fingerprint comes from the SHA-256 digests the units recorded, so not
one token byte is read. It refuses, before publishing anything:

* records of another plan (other inputs or options), naming the units;
* units that have not finished, listing them;
* a record whose shard file is missing, has another size (truncated) or whose digest
  disagrees with the unit's own manifest, naming the unit and the file.

Then the shards become ``shard-NNNNN`` (renamed on local disk, copied server-side on
an object store) and the manifest is written last; the work directory is removed.
A crash at any point leaves no corpus or the complete one; run the commit again.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mixle._io import atomic_write, atomic_write_bytes
from mixle._safe_json import loads_bounded
from mixle.corpus.format.manifest import ShardEntry, commit_manifest, parse_manifest
from mixle.corpus.format.origins import METADATA_KEY, ORIGINS_NAME, origins_reference
from mixle.corpus.format.scale_sidecars import (
    LocalOffsetsFiles,
    StoreOffsetsFiles,
    write_scale_sidecars,
)
from mixle.corpus.format.shard import rewrite_shard_dtype
from mixle.corpus.format.spec import MANIFEST_NAME
from mixle.corpus.ingestion.area import OutputArea
from mixle.corpus.ingestion.input_readers import describe_location
from mixle.corpus.ingestion.inputs import WorkUnit
from mixle.corpus.ingestion.origins_join import join_unit_origins
from mixle.corpus.ingestion.output_guard import check_output_names, claim_output
from mixle.corpus.ingestion.plan import IngestPlan
from mixle.corpus.ingestion.records import (
    RECORD_DIGEST_KEY,
    load_record,
    record_problems,
    seal_record,
)
from mixle.corpus.ingestion.units import (
    PLAN_NAME,
    WORK_DIR_NAME,
    line_base,
    read_output_plan,
    unit_name,
)
from mixle.corpus.ingestion.workers import (
    DONE_NAME,
    REJECTS_NAME,
    UNIT_RECORDS,
    write_json_atomic,
)
from mixle.corpus.storage.open import is_url
from mixle.corpus.storage.publish import (
    build_publish_plan,
    publish_units,
    read_publish_plan,
    remove_tree,
    write_publish_plan,
)
from mixle.errors import CorpusExistsError, IngestError

__all__ = ["IngestSummary", "commit_ingest", "plan_publish", "published_summary", "rejects_path"]

_DTYPE_ORDER = ("uint16", "uint32", "int64")


@dataclass(frozen=True, slots=True)
class IngestSummary:
    """What an :func:`ingest` run (or a commit, or one task of a task array) produced."""

    output: str
    documents: int
    tokens: int
    shards: int
    bytes: int
    dtype: str
    seconds: float
    skipped: int
    rejects: str | None
    units: int
    resumed_units: int

    @classmethod
    def of_shards(
        cls,
        output: str,
        entries: Sequence[Mapping[str, Any]],
        dtype: str,
        started: float,
        **rest: Any,
    ) -> IngestSummary:
        """A summary of the shard ``entries`` (counts and bytes summed), timed from
        ``started`` (``time.perf_counter()``); ``rest`` gives the other fields."""
        return cls(
            output=output,
            documents=sum(entry["num_documents"] for entry in entries),
            tokens=sum(entry["num_tokens"] for entry in entries),
            shards=len(entries),
            bytes=sum(entry["tokens_bytes"] + entry["offsets_bytes"] for entry in entries),
            dtype=dtype,
            seconds=time.perf_counter() - started,
            **rest,
        )

    @property
    def tokens_per_second(self) -> float:
        """Tokens written per wall-clock second of this run."""
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def format(self) -> str:
        """Return the human-readable summary the CLI prints."""
        lines = [
            f"ingested {self.documents:,} documents, {self.tokens:,} tokens into {self.output}",
            f"  shards: {self.shards}   bytes: {self.bytes:,}   dtype: {self.dtype}",
            f"  time: {self.seconds:.2f} s   throughput: {self.tokens_per_second:,.0f} tokens/s",
            f"  skipped: {self.skipped}" + (f" (see {self.rejects})" if self.rejects else ""),
        ]
        if self.resumed_units:
            lines.append(
                f"  resumed: {self.resumed_units} of {self.units} work units were already done"
            )
        return "\n".join(lines)


def rejects_path(on_error: str, rejects: str | os.PathLike[str] | None, out: str) -> str | None:
    """Where skipped records are listed (``None`` unless ``on_error="skip"``): ``rejects``
    (a local file), or ``rejects.jsonl`` in the output (local or URL)."""
    if on_error != "skip":
        return None
    if rejects:
        return os.path.abspath(os.fspath(rejects))
    return f"{out}/rejects.jsonl" if is_url(out) else os.path.join(out, "rejects.jsonl")


def _rejects_lines(
    work: OutputArea, units: Sequence[WorkUnit], results: dict[int, dict[str, Any]]
) -> Iterator[str]:
    """The lines of the rejects file: every unit's skipped records, in corpus order,
    located by file and line (read from the units' lists in ``work``, all at once)."""
    skipped = [unit for unit in units if results[unit.index]["skipped"]]
    texts = work.read_many([f"{unit_name(unit.index)}/{REJECTS_NAME}" for unit in skipped])
    for unit in skipped:
        base = line_base(unit, units, results)
        name = f"{unit_name(unit.index)}/{REJECTS_NAME}"
        records = _reject_records(
            work.describe(name), texts.get(name), results[unit.index]["skipped"]
        )
        for location, reason in records:
            where = describe_location(unit, location, base)
            yield json.dumps({"where": where, "reason": reason}) + "\n"


def _reject_records(
    where: str, data: bytes | None, skipped: int
) -> list[tuple[tuple[int, int], str]]:
    """The ``(location, reason)`` records of a unit's rejects list ``data``, which must
    hold exactly ``skipped`` of them (the unit's record says so).

    Raises
    ------
    IngestError
        The list is missing, holds another number of records, or a line is not a
        ``{"location": [a, b], "reason": text}`` object (line named).
    """
    lines = [] if data is None else data.splitlines()
    if len(lines) != skipped:
        raise IngestError(
            f"{where}: holds {len(lines) if data is not None else 'no'} skipped records, the "
            f"unit's record says {skipped}; rerun the unit after removing its directory."
        )
    records = []
    for number, line in enumerate(lines, 1):
        value = loads_bounded(line, f"{where} line {number}", IngestError)
        location = value.get("location") if isinstance(value, dict) else None
        if (
            not isinstance(value, dict)
            or set(value) != {"location", "reason"}
            or not isinstance(value["reason"], str)
            or not isinstance(location, list)
            or len(location) != 2
            or any(
                isinstance(item, bool) or not isinstance(item, int) or item < 0 for item in location
            )
        ):
            raise IngestError(
                f"{where} line {number}: not a skipped record "
                '({"location": [a, b], "reason": text}).'
            )
        records.append(((location[0], location[1]), value["reason"]))
    return records


def write_rejects(
    path: str,
    work: OutputArea,
    units: Sequence[WorkUnit],
    results: dict[int, dict[str, Any]],
) -> None:
    """Write the rejects file ``path`` (a local file, atomically, or a URL: one put)
    from the units' lists in the work area ``work``."""
    lines = _rejects_lines(work, units, results)
    if is_url(path):
        directory, name = path.rsplit("/", 1)
        OutputArea(directory, work.storage_options).write_bytes(name, "".join(lines).encode())
        return
    with atomic_write(path, "w") as out:
        out.writelines(lines)


def plan_publish(
    work: str,
    units: Sequence[WorkUnit],
    results: dict[int, dict[str, Any]],
    plan: IngestPlan,
    rejects: str | None,
) -> dict[str, Any]:
    """Widen narrower units, write the rejects file, and write the publish plan.

    The dtype is the plan's, or else the widest any unit needed (units written
    narrower are rewritten in place; only possible on local disk, and only for the
    local pipeline's records of a plan without a fixed dtype: a task array's dtype is
    the plan's). A rewritten record that was sealed (``record_sha256``) is sealed again.
    """
    used = [results[u.index]["dtype"] for u in units if results[u.index]["tokens"]]
    dtype = plan.dtype or max(used, key=_DTYPE_ORDER.index, default="uint16")
    shards: list[tuple[str, dict[str, Any]]] = []
    for unit in units:
        result = results[unit.index]
        unit_dir = os.path.join(work, unit_name(unit.index))
        entries = result["shards"]
        if result["dtype"] != dtype:
            entries = [
                rewrite_shard_dtype(unit_dir, entry, from_dtype=result["dtype"], to_dtype=dtype)
                for entry in entries
            ]
            commit_manifest(unit_dir, entries, dtype=dtype, vocab_size=plan.vocab_size)
            done = {k: v for k, v in result.items() if k != "shards"}
            widened = dict(done, dtype=dtype, shards=entries)
            if RECORD_DIGEST_KEY in result:
                widened = seal_record(widened)
            write_json_atomic(os.path.join(unit_dir, DONE_NAME), widened)
        shards.extend((unit_name(unit.index), entry) for entry in entries)
    skipped = sum(results[u.index]["skipped"] for u in units)
    if rejects is not None:
        write_rejects(rejects, OutputArea(work), units, results)
    metadata: dict[str, Any] = {"source": dict(plan.source, skipped_documents=skipped)}
    area = OutputArea(work)
    files = _publish_origins(
        units,
        results,
        lambda unit, name, limit: area.read_bytes(f"{unit_name(unit.index)}/{name}", limit),
        lambda data: atomic_write_bytes(os.path.join(work, ORIGINS_NAME), data),
        metadata,
        plan.job.get("id_field") is not None,
    )
    _local_sidecars(work, shards, dtype, metadata, files)
    summary = {"skipped": skipped, "rejects": rejects}
    publish_plan = build_publish_plan(
        shards,
        dtype=dtype,
        vocab_size=plan.vocab_size,
        metadata=metadata,
        summary=summary,
        files=files,
    )
    write_publish_plan(work, publish_plan)
    return publish_plan


def _unit_shards(shards: Sequence[tuple[str, Mapping[str, Any]]], dtype: str) -> list[ShardEntry]:
    """The typed entries of the units' shards ``(unit dir name, entry)``, in corpus order."""
    return [
        ShardEntry.from_dict(dict(entry), dtype, f"{unit}/{entry['offsets']}")
        for unit, entry in shards
    ]


def _local_sidecars(
    work: str,
    shards: Sequence[tuple[str, Mapping[str, Any]]],
    dtype: str,
    metadata: dict[str, Any],
    files: list[str],
) -> None:
    """Write the scale sidecars the corpus gets (as every writer decides:
    :func:`~mixle.corpus.format.scale_sidecars.write_scale_sidecars`) into the work
    directory from the units' offsets files, name them in ``metadata`` and add them to
    the ``files`` to publish (they move beside the shards, before the manifest)."""
    offsets = LocalOffsetsFiles(
        [os.path.join(work, unit) for unit, _ in shards], _unit_shards(shards, dtype)
    )
    files.extend(write_scale_sidecars(work, offsets, metadata))


def _remote_sidecars(
    area: OutputArea,
    shards: Sequence[tuple[str, Mapping[str, Any]]],
    dtype: str,
    metadata: dict[str, Any],
    files: list[str],
) -> None:
    """:func:`_local_sidecars` of units in an object store: the offsets read by ranges
    from the units' files, the sidecars written in a local temporary directory and
    stored in the work directory (the publish copies them beside the shards)."""
    entries = _unit_shards(shards, dtype)
    names = [
        f"{WORK_DIR_NAME}/{unit}/{entry.offsets}"
        for (unit, _), entry in zip(shards, entries, strict=True)
    ]
    with tempfile.TemporaryDirectory(prefix="mixle-sidecars-") as local:
        written = write_scale_sidecars(
            local, StoreOffsetsFiles(area.store, names, entries), metadata
        )
        for name in written:
            area.store.put_file(os.path.join(local, name), f"{WORK_DIR_NAME}/{name}")
    files.extend(written)


def _publish_origins(
    units: Sequence[WorkUnit],
    results: Mapping[int, Mapping[str, Any]],
    read: Callable[[WorkUnit, str, int], bytes | None],
    write: Callable[[bytes], None],
    metadata: dict[str, Any],
    with_ids: bool,
) -> list[str]:
    """Join the units' origin runs (and their ids, ``with_ids``: :func:`join_unit_origins`),
    ``write`` the sidecar into the work directory and name it in ``metadata``; return
    the files to publish beside the shards (none when a unit left no runs)."""
    data = join_unit_origins(units, results, read, with_ids)
    if data is None:
        return []
    write(data)
    metadata[METADATA_KEY] = origins_reference(data)
    return [ORIGINS_NAME]


def published_summary(
    publish_plan: dict[str, Any], out: str, units: int, resumed: int, started: float
) -> IngestSummary:
    """The summary of a corpus just published from ``publish_plan``."""
    summary = publish_plan["summary"]
    return IngestSummary.of_shards(
        out,
        publish_plan["entries"],
        publish_plan["dtype"],
        started,
        skipped=summary["skipped"],
        rejects=summary["rejects"],
        units=units,
        resumed_units=resumed,
    )


def _unsealed_problems(records: Mapping[int, Mapping[str, Any]]) -> list[str]:
    """The units whose record lacks ``record_sha256`` while others carry it.

    An output written by one mixle is sealed throughout, or (an older mixle) not at
    all; a record without the digest among sealed ones had it removed (which would let
    an edit of its ``lines`` through) or comes from an older run mixed in: rerun it.
    """
    if not any(RECORD_DIGEST_KEY in record for record in records.values()):
        return []
    return [
        f"unit {unit_name(index)}: done.json lacks the field {RECORD_DIGEST_KEY!r} that the "
        "other units' records carry (removed, or written by an older mixle)"
        for index, record in sorted(records.items())
        if RECORD_DIGEST_KEY not in record
    ]


def check_units(area: OutputArea, plan: IngestPlan) -> dict[int, dict[str, Any]]:
    """Return every unit's record, after checking it against the plan and the files.

    Raises
    ------
    IngestError
        Records of another plan (named), unfinished units (listed), or a record that
        does not describe its unit's files (:func:`~.records.record_problems`: a key
        missing or mistyped, counts or entries other than the unit manifest's, a shard
        file missing or of another size, a ``record_sha256`` other than the record's
        digest; unit and field named), or a record without ``record_sha256`` among
        records that carry it.
    """
    sizes = area.sizes(WORK_DIR_NAME)
    plan_id = plan.plan_id
    expected = {unit_name(unit.index) for unit in plan.units}
    present = {name.split("/", 1)[0] for name in sizes if name.endswith(f"/{DONE_NAME}")}
    foreign = sorted(
        f"{name} (not a unit of this plan)"
        for name in present - expected
        if name.startswith("unit-") and ".tmp-" not in name
    )
    missing: list[str] = []
    problems: list[str] = []
    records: dict[int, dict[str, Any]] = {}
    finished = [unit_name(unit.index) for unit in plan.units if unit_name(unit.index) in present]
    files = area.read_many(
        [
            f"{WORK_DIR_NAME}/{name}/{file}"
            for name in finished
            for file in (DONE_NAME, MANIFEST_NAME)
        ]
    )
    listed: dict[str, dict[str, int]] = {}
    for path, size in sizes.items():
        directory, _, file = path.partition("/")
        listed.setdefault(directory, {})[file] = size
    for unit in plan.units:
        name = unit_name(unit.index)
        if name not in present:
            missing.append(name)
            continue
        done = f"{WORK_DIR_NAME}/{name}/{DONE_NAME}"
        try:
            record = load_record(files.get(done), area.describe(done))
        except IngestError as exc:
            problems.append(str(exc).rstrip("."))
            continue
        if not isinstance(record, dict) or record.get("plan") != plan_id:
            other = record.get("plan") if isinstance(record, dict) else None
            foreign.append(f"{name} (plan {str(other)[:12]}, not {plan_id[:12]})")
            continue
        if record.get("unit") != unit.index:
            problems.append(
                f"unit {name}: done.json field 'unit' is {str(record.get('unit'))[:20]}, "
                f"not {unit.index}"
            )
            continue
        manifest = files.get(f"{WORK_DIR_NAME}/{name}/{MANIFEST_NAME}")
        found = record_problems(
            name, record, manifest, listed.get(name, {}), plan.dtype, plan.job["on_error"]
        )
        problems.extend(found)
        if not found:
            records[unit.index] = record
    problems.extend(_unsealed_problems(records))
    where = area.describe(WORK_DIR_NAME)
    if foreign:
        raise IngestError(
            f"{where} holds units from a different plan (other inputs or options): "
            f"{', '.join(foreign)}. Remove them and rerun those units with this plan."
        )
    if missing:
        raise IngestError(
            f"{len(missing)} of {len(plan.units)} work units have not finished: "
            f"{', '.join(missing)}. Run them (e.g. the missing --task i/n) and commit again; "
            "nothing was published."
        )
    if problems:
        raise IngestError(
            f"cannot commit {area.output}: {'; '.join(problems[:20])}"
            f"{f' (and {len(problems) - 20} more)' if len(problems) > 20 else ''}. Rerun those "
            f"units after removing their directories under {where}; nothing was published."
        )
    return records


def _existing_summary(area: OutputArea, started: float) -> IngestSummary:
    """The summary of the corpus already committed at ``area`` (a repeated commit)."""
    data = area.read_bytes(MANIFEST_NAME)
    if data is None:
        raise IngestError(f"{area.describe(MANIFEST_NAME)} disappeared during the commit.")
    manifest = parse_manifest(data, area.describe(MANIFEST_NAME))
    source = manifest.metadata.get("source")
    skipped = source.get("skipped_documents", 0) if isinstance(source, dict) else 0
    return IngestSummary(
        output=area.output,
        documents=manifest.num_documents,
        tokens=manifest.num_tokens,
        shards=len(manifest.shards),
        bytes=sum(e.tokens_bytes + e.offsets_bytes for e in manifest.shards),
        dtype=manifest.dtype,
        seconds=time.perf_counter() - started,
        skipped=skipped if isinstance(skipped, int) and not isinstance(skipped, bool) else 0,
        rejects=None,
        units=0,
        resumed_units=0,
    )


def commit_ingest(
    output: str | os.PathLike[str],
    *,
    storage_options: Any = None,
    rejects: str | os.PathLike[str] | None = None,
) -> IngestSummary:
    """Publish the units of the ingest in ``output`` as one corpus (manifest last).

    Parameters
    ----------
    output
        The local directory or URL the units were run into.
    storage_options
        fsspec options for a URL ``output``.
    rejects
        With ``on_error="skip"``: where to list skipped records (default
        ``OUTPUT/rejects.jsonl``).

    Returns
    -------
    IngestSummary
        Of the published corpus (of the existing one when already committed).

    Raises
    ------
    IngestError
        No plan in ``output``, or a unit is foreign, unfinished or damaged (see the
        module docstring). Nothing is published then.
    OutputInUseError
        A task or another ingest still holds the (local) output's lock (pid named).
    """
    started = time.perf_counter()
    check_output_names(os.fspath(output), rejects)
    area = OutputArea(os.fspath(output), storage_options)
    with claim_output(area):  # no task may still be writing units
        return _commit(area, rejects, started)


def _commit(
    area: OutputArea, rejects: str | os.PathLike[str] | None, started: float
) -> IngestSummary:
    """:func:`commit_ingest` once the output is claimed."""
    storage_options = area.storage_options
    # The work directory: its local path, or its name in the output's store.
    work = WORK_DIR_NAME if area.is_url else area.path(WORK_DIR_NAME)
    if not area.is_url:
        interrupted = read_publish_plan(work)
        if interrupted is not None:  # a commit killed while publishing: finish it
            publish_units(area.store, work, interrupted, UNIT_RECORDS)
            return published_summary(interrupted, area.output, 0, 0, started)
    plan = read_output_plan(area)
    if plan is None:
        if area.exists(MANIFEST_NAME):
            if not area.is_url:  # killed while removing the renamed work directory
                remove_tree(f"{work}-done")
            return _existing_summary(area, started)
        raise IngestError(
            f"{area.output} holds no ingest to commit (no {WORK_DIR_NAME}/{PLAN_NAME}); run its "
            "units first (mixle ingest INPUT... OUTPUT --task i/n)."
        )
    records = check_units(area, plan)
    units = plan.units
    if not area.is_url:
        path = rejects_path(plan.job["on_error"], rejects, area.output)
        publish_plan = plan_publish(work, units, records, plan, path)
        publish_units(area.store, work, publish_plan, UNIT_RECORDS)
        return published_summary(publish_plan, area.output, len(units), 0, started)
    shards = [(unit_name(u.index), entry) for u in units for entry in records[u.index]["shards"]]
    skipped = sum(records[u.index]["skipped"] for u in units)
    path = rejects_path(plan.job["on_error"], rejects, area.output)
    if path is not None:
        write_rejects(
            path, OutputArea(area.describe(WORK_DIR_NAME), storage_options), units, records
        )
    metadata: dict[str, Any] = {"source": dict(plan.source, skipped_documents=skipped)}
    files = _publish_origins(
        units,
        records,
        lambda unit, name, limit: area.read_bytes(
            f"{WORK_DIR_NAME}/{unit_name(unit.index)}/{name}", limit
        ),
        lambda data: area.write_bytes(f"{WORK_DIR_NAME}/{ORIGINS_NAME}", data),
        metadata,
        plan.job.get("id_field") is not None,
    )
    _remote_sidecars(area, shards, str(plan.dtype), metadata, files)
    publish_plan = build_publish_plan(
        shards,
        dtype=str(plan.dtype),
        vocab_size=plan.vocab_size,
        metadata=metadata,
        summary={"skipped": skipped, "rejects": path},
        files=files,
    )
    _publish_remote(area, publish_plan)
    return published_summary(publish_plan, area.output, len(units), 0, started)


def _publish_remote(area: OutputArea, publish_plan: dict[str, Any]) -> None:
    """Publish the units' shards through the output's store (server-side copies, the
    manifest last), unless a different corpus is already there."""
    existing = area.read_json(MANIFEST_NAME)
    if existing is not None and existing.get("fingerprint") != publish_plan["fingerprint"]:
        raise CorpusExistsError(f"{area.output} already holds a different corpus.")
    publish_units(area.store, WORK_DIR_NAME, publish_plan)  # its name in the store
