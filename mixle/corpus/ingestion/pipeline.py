"""``ingest``: parallel, deterministic, crash-safe conversion of inputs into a corpus.

How it works
------------
1. :func:`~mixle.corpus.ingestion.inputs.resolve_inputs` finds the files and
   :func:`~mixle.corpus.ingestion.inputs.plan_units` cuts them into work units — a pure
   function of the inputs and ``unit_size``, never of ``workers``.
2. The plan is written to ``OUTPUT/.mixle-ingest/plan.json``. Each unit is converted
   (in a ``spawn`` process pool, or in-process for one worker) into its own shards in
   ``unit-NNNNNN/``; a unit is complete once its ``done.json`` exists. ``resume``
   skips complete units.
3. The dtype is fixed by ``vocab_size``/``dtype``, or else is the widest any unit
   needed; units written narrower are rewritten (streamed, in place).
4. :func:`~mixle.corpus.storage.publish.publish_units` renames the unit shards to
   ``shard-NNNNN`` in input order and writes the manifest last.

So every manifest and shard byte depends only on the inputs and options; peak
memory is O(workers x batch); token bytes are written once by a worker and then
only renamed (or widened).
"""

from __future__ import annotations

import concurrent.futures as futures
import contextlib
import dataclasses
import hashlib
import json
import multiprocessing
import os
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from mixle._file_checks import check_replaceable, read_regular
from mixle._safe_json import loads_bounded
from mixle.corpus.format.manifest import SHARD_FILES, Manifest, parse_manifest
from mixle.corpus.format.spec import MANIFEST_NAME
from mixle.corpus.ingestion.area import MAX_RECORD_BYTES
from mixle.corpus.ingestion.commit import (
    IngestSummary,
    plan_publish,
    published_summary,
    rejects_path,
)
from mixle.corpus.ingestion.executors import run_distributed
from mixle.corpus.ingestion.input_readers import describe_location
from mixle.corpus.ingestion.inputs import WorkUnit
from mixle.corpus.ingestion.options import DEFAULT_UNIT_BYTES, IngestOptions
from mixle.corpus.ingestion.output_guard import (
    check_output_names,
    check_rejects_path,
    hold_output,
)
from mixle.corpus.ingestion.plan import IngestPlan, plan_differences, plan_ingest
from mixle.corpus.ingestion.records import RECORD_DIGEST_KEY, record_digest
from mixle.corpus.ingestion.units import PLAN_NAME, WORK_DIR_NAME, line_base, unit_name
from mixle.corpus.ingestion.workers import (
    DONE_NAME,
    UNIT_RECORDS,
    UnitJob,
    convert_unit,
    init_worker,
    write_json_atomic,
)
from mixle.corpus.storage.cache import default_cache_dir
from mixle.corpus.storage.open import is_url, open_corpus, writable_store
from mixle.corpus.storage.publish import (
    destination_holds_corpus,
    discard_work_dir,
    publish_corpus,
    publish_units,
    read_publish_plan,
)
from mixle.errors import ArgumentError, ArgumentTypeError, CorpusExistsError, IngestError

__all__ = [
    "DEFAULT_UNIT_BYTES",
    "WORK_DIR_NAME",
    "IngestOptions",
    "IngestSummary",
    "ingest",
    "run_ingest",
]


def _load_done(work: str, unit: WorkUnit) -> dict[str, Any] | None:
    """Return a complete unit's statistics and shard entries, or ``None`` to redo it."""
    unit_dir = os.path.join(work, unit_name(unit.index))
    try:
        done_path = os.path.join(unit_dir, DONE_NAME)
        done = loads_bounded(
            read_regular(done_path, IngestError, MAX_RECORD_BYTES), done_path, IngestError
        )
        manifest_path = os.path.join(unit_dir, MANIFEST_NAME)
        manifest = parse_manifest(
            read_regular(manifest_path, IngestError, MAX_RECORD_BYTES), unit_dir
        )
        for entry in manifest.shards:
            for kind in SHARD_FILES:
                path = os.path.join(unit_dir, entry.file_name(kind))
                if os.path.getsize(path) != entry.file_bytes(kind):
                    return None
    except (OSError, ValueError):
        return None
    if not _is_local_record(done, manifest):
        return None
    done["shards"] = [entry.to_dict() for entry in manifest.shards]
    return dict(done)


