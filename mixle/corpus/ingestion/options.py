"""IngestOptions: every option of :func:`mixle.corpus.ingest`, validated once.

A frozen value object: built (and checked) at the public entry point, then passed
whole to the pipeline's steps, so no step re-validates or forwards twenty keywords.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mixle._checks import nonnegative_int, one_of, positive_int
from mixle.corpus.format.spec import dtype_limit, resolve_dtype
from mixle.corpus.format.writer import DEFAULT_SHARD_MAX_BYTES
from mixle.corpus.storage.publish import LAYOUTS
from mixle.errors import ArgumentError

__all__ = [
    "DEFAULT_UNIT_BYTES",
    "DTYPES",
    "EXECUTORS",
    "MAX_SCHEDULER_TIMEOUT",
    "IngestOptions",
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


@dataclass(frozen=True, slots=True)
class IngestOptions:
    """The options of one ingest; see :func:`mixle.corpus.ingest` for their meaning.

    ``__post_init__`` validates every field (raising :class:`ArgumentError` naming it)
    and normalizes numbers to ``int``; :attr:`fixed_dtype` and :attr:`fields` are
    derived from them.
    """

    input_format: str | None = None
    field: str | None = None
    tokenizer: str | None = None
    split: str = "none"
    append_eos: int | None = None
    shard_size: int = DEFAULT_SHARD_MAX_BYTES
    vocab_size: int | None = None
    dtype: str = "auto"
    workers: int = 1
    on_error: str = "raise"
    rejects: str | os.PathLike[str] | None = None
    resume: bool = False
    overwrite: bool = False
    unit_size: int = DEFAULT_UNIT_BYTES
    progress: bool | None = None
    layout: str = "raw"
    storage_options: Mapping[str, Any] | None = None
    staging_dir: str | os.PathLike[str] | None = None
    executor: str = "local"
    scheduler: str | None = None
    task: Any = None
    retries: int = 3
    scheduler_timeout: float = 30.0
    plan: Any = None

    def __post_init__(self) -> None:
        one_of("layout", self.layout, LAYOUTS)
        one_of("executor", self.executor, EXECUTORS)
        if self.task is not None:
            object.__setattr__(self, "task", parse_task(self.task))
        if self.scheduler is not None and self.executor != "dask":
            raise ArgumentError("`scheduler` needs executor='dask' (--executor dask).")
        if self.task is not None and self.executor != "local":
            raise ArgumentError("`task` (--task i/n) runs without an engine: drop --executor dask.")
        timeout = self.scheduler_timeout
        # Finite and bounded: dask parses the timeout as a duration string, where inf,
        # nan or 1e300 seconds raise its own errors (or overflow) only at connect time.
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout <= MAX_SCHEDULER_TIMEOUT
        ):
            raise ArgumentError(
                f"`scheduler_timeout` (--scheduler-timeout) must be a number of seconds, "
                f"0 < seconds <= {MAX_SCHEDULER_TIMEOUT}. Got {timeout!r} instead."
            )
        normalized: dict[str, int | None] = {
            "workers": positive_int("workers", self.workers),
            "shard_size": positive_int("shard_size", self.shard_size),
            "unit_size": positive_int("unit_size", self.unit_size),
            "retries": nonnegative_int("retries", self.retries),
        }
        one_of("split", self.split, ("none", "paragraphs"))
        one_of("on_error", self.on_error, ("raise", "skip"))
        one_of("dtype", self.dtype, DTYPES)
        vocab = None if self.vocab_size is None else positive_int("vocab_size", self.vocab_size)
        normalized["vocab_size"] = vocab
        fixed = resolve_dtype(vocab, None if self.dtype == "auto" else self.dtype)
        eos = None if self.append_eos is None else nonnegative_int("append_eos", self.append_eos)
        if eos is not None and vocab is not None and eos >= vocab:
            raise ArgumentError(
                f"`append_eos` must be below `vocab_size` {vocab}. Got {eos} instead."
            )
        if eos is not None and fixed is not None and eos >= dtype_limit(fixed):
            raise ArgumentError(f"`append_eos` {eos} does not fit the dtype {fixed}.")
        normalized["append_eos"] = eos
        if self.distributed and fixed is None and self.plan is None:
            raise ArgumentError(
                "distributed ingestion (--executor dask, --task i/n) needs the token dtype "
                "before any unit runs, so no unit has to be rewritten after a second pass: "
                "pass --vocab-size N (e.g. --vocab-size 50257) or --dtype uint16|uint32|int64."
            )
        if self.distributed and self.layout != "raw":
            raise ArgumentError(
                "distributed ingestion writes the raw layout; ingest with --layout raw, then "
                "`mixle convert` the corpus to zarr."
            )
        for name, value in normalized.items():
            object.__setattr__(self, name, value)

    @property
    def distributed(self) -> bool:
        """Whether units run as independent tasks (dask, a task array, or a plan file)."""
        return self.executor != "local" or self.task is not None or self.plan is not None

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
