"""IngestOptions: every option of :func:`mixle.corpus.ingest`, declared once, validated once.

Three sections, each a frozen dataclass whose fields carry their flag, help text,
choices and check (:func:`mixle._options.option`); ``mixle ingest`` builds its flags
from them, so a new option is one field here:

- :class:`CorpusShape` — what shapes the corpus (recorded in the plan and manifest);
- :class:`IngestRun` — how it runs (processes, engine, resume);
- :class:`IngestOutput` — where it goes (layout, staging, storage, rejects).

:class:`IngestOptions` holds one of each and is built (and checked) at the public
entry point, then passed whole to the pipeline's steps, so no step re-validates or
forwards keywords. It still takes the flat keywords (``IngestOptions(workers=4)``)
and answers flat attribute access (``options.workers``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mixle._checks import nonnegative_int, positive_int
from mixle._options import Sectioned, byte_size, check_options, option, section
from mixle.corpus.format.spec import dtype_limit, resolve_dtype
from mixle.corpus.format.writer import DEFAULT_SHARD_MAX_BYTES
from mixle.corpus.ingestion.formats import format_names, input_formats
from mixle.corpus.storage.publish import LAYOUTS
from mixle.errors import ArgumentError

if TYPE_CHECKING:
    from mixle.corpus.ingestion.plan import IngestPlan

__all__ = [
    "DEFAULT_UNIT_BYTES",
    "DTYPES",
    "EXECUTORS",
    "MAX_SCHEDULER_TIMEOUT",
    "CorpusShape",
    "IngestOptions",
    "IngestOutput",
    "IngestRun",
    "parse_task",
]

#: Input bytes per work unit (JSONL byte ranges, flat-input document ranges).
DEFAULT_UNIT_BYTES = 64 * 1024 * 1024
#: Values of ``dtype``.
DTYPES = ("auto", "uint16", "uint32", "int64")
#: Longest ``scheduler_timeout`` accepted, in seconds (a week).
MAX_SCHEDULER_TIMEOUT = 7 * 24 * 3600
#: Values of ``executor``.
EXECUTORS = ("local", "dask")


def parse_task(value: Any) -> tuple[int, int]:
    """Parse a task-array position ``"i/n"`` (or ``(i, n)``) with ``0 <= i < n``.

    Raises
    ------
    ArgumentError
        ``value`` is not of that form.
    """
    parts: Any = value.split("/") if isinstance(value, str) else value
    try:
        index, count = (int(part) for part in parts)
        valid = 0 <= index < count
    except (TypeError, ValueError):
        valid = False
    if not valid:
        raise ArgumentError(
            f"`task` must be 'i/n' with 0 <= i < n (e.g. 0/4 for the first of 4 tasks). "
            f"Got {value!r} instead."
        )
    return index, count


def _task(name: str, value: Any) -> tuple[int, int]:
    return parse_task(value)


def _seconds(name: str, value: Any) -> float | int:
    # Finite and bounded: dask parses the timeout as a duration string, where inf,
    # nan or 1e300 seconds raise its own errors (or overflow) only at connect time.
    if isinstance(value, bool) or not isinstance(value, int | float):
        valid = False
    else:
        valid = 0 < value <= MAX_SCHEDULER_TIMEOUT
    if not valid:
        raise ArgumentError(
            f"`{name}` (--scheduler-timeout) must be a number of seconds, "
            f"0 < seconds <= {MAX_SCHEDULER_TIMEOUT}. Got {value!r} instead."
        )
    return value


def _input_format_help() -> str:
    """``--input-format``'s help: every registered format with its extensions."""
    listed = "; ".join(f"{f.name}: {' '.join(f.extensions)}" for f in input_formats())
    return (
        f"force the input format instead of detecting it by extension ({listed}; "
        "e.g. --input-format text for .log files)"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class CorpusShape:
    """What shapes the corpus: the options recorded in the plan and the manifest.

    See :func:`mixle.corpus.ingest` for their meaning; :attr:`fixed_dtype` and
    :attr:`fields` are derived from them. What is recorded stays an explicit list,
    :func:`~mixle.corpus.ingestion.plan.recorded_options`: it is part of the plan-file
    format and of every manifest's bytes, so a new field here that shapes the corpus
    is also a versioned change there (and in ``plan_checks``), never a silent one.
    """

    input_format: str | None = option(
        None,
        # resolve_inputs checks the name against the formats it knows.
        choices=format_names,
        checks_choices=False,
        help=_input_format_help,
    )
    field: str | None = option(
        None,
        help="JSONL key / Parquet column with the ids (default: input_ids, then tokens) or, "
        "with --tokenizer, the text (default: text); e.g. --field ids",
    )
    id_field: str | None = option(
        None,
        metavar="NAME",
        help="JSONL key / Parquet column whose value (a string, or an integer written in "
        "decimal) is each document's id, kept in the origins sidecar (origin(i).id, "
        "find_id); a record without one is a bad record (e.g. --id-field doc_id)",
    )
    tokenizer: str | None = option(
        None,
        help="tokenize text: 'bytes' (UTF-8 bytes, built in) or PATH/tokenizer.json "
        "(needs `pip install mixle[tokenizers]`); e.g. --tokenizer bytes. Text files "
        "default to bytes",
    )
    split: str = option(
        "none",
        choices=("none", "paragraphs"),
        help="text files: each file is a document (none, default) or each blank-line-"
        "separated block is (e.g. --split paragraphs)",
    )
    append_eos: int | None = option(
        None,
        check=nonnegative_int,
        parse=int,
        metavar="ID",
        help="append this end-of-document id to every document (e.g. --append-eos 50256)",
    )
    shard_size: int = option(
        DEFAULT_SHARD_MAX_BYTES,
        check=positive_int,
        parse=byte_size,
        metavar="BYTES",
        help="maximum size of one .tokens file (default 256MiB; e.g. --shard-size 1GiB)",
    )
    vocab_size: int | None = option(
        None,
        check=positive_int,
        parse=int,
        help="number of token ids; larger ids are errors and it picks the dtype "
        "(e.g. --vocab-size 50257 -> uint16)",
    )
    dtype: str = option(
        "auto",
        choices=DTYPES,
        help="token dtype on disk; auto = from --vocab-size, else the smallest that holds "
        "every id (e.g. --dtype uint32)",
    )
    on_error: str = option(
        "raise",
        choices=("raise", "skip"),
        help="bad record: stop and commit nothing (raise, default) or leave it out and "
        "list it in the rejects file (e.g. --on-error skip)",
    )
    unit_size: int = option(
        DEFAULT_UNIT_BYTES,
        check=positive_int,
        parse=byte_size,
        metavar="BYTES",
        help="input bytes per parallel work unit; part of the result, so keep it when "
        "resuming (default 64MiB; e.g. --unit-size 256MiB)",
    )

    def __post_init__(self) -> None:
        check_options(self)
        eos, vocab, fixed = self.append_eos, self.vocab_size, self.fixed_dtype
        if eos is not None and vocab is not None and eos >= vocab:
            raise ArgumentError(
                f"`append_eos` must be below `vocab_size` {vocab}. Got {eos} instead."
            )
        if self.id_field is not None and (not isinstance(self.id_field, str) or not self.id_field):
            raise ArgumentError(
                f"`id_field` must be a non-empty field name. Got {self.id_field!r} instead."
            )
        if eos is not None and fixed is not None and eos >= dtype_limit(fixed):
            raise ArgumentError(f"`append_eos` {eos} does not fit the dtype {fixed}.")

    @property
    def fixed_dtype(self) -> str | None:
        """The token dtype fixed by ``vocab_size``/``dtype``, or ``None`` (from the data)."""
        return resolve_dtype(self.vocab_size, None if self.dtype == "auto" else self.dtype)

    @property
    def fields(self) -> tuple[str, ...]:
        """The record keys/columns to read, in order of preference."""
        if self.field:
            return (self.field,)
        return ("text",) if self.tokenizer else ("input_ids", "tokens")


@dataclass(frozen=True, slots=True, kw_only=True)
class IngestRun:
    """How an ingest runs: processes, engine, task array, plan file, resume.

    None of these changes a corpus byte. ``progress`` and ``overwrite`` have no flag
    of their own: ``mixle ingest`` sets them from ``--quiet`` and ``--overwrite``.
    """

    workers: int = option(
        1,
        check=positive_int,
        command_default=lambda: min(os.cpu_count() or 1, 8),
        help="worker processes; the output is identical for any value "
        "(default: CPUs, at most 8; e.g. --workers 4)",
    )
    resume: bool = option(
        False,
        help="continue an interrupted ingest of the same inputs and options "
        "(e.g. rerun the same command with --resume)",
    )
    overwrite: bool = option(False, flag=False, help="replace an existing corpus at OUTPUT")
    progress: bool | None = option(
        None, flag=False, help="show a progress bar (None: when stderr is a terminal)"
    )
    executor: str = option(
        "local",
        choices=EXECUTORS,
        help="local: this machine's process pool (default); dask: one Dask task per work "
        "unit, on a LocalCluster of --workers processes or on --scheduler (needs "
        "`pip install mixle[dask]` and --vocab-size or --dtype; e.g. --executor dask)",
    )
    scheduler: str | None = option(
        None,
        metavar="ADDRESS|FILE",
        help="with --executor dask: an existing cluster's scheduler, tcp://host:port or a "
        "scheduler file (e.g. --scheduler tcp://10.0.0.1:8786)",
    )
    scheduler_timeout: float = option(
        30.0,
        check=_seconds,
        metavar="SECONDS",
        help="give up connecting to --scheduler after this long (default 30; e.g. "
        "--scheduler-timeout 10)",
    )
    retries: int = option(
        3,
        check=nonnegative_int,
        help="with --executor dask: times a failed or lost unit is run again (default 3; "
        "e.g. --retries 5)",
    )
    task: str | tuple[int, int] | None = option(
        None,
        check=_task,
        metavar="I/N",
        help="task-array mode, no engine: run units I, I+N, ... of the plan into OUTPUT "
        "(e.g. --task $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT), then `mixle ingest "
        "--commit OUTPUT`; needs --vocab-size or --dtype",
    )
    plan: IngestPlan | str | os.PathLike[str] | None = option(
        None,
        metavar="PLAN.json",
        help="run the units of a plan file (--write-plan) into OUTPUT instead of planning: "
        "with --task only that task's, with --executor dask all of them, else all of them "
        "in --workers processes, then commit; the inputs must still be the planned files "
        "(e.g. mixle ingest --plan plan.json corpus/ --task 0/8)",
    )

    def __post_init__(self) -> None:
        check_options(self)
        if self.scheduler is not None and self.executor != "dask":
            raise ArgumentError("`scheduler` needs executor='dask' (--executor dask).")
        if self.task is not None and self.executor != "local":
            raise ArgumentError("`task` (--task i/n) runs without an engine: drop --executor dask.")

    @property
    def distributed(self) -> bool:
        """Whether units run as independent tasks (dask, a task array, or a plan file)."""
        return self.executor != "local" or self.task is not None or self.plan is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class IngestOutput:
    """Where an ingest goes: the layout, the staging directory, fsspec options, rejects.

    ``storage_options`` has no flag of its own: ``mixle ingest`` merges the repeatable
    ``--storage-option KEY=VALUE``.
    """

    rejects: str | os.PathLike[str] | None = option(
        None,
        metavar="PATH",
        help="with --on-error skip: where to list skipped records as JSON lines "
        "(default OUTPUT/rejects.jsonl; e.g. --rejects bad.jsonl); checked before any "
        "work, and never one of the inputs",
    )
    layout: str = option(
        "raw",
        choices=LAYOUTS,
        help="raw: memory-mappable shards (default); zarr: a compressed zarr v3 group for "
        "storage and transfer (e.g. --layout zarr s3://bucket/corpus.zarr)",
    )
    storage_options: Mapping[str, Any] | None = option(
        None, flag=False, help="fsspec options for URL inputs and outputs"
    )
    staging_dir: str | os.PathLike[str] | None = option(
        None,
        metavar="DIR",
        help="where a URL or zarr OUTPUT is built before it is published, shards first and "
        "the manifest last (default: under ~/.cache/mixle/staging; e.g. --staging-dir /scratch/x)",
    )

    def __post_init__(self) -> None:
        check_options(self)


@dataclass(frozen=True, init=False)
class IngestOptions(Sectioned):
    """The options of one ingest; see :func:`mixle.corpus.ingest` for their meaning.

    ``IngestOptions(shape=CorpusShape(...), run=IngestRun(...), output=IngestOutput(...))``
    or, as before the sections, ``IngestOptions(vocab_size=50257, workers=4)`` (flat
    keywords; a section left out takes its defaults). Each section validates its
    fields (raising :class:`ArgumentError` naming one) and normalizes numbers to
    ``int``; this class checks the rules across sections. ``options.workers`` reads
    ``options.run.workers``; :meth:`flat` and :meth:`replace` work on flat names.
    """

    shape: CorpusShape = section(CorpusShape, "what shapes the corpus")
    run: IngestRun = section(IngestRun, "how it runs")
    output: IngestOutput = section(IngestOutput, "where it goes")

    def __post_init__(self) -> None:
        if self.run.distributed and self.shape.fixed_dtype is None and self.run.plan is None:
            raise ArgumentError(
                "distributed ingestion (--executor dask, --task i/n) needs the token dtype "
                "before any unit runs, so no unit has to be rewritten after a second pass: "
                "pass --vocab-size N (e.g. --vocab-size 50257) or --dtype uint16|uint32|int64."
            )
        if self.run.distributed and self.output.layout != "raw":
            raise ArgumentError(
                "distributed ingestion writes the raw layout; ingest with --layout raw, then "
                "`mixle convert` the corpus to zarr."
            )