def _is_local_record(done: Any, manifest: Manifest) -> bool:
    """Whether ``done`` is the record :func:`convert_unit` writes for ``manifest``'s unit
    (anything else, damaged or edited, means: convert the unit again).

    A sealed record (``record_sha256``) must match its digest: ``lines``, which no file
    shows, places the later units' line origins. One without it (an older mixle's)
    resumes as before. A widened unit's record also lists its ``shards``.
    """
    keys = ("documents", "tokens", "skipped", "lines", "input_bytes")
    return (
        isinstance(done, dict)
        and set(done) - {"shards", RECORD_DIGEST_KEY} == {*keys, "dtype"}
        and all(type(done[key]) is int and done[key] >= 0 for key in keys)
        and done["dtype"] == manifest.dtype
        and done["documents"] == manifest.num_documents
        and done["tokens"] == manifest.num_tokens
        and done.get(RECORD_DIGEST_KEY, record_digest(done)) == record_digest(done)
    )


class _Progress:
    """tqdm bar over input bytes with documents/tokens in the postfix (or nothing)."""

    def __init__(self, enabled: bool, total: int, counters: Any) -> None:
        self.counters = counters
        self.bar: Any = None
        self.shown = 0
        self.last = 0.0
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="B", unit_scale=True, desc="ingest", file=sys.stderr)

    def update(self, force: bool = False) -> None:
        if self.bar is None:
            return
        now = time.monotonic()
        if not force and now - self.last < 0.2:
            return
        self.last = now
        documents, tokens, done = list(self.counters)
        self.bar.update(done - self.shown)
        self.shown = done
        self.bar.set_postfix(documents=f"{documents:,}", tokens=f"{tokens:,}", refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.update(force=True)
            self.bar.close()


def _run_units(
    units: Sequence[WorkUnit], job: UnitJob, work: str, workers: int, progress: _Progress
) -> dict[int, dict[str, Any]]:
    """Convert ``units``; return each one's result (stopping early after a failure)."""
    results: dict[int, dict[str, Any]] = {}
    if workers == 1 or len(units) <= 1:
        init_worker(progress.counters, progress.update)
        try:
            for unit in units:
                result = convert_unit(unit, job, os.path.join(work, unit_name(unit.index)))
                results[unit.index] = result
                if "failed" in result:
                    break
        finally:
            init_worker(None)
        return results
    context = multiprocessing.get_context("spawn")
    with futures.ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=init_worker,
        initargs=(progress.counters, None, True),
    ) as pool:
        pending = {
            pool.submit(
                convert_unit, unit, job, os.path.join(work, unit_name(unit.index))
            ): unit.index
            for unit in units
        }
        first_failure: int | None = None
        try:
            while pending:
                done, _ = futures.wait(pending, timeout=0.25, return_when=futures.FIRST_COMPLETED)
                progress.update()
                for future in done:
                    index = pending.pop(future)
                    if future.cancelled():
                        continue
                    result = future.result()
                    results[index] = result
                    if "failed" in result and (first_failure is None or index < first_failure):
                        first_failure = index
                        for other, other_index in list(pending.items()):
                            if other_index > index and other.cancel():
                                pending.pop(other)
        except BaseException:
            for future in pending:
                future.cancel()
            raise
    return results


def _failure_message(
    units: Sequence[WorkUnit], results: dict[int, dict[str, Any]], failed: WorkUnit
) -> str:
    failure = results[failed.index]["failed"]
    if failure["location"] is None:
        return str(failure["reason"])
    base = line_base(failed, units, results)
    where = describe_location(failed, tuple(failure["location"]), base)
    return f"{where}: {failure['reason']}."


