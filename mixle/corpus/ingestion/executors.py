"""Executors that run the units of a plan beyond one process pool: Dask and task arrays.

``--executor dask``
    Every unit is a Dask task (:func:`~.units.run_unit`) with retries, on a
    ``dask.distributed`` ``LocalCluster`` (``workers`` single-threaded worker
    processes) or on an existing cluster (``--scheduler tcp://host:port`` or a
    scheduler file); progress counts finished tasks; the commit runs here at the end.
``--task i/n``
    No engine at all: this process runs units ``i, i + n, i + 2n, ...`` (for Slurm
    arrays, Kubernetes indexed jobs); ``mixle ingest --commit OUTPUT`` publishes once
    every task has finished.
``--plan PLAN.json``
    The units of a plan file (``--write-plan``) instead of a plan computed here, with
    ``--task``, ``--executor dask``, or this machine's process pool (``--workers``).

Both write exactly the unit files a local run writes and commit them the same way, so
the corpus is identical for any executor, worker count and ``n``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import json
import logging
import multiprocessing
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

from mixle._file_checks import check_replaceable
from mixle._optional import install_hint
from mixle.corpus.format.spec import MANIFEST_NAME
from mixle.corpus.ingestion.area import OutputArea
from mixle.corpus.ingestion.commit import IngestSummary, commit_ingest
from mixle.corpus.ingestion.options import IngestOptions
from mixle.corpus.ingestion.output_guard import claim_output
from mixle.corpus.ingestion.plan import IngestPlan, plan_ingest, recorded_options
from mixle.corpus.ingestion.units import WORK_DIR_NAME, run_claimed_unit, run_unit
from mixle.errors import ArgumentError, CorpusExistsError, IngestError

__all__ = ["load_plan", "run_distributed", "run_task", "run_with_dask"]


def load_plan(inputs: Any, options: IngestOptions) -> IngestPlan:
    """The plan ``options.plan`` (a plan or a plan file), checked against the call.

    Raises
    ------
    IngestError
        The file cannot be read or is not a plan of this format version, or the
        inputs are no longer the planned files.
    ArgumentError
        ``inputs`` (when given) differ from the plan's, or an option that shapes the
        corpus was given with another value than the plan's (both sides listed).
    """
    given = options.plan
    name = "the plan" if isinstance(given, IngestPlan) else f"plan file {os.fspath(given)}"
    if isinstance(given, IngestPlan):  # built in Python: checked as a plan file would be
        try:
            value = json.loads(json.dumps(given.to_dict()))
        except (TypeError, ValueError) as exc:
            raise IngestError(f"the plan is not JSON-able ({exc}).") from exc
        plan = IngestPlan.from_dict(value, name)
    else:
        plan = IngestPlan.read(given)
    listed = [inputs] if isinstance(inputs, str | os.PathLike) else list(inputs or [])
    problems = []
    if listed and [os.fspath(item) for item in listed] != plan.source["inputs"]:
        problems.append(f"inputs in {name}: {plan.source['inputs']} / given: {listed}")
    defaults = recorded_options(IngestOptions())
    planned = plan.source["options"]
    for key, value in recorded_options(options).items():
        if value != defaults.get(key) and value != planned.get(key):
            problems.append(f"{key} in {name}: {planned.get(key)!r} / given: {value!r}")
    if problems:
        raise ArgumentError(
            f"the call does not match {name}: {'; '.join(problems)}. Drop those arguments "
            "(the plan fixes them) or write a new plan."
        )
    plan.check_inputs(name)
    return plan


def run_distributed(
    inputs: Any, output: str, options: IngestOptions, started: float
) -> IngestSummary:
    """Plan (or load ``options.plan``), then run the units with ``options.executor``, as
    task ``options.task``, or in a local process pool (a plan file without either)."""
    plan = plan_ingest(inputs, options) if options.plan is None else load_plan(inputs, options)
    area = OutputArea(output, options.storage_options)
    plan.require_distributable()
    if options.task is not None:
        if options.overwrite:
            raise IngestError(
                "--overwrite cannot be combined with --task (tasks run independently, one "
                "could remove another's work); remove the output before starting the array."
            )
        index, count = options.task
        return run_task(plan, output, index, count, options.storage_options, started)
    # The coordinator holds the output exclusively for all its workers: no task array,
    # no other ingest, no --overwrite elsewhere can touch it meanwhile (nor this
    # --overwrite remove theirs).
    if options.overwrite:  # as for a local ingest: never remove a work dir holding an input
        check_replaceable(
            f"{output.rstrip('/')}/{WORK_DIR_NAME}",
            [f.path for f in plan.files],
            what="the work directory",
        )
    with claim_output(area):
        _prepare(area, options.overwrite)
        if options.executor == "dask":
            run_with_dask(plan, output, options)
        else:
            run_in_pool(plan, output, options.workers, options.storage_options)
        summary = commit_ingest(
            output, storage_options=options.storage_options, rejects=options.rejects
        )
    return dataclasses.replace(summary, seconds=time.perf_counter() - started)


def _prepare(area: OutputArea, overwrite: bool) -> None:
    """Refuse (or, with ``overwrite``, remove) a corpus already at the output.

    The old manifest goes first, so readers see no corpus (never a mix) until the
    commit writes the new one.
    """
    if not area.exists(MANIFEST_NAME):
        return
    if not overwrite:
        raise CorpusExistsError(
            f"{area.output} already holds a corpus; pass --overwrite to replace it."
        )
    area.remove(MANIFEST_NAME)
    area.remove(WORK_DIR_NAME)
    for name in area.sizes(""):
        if name.startswith("shard-") and "/" not in name:
            area.remove(name)


def run_task(
    plan: IngestPlan,
    output: str,
    index: int,
    count: int,
    storage_options: Any = None,
    started: float | None = None,
) -> IngestSummary:
    """Run units ``index, index + count, ...`` of ``plan`` into ``output`` (one task).

    Returns a summary of this task's units (``units`` is how many it ran); the corpus
    appears only after :func:`~.commit.commit_ingest`.
    """
    begin = time.perf_counter() if started is None else started
    mine = [unit.index for unit in plan.units if unit.index % count == index]
    with claim_output(OutputArea(output, storage_options), shared=True):
        records = [run_unit(plan, unit, output, storage_options=storage_options) for unit in mine]
    return IngestSummary.of_shards(
        output,
        [entry for record in records for entry in record["shards"]],
        str(plan.dtype),
        begin,
        skipped=sum(record["skipped"] for record in records),
        rejects=None,
        units=len(mine),
        resumed_units=0,
    )


def run_in_pool(plan: IngestPlan, output: str, workers: int, storage_options: Any = None) -> None:
    """Run every unit of ``plan`` into ``output`` in ``workers`` local processes."""
    run = functools.partial(run_claimed_unit, plan, output=output, storage_options=storage_options)
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
        for _ in pool.map(run, [unit.index for unit in plan.units]):
            pass


def _import_distributed() -> Any:
    try:
        import distributed
    except ImportError as exc:
        raise IngestError(
            "--executor dask needs the optional package `distributed`; install it with: "
            f"{install_hint('dask')}"
        ) from exc
    return distributed


@contextlib.contextmanager
def _client(options: IngestOptions) -> Iterator[Any]:
    """A ``distributed.Client``: on a fresh ``LocalCluster`` or the given scheduler.

    Raises
    ------
    IngestError
        The scheduler cannot be reached within ``options.scheduler_timeout`` seconds,
        or the scheduler file does not exist.
    """
    distributed = _import_distributed()
    scheduler = options.scheduler
    if scheduler is None:
        with (
            distributed.LocalCluster(
                n_workers=options.workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=":0",
                silence_logs=logging.ERROR,
            ) as cluster,
            distributed.Client(cluster) as client,
        ):
            yield client
        return
    timeout = f"{options.scheduler_timeout}s"
    try:
        if "://" in scheduler:
            client = distributed.Client(scheduler, timeout=timeout)
        else:
            if not os.path.isfile(scheduler):
                raise IngestError(
                    f"--scheduler {scheduler!r} is neither an address (tcp://host:port) nor an "
                    "existing scheduler file."
                )
            client = distributed.Client(scheduler_file=scheduler, timeout=timeout)
    except (OSError, TimeoutError) as exc:
        raise IngestError(
            f"cannot reach the dask scheduler at {scheduler} within "
            f"{options.scheduler_timeout:g} s ({type(exc).__name__}: {exc}). Check the "
            "address or scheduler file and that the scheduler is running."
        ) from exc
    with client:
        yield client


def run_with_dask(plan: IngestPlan, output: str, options: IngestOptions) -> None:
    """Run every unit of ``plan`` as a Dask task (``options.retries`` retries each).

    A worker that dies mid-unit (killed, out of memory) loses only its temporary
    directory; the scheduler runs the unit again elsewhere. Progress is the number of
    finished tasks. The first failing unit (in completion order) is raised, after
    the remaining tasks are cancelled.
    """
    distributed = _import_distributed()
    enabled = sys.stderr.isatty() if options.progress is None else bool(options.progress)
    plan_id = plan.plan_id[:12]
    storage = dict(options.storage_options or {})
    with _client(options) as client:
        futures = [
            client.submit(
                run_claimed_unit,
                plan,
                unit.index,
                output,
                storage_options=storage,
                key=f"mixle-unit-{plan_id}-{unit.index}",
                retries=options.retries,
                pure=False,
            )
            for unit in plan.units
        ]
        bar: Any = None
        if enabled:
            from tqdm import tqdm

            bar = tqdm(total=len(futures), unit="unit", desc="ingest (dask)", file=sys.stderr)
        try:
            for future in distributed.as_completed(futures):
                future.result()  # raises the unit's error
                if bar is not None:
                    bar.update(1)
        except BaseException:
            client.cancel(futures)
            raise
        finally:
            if bar is not None:
                bar.close()
