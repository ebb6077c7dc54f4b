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

Both write exactly the unit files a local run writes and commit them the same way, so
the corpus is identical for any executor, worker count and ``n``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

from mixle._optional import install_hint
from mixle.corpus.format.spec import MANIFEST_NAME
from mixle.corpus.ingestion.area import OutputArea
from mixle.corpus.ingestion.commit import IngestSummary, commit_ingest
from mixle.corpus.ingestion.options import IngestOptions
from mixle.corpus.ingestion.plan import IngestPlan, plan_ingest
from mixle.corpus.ingestion.units import WORK_DIR_NAME, require_distributable, run_unit
from mixle.errors import CorpusExistsError, IngestError

__all__ = ["run_distributed", "run_task", "run_with_dask"]


def run_distributed(
    inputs: Any, output: str, options: IngestOptions, started: float
) -> IngestSummary:
    """Plan, then run the units with ``options.executor`` or as task ``options.task``."""
    plan = plan_ingest(inputs, options)
    area = OutputArea(output, options.storage_options)
    require_distributable(plan, area)
    if options.task is not None:
        if options.overwrite:
            raise IngestError(
                "--overwrite cannot be combined with --task (tasks run independently, one "
                "could remove another's work); remove the output before starting the array."
            )
        index, count = options.task
        return run_task(plan, output, index, count, options.storage_options, started)
    _prepare(area, options.overwrite)
    run_with_dask(plan, output, options)
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
                run_unit,
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