def ingest(
    inputs: Any,
    output: str | os.PathLike[str],
    options: IngestOptions | None = None,
    **keywords: Any,
) -> IngestSummary:
    """Convert tokenized (or raw text) inputs into a sharded corpus (directory or URL).

    The options come as an :class:`IngestOptions` (``options``), as keywords (the flat
    names below, as before the options had sections), or both (keywords then replace
    those of ``options``).

    Parameters
    ----------
    inputs
        A path, directory, glob or fsspec URL, or a list of them (order is kept;
        directories and globs are sorted). See :mod:`mixle.corpus.ingestion.inputs`.
    output
        Corpus directory to write (created if missing), or an fsspec URL
        (``s3://bucket/prefix``): then the corpus is built in ``staging_dir`` and
        published with :func:`mixle.corpus.publish_corpus` — shards first, the
        manifest last, so readers never see a partial corpus.
    options
        All the options below at once (default: every default).
    input_format
        Force ``jsonl``, ``parquet``, ``npy``, ``npz``, ``megatron`` or ``text``
        instead of detecting it from extensions.
    field
        JSONL key / Parquet column holding the ids (default ``input_ids``, then
        ``tokens``) or, with ``tokenizer``, the text (default ``text``).
    id_field
        JSONL key / Parquet column whose value is each document's id, kept in the
        origins sidecar (``origin(i).id``, ``find_id``): a string as it is, an integer
        in decimal; a record without one (or with another type) is a bad record.
        ``None`` (default): no ids.
    tokenizer
        ``"bytes"`` (UTF-8 bytes, ids 0..255) or a Hugging Face ``tokenizer.json``
        path (needs ``tokenizers``). Text files default to ``"bytes"``.
    split
        Text files: ``"none"`` (a file is a document) or ``"paragraphs"``.
    append_eos
        Id appended to every document.
    shard_size
        Maximum bytes of a ``.tokens`` file. Work units never share a shard.
    vocab_size, dtype
        Fix the token dtype (``dtype="auto"`` picks it from ``vocab_size``, else from
        the data); ids ``>= vocab_size`` are errors.
    workers
        Processes converting units in parallel; the output does not depend on it.
    on_error
        ``"raise"``: the first bad record (in input order) stops the run, nothing is
        committed; ``"skip"``: bad records are left out and listed in ``rejects``.
    rejects
        Where ``on_error="skip"`` writes one JSON line per skipped record
        (default ``OUTPUT/rejects.jsonl``). Checked before any work: its directory
        must exist and be writable, and it may not name an input or a corpus file.
    resume
        Continue an interrupted ingest of the same inputs and options.
    overwrite
        Replace an existing corpus (and discard an interrupted ingest).
    unit_size
        Input bytes per work unit (affects shard boundaries, so it is recorded). Flat
        inputs (``npz``, ``megatron``) use units of ``max(unit_size, shard_size)``
        bytes of ids, so each unit fills one shard.
    progress
        Show a tqdm bar; ``None`` means "when stderr is a terminal".

    layout
        ``"raw"`` (the memory-mappable format) or ``"zarr"`` (compressed zarr v3 group,
        for storage and transfer; readers decode it into their local cache).
    storage_options
        fsspec options for a URL ``output`` (credentials come from the usual cloud
        configuration when omitted).
    staging_dir
        Where a URL or zarr ``output`` is built before publishing. Default: a
        directory named after ``output`` under ``default_cache_dir()/../staging``, so
        ``resume`` finds it again; removed once published.
    executor
        ``"local"`` (this machine's process pool) or ``"dask"`` (one Dask task per
        unit, see :mod:`mixle.corpus.ingestion.executors`). ``"dask"`` and ``task``
        need ``vocab_size`` or ``dtype`` and write the raw layout; units are written
        straight into ``output`` (local or URL), so a rerun continues where one stopped.
    scheduler
        With ``executor="dask"``: ``tcp://host:port`` or a scheduler file of an existing
        cluster; ``None`` starts a ``LocalCluster`` of ``workers`` processes.
    task
        ``"i/n"``: run only units ``i, i + n, ...`` and return without publishing; once
        all ``n`` tasks finished, :func:`~mixle.corpus.commit_ingest` publishes.
    retries
        With ``executor="dask"``: how many times a failed or lost unit is run again.
    scheduler_timeout
        Seconds to wait for ``scheduler`` before raising :class:`IngestError`.
    plan
        Run the units of this plan (an :class:`IngestPlan` or a file written by
        :meth:`IngestPlan.write`, ``mixle ingest --write-plan``) instead of planning:
        with ``task`` only that task's units, else every unit (``executor``) and then
        the commit. ``inputs`` may be empty or must equal the plan's; options that
        shape the corpus come from the plan (one given that differs is refused), and
        the inputs must still be the planned files (checked first).

    Returns
    -------
    IngestSummary

    Raises
    ------
    IngestError
        A bad record (names file, line or record, and position), an unreadable input
        or a missing optional dependency (with an install hint). Nothing is committed.
    CorpusExistsError
        ``output`` holds a corpus (pass ``overwrite``) or an interrupted ingest (pass
        ``resume`` or ``overwrite``).
    OutputInUseError
        Another live process is ingesting into ``output`` (the message names its pid);
        nothing of its work is touched, whatever ``overwrite`` says.
    ArgumentError
        An option is invalid, or ``resume`` is asked with different inputs/options
        (the message lists both sides).

    Notes
    -----
    Killing the process at any moment leaves the previous manifest (or none) and a
    work directory from which ``resume=True`` produces exactly the corpus an
    uninterrupted run would have. Memory is O(workers x 4 Mi ids) plus 8 bytes per
    document of each open shard.
    """
    if options is None:
        options = IngestOptions(**keywords)
    elif not isinstance(options, IngestOptions):
        raise ArgumentTypeError(
            f"`options` must be an IngestOptions. Got {type(options).__name__} instead."
        )
    elif keywords:
        options = options.replace(**keywords)
    return run_ingest(inputs, output, options)


def run_ingest(
    inputs: Any, output: str | os.PathLike[str], options: IngestOptions
) -> IngestSummary:
    """:func:`ingest` with its options already validated (see there for the contract)."""
    started = time.perf_counter()
    destination = os.fspath(output)
    check_output_names(destination, options.rejects, options.staging_dir)
    staged = options.layout != "raw" or is_url(destination)
    out = _output_directory(destination, options, staged)
    if options.distributed:
        return run_distributed(inputs, destination, options, started)
    plan = plan_ingest(inputs, options)
    if options.on_error == "skip" and options.rejects:  # before any work, not after it
        check_rejects_path(
            os.fspath(options.rejects), [p for f in plan.files for p in (f.path, f.companion)], out
        )
    units = plan.units
    work = os.path.join(out, WORK_DIR_NAME)
    if options.overwrite:  # --overwrite removes the work directory: never with an input in it
        check_replaceable(work, [f.path for f in plan.files], what="the work directory")
    # One writer per output: a second process gets OutputInUseError("in use by pid N")
    # before it looks at (or deletes, with overwrite) anything of the first one's.
    with hold_output(out):
        finished = _prepare_output(
            out, work, plan.to_dict(), resume=options.resume, overwrite=options.overwrite
        )
        if finished is not None:  # --resume of an ingest that had already published
            summary = _finished_summary(finished, out, options, len(units), started)
        else:
            publish_plan = read_publish_plan(work)
            resumed = 0
            if publish_plan is None:
                publish_plan, resumed = _convert_units(plan, work, out, options)
            publish_units(writable_store(out), work, publish_plan, UNIT_RECORDS)
            summary = published_summary(publish_plan, out, len(units), resumed, started)
    if not staged:
        return summary
    return _deliver(
        summary, destination, options.layout, options.storage_options, options.overwrite
    )


def _output_directory(destination: str, options: IngestOptions, staged: bool) -> str:
    """The local directory the corpus is built in (the staging directory when staged)."""
    if not staged:
        return os.path.abspath(destination)
    if not (options.resume or options.overwrite) and destination_holds_corpus(
        destination, options.layout, options.storage_options
    ):
        raise CorpusExistsError(
            f"{destination} already holds a corpus; pass overwrite=True (--overwrite) "
            "to replace it."
        )
    staging = options.staging_dir or _default_staging(destination, options.layout)
    return os.path.abspath(os.fspath(staging))


def _finished_summary(
    finished: Manifest, out: str, options: IngestOptions, units: int, started: float
) -> IngestSummary:
    """The summary of an ingest that had already published before this ``resume``."""
    return IngestSummary(
        output=out,
        documents=finished.num_documents,
        tokens=finished.num_tokens,
        shards=len(finished.shards),
        bytes=sum(e.tokens_bytes + e.offsets_bytes for e in finished.shards),
        dtype=finished.dtype,
        seconds=time.perf_counter() - started,
        skipped=int(finished.metadata["source"].get("skipped_documents", 0)),
        rejects=rejects_path(options.on_error, options.rejects, out),
        units=units,
        resumed_units=units,
    )


def _convert_units(
    plan: IngestPlan, work: str, out: str, options: IngestOptions
) -> tuple[dict[str, Any], int]:
    """Convert every unit not already done; return the publish plan and the resumed count.

    Raises :class:`IngestError` (after removing the work directory) when a unit failed.
    """
    units = plan.units
    job = plan.unit_job()
    results: dict[int, dict[str, Any]] = {}
    todo = []
    for unit in units:
        done = _load_done(work, unit) if options.resume else None
        if done is None:
            todo.append(unit)
        else:
            results[unit.index] = done
    resumed = len(units) - len(todo)
    counters = multiprocessing.get_context("spawn").Array("q", 3)
    for done in results.values():
        counters[0] += done["documents"]
        counters[1] += done["tokens"]
        counters[2] += done["input_bytes"]
    enabled = sys.stderr.isatty() if options.progress is None else bool(options.progress)
    bar = _Progress(enabled, sum(item.size for item in plan.files), counters)
    try:
        results.update(_run_units(todo, job, work, options.workers, bar))
    finally:
        bar.close()
    failed = [unit for unit in units if "failed" in results.get(unit.index, {})]
    if failed:
        message = _failure_message(units, results, failed[0])
        shutil.rmtree(work, ignore_errors=True)
        _remove_if_empty(out)
        raise IngestError(
            f"{message} Nothing was committed; fix the input or pass --on-error skip."
        )
    for unit in units:  # every unit is complete now; re-read its shard entries
        done = _load_done(work, unit)
        if done is None:
            raise IngestError(
                f"work unit {unit.index} ({unit.path}) did not complete; run again with --resume."
            )
        results[unit.index] = done
    rejects = rejects_path(options.on_error, options.rejects, out)
    return plan_publish(work, units, results, plan, rejects), resumed


def _same_corpus(staged: str, destination: str, storage_options: Mapping[str, Any] | None) -> bool:
    """Whether ``destination`` already holds the staged corpus (an earlier publish that
    finished before the crash that preceded this ``resume``)."""
    published = open_corpus(destination, storage_options=storage_options)
    return bool(published.fingerprint == open_corpus(staged).fingerprint)


def _default_staging(destination: str, layout: str) -> str:
    """A stable staging directory for ``destination`` (so ``resume`` finds it again)."""
    key = hashlib.sha256(f"{layout}\0{destination}".encode()).hexdigest()[:20]
    return os.path.join(os.path.dirname(default_cache_dir()), "staging", key)


def _deliver(
    summary: IngestSummary,
    destination: str,
    layout: str,
    storage_options: Mapping[str, Any] | None,
    overwrite: bool,
) -> IngestSummary:
    """Publish the staged corpus ``summary.output`` to ``destination``, then drop it.

    A crash here leaves the staged corpus complete: ``resume`` publishes it again
    (shards are re-uploaded; the manifest still goes last).
    """
    if overwrite or not destination_holds_corpus(destination, layout, storage_options):
        publish_corpus(
            summary.output,
            destination,
            layout=layout,
            storage_options=storage_options,
            overwrite=overwrite,
        )
    elif not _same_corpus(summary.output, destination, storage_options):
        raise CorpusExistsError(
            f"{destination} already holds a different corpus; pass overwrite=True "
            "(--overwrite) to replace it."
        )
    shutil.rmtree(summary.output, ignore_errors=True)
    return dataclasses.replace(summary, output=destination)


def _remove_if_empty(path: str) -> None:
    with contextlib.suppress(OSError):
        os.rmdir(path)


def _finished_manifest(out: str, plan: dict[str, Any]) -> Manifest | None:
    """Return the manifest in ``out`` if an ingest of exactly ``plan``'s source wrote it."""
    try:
        path = os.path.join(out, MANIFEST_NAME)
        manifest = parse_manifest(read_regular(path, IngestError, MAX_RECORD_BYTES), out)
    except (OSError, ValueError):
        return None
    source = dict(manifest.metadata.get("source") or {})
    source.pop("skipped_documents", None)
    return manifest if source == json.loads(json.dumps(plan["source"])) else None


def _previous_plan(value: Any, where: str) -> dict[str, Any]:
    """The plan of an interrupted local ingest (its own plan plus ``overwrite``), checked.

    Raises
    ------
    IngestError
        It is not such a plan (names the file and the field).
    """
    if not isinstance(value, dict) or not isinstance(value.get("overwrite"), bool):
        raise IngestError(
            f"{where}: not the plan of an interrupted ingest (no `overwrite` flag); remove "
            f"{os.path.dirname(where)} or pass --overwrite."
        )
    plan = {key: item for key, item in value.items() if key != "overwrite"}
    IngestPlan.from_dict(plan, where)
    return dict(value)


def _prepare_output(
    out: str, work: str, plan: dict[str, Any], *, resume: bool, overwrite: bool
) -> Manifest | None:
    """Check ``out`` may be written and set up the work directory with ``plan``.

    Returns the existing manifest when ``resume`` finds the ingest already finished
    (killed after publishing, while cleaning up), else ``None``.
    """
    if os.path.exists(out) and not os.path.isdir(out):
        raise CorpusExistsError(f"{out} exists and is not a directory.")
    has_manifest = os.path.exists(os.path.join(out, MANIFEST_NAME))
    plan_path = os.path.join(work, PLAN_NAME)
    previous: dict[str, Any] | None = None
    if resume and os.path.lexists(plan_path):  # read only to compare with it
        data = read_regular(plan_path, IngestError, MAX_RECORD_BYTES)
        previous = _previous_plan(loads_bounded(data, plan_path, IngestError), plan_path)
    shutil.rmtree(f"{work}-done", ignore_errors=True)  # a finished run killed while cleaning up
    if resume and has_manifest:
        finished = _finished_manifest(out, plan)
        if finished is not None:
            discard_work_dir(work)
            return finished
    if resume and previous is not None:
        differences = plan_differences(previous, plan, "interrupted ingest")
        if differences:
            raise ArgumentError(
                "cannot --resume: the interrupted ingest used different inputs or options; "
                + "; ".join(differences)
                + ". Use the same command, or --overwrite to start over."
            )
        allowed = overwrite or previous.get("overwrite") or read_publish_plan(work) is not None
        if has_manifest and not allowed:
            raise CorpusExistsError(
                f"{out} already holds a corpus; pass --overwrite to replace it."
            )
        return None
    if has_manifest and not overwrite:
        raise CorpusExistsError(f"{out} already holds a corpus; pass --overwrite to replace it.")
    if os.path.exists(work):
        if not overwrite and not resume:
            raise CorpusExistsError(
                f"{out} holds an interrupted ingest ({WORK_DIR_NAME}/); pass --resume to continue "
                "it or --overwrite to start over."
            )
        shutil.rmtree(work)
    os.makedirs(work)
    write_json_atomic(plan_path, dict(plan, overwrite=overwrite))
    return None
