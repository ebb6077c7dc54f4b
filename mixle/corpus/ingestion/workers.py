"""Convert one work unit into shards of its own: the code every ingest worker runs.

A unit is written with :class:`~mixle.corpus.ShardWriter` into its own directory
``<work>/unit-NNNNNN/`` and published there with
:func:`~mixle.corpus.commit_manifest`, so its shards are crash-safe and complete
before its ``manifest.json`` appears; a ``done.json`` written after that (atomically) marks the
unit complete for ``--resume``. Bad records either stop the unit (the failure and
its location are returned, nothing is kept) or are written to the unit's
``rejects.jsonl``. Nothing here depends on which process runs the unit or how many
run at once, which is what makes the corpus identical for any worker count.

The module is import-safe under ``spawn``/``forkserver``: no work at import time.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle._io import fsync_file, naming_file, write_json_atomic
from mixle.corpus.format.encode import narrow, needed_dtype
from mixle.corpus.format.manifest import Manifest, write_manifest
from mixle.corpus.format.origin_ids import OriginIds
from mixle.corpus.format.origins import OriginRuns, coalesce_runs
from mixle.corpus.format.shard import ShardWriter, rewrite_shard_dtype
from mixle.corpus.format.spec import MANIFEST_NAME, dtype_limit
from mixle.corpus.ingestion.input_readers import (
    InputBatch,
    ReadOptions,
    read_unit,
    record_origins,
)
from mixle.corpus.ingestion.inputs import WorkUnit
from mixle.corpus.ingestion.records import seal_record
from mixle.errors import IngestError

__all__ = [
    "UNIT_IDS_NAME",
    "UNIT_ORIGINS_NAME",
    "UNIT_RECORDS",
    "UnitJob",
    "convert_unit",
    "init_worker",
    "write_json_atomic",
]

DONE_NAME = "done.json"
REJECTS_NAME = "rejects.jsonl"
#: The unit's origin runs (:meth:`OriginRuns.to_bytes`): documents counted from the
#: unit's first, inputs indexing :attr:`WorkUnit.files`, records in the format's frame
#: (JSONL lines from the unit's first line); the commit step joins them into the
#: corpus's ``origins.bin``.
UNIT_ORIGINS_NAME = "origins.runs"
#: With ``--id-field``: the unit's document ids (:meth:`OriginIds.to_bytes`, in
#: document order), joined at commit into the sidecar's id column.
UNIT_IDS_NAME = "origins.ids"
#: A finished unit's small files (not its shards): record, manifest, rejects, origins.
UNIT_RECORDS = (DONE_NAME, MANIFEST_NAME, REJECTS_NAME, UNIT_ORIGINS_NAME, UNIT_IDS_NAME)

# Progress counters shared with the coordinating process: documents, tokens, input
# bytes. Set by :func:`init_worker` (pool) or directly (in-process run).
_COUNTERS: Any = None
_TICK: Callable[[], None] | None = None
_PARENT: int | None = None


def init_worker(
    counters: Any, tick: Callable[[], None] | None = None, orphan_exit: bool = False
) -> None:
    """Install the shared progress counters (pool initializer).

    With ``orphan_exit`` the worker exits as soon as it notices that the process that
    started it is gone (e.g. ``kill -9`` of the coordinator), so no orphan keeps
    writing into a work directory that a ``--resume`` run is about to use.
    """
    global _COUNTERS, _TICK, _PARENT
    _COUNTERS = counters
    _TICK = tick
    _PARENT = os.getppid() if orphan_exit else None


@dataclass(frozen=True, slots=True)
class UnitJob:
    """Everything a worker needs besides the unit (picklable)."""

    read: ReadOptions
    append_eos: int | None
    vocab_size: int | None
    dtype: str | None
    shard_size: int
    on_error: str


def _append_eos(batch: InputBatch, eos: int) -> tuple[np.ndarray, np.ndarray]:
    dtype = np.result_type(batch.tokens.dtype, np.min_scalar_type(eos))
    ends = np.cumsum(batch.lengths, dtype=np.int64)
    tokens = np.insert(batch.tokens.astype(dtype, copy=False), ends, eos)
    return tokens, batch.lengths + 1


def _type_max(dtype: np.dtype[Any]) -> int:
    return int(np.iinfo(dtype).max)


def _bad_documents(tokens: np.ndarray, lengths: np.ndarray, limit: int | None) -> dict[int, str]:
    """Return ``{document in batch: reason}`` for documents with an id out of range.

    Scans only what the dtype does not already rule out (an unsigned batch is never
    negative; a uint16 batch never reaches a limit above 65535).
    """
    if tokens.shape[0] == 0:
        return {}
    negative = tokens.dtype.kind == "i" and int(tokens.min()) < 0
    too_big = limit is not None and _type_max(tokens.dtype) >= limit and int(tokens.max()) >= limit
    if not negative and not too_big:
        return {}
    mask = np.zeros(tokens.shape[0], dtype=bool)
    if negative:
        mask |= tokens < 0
    if too_big:
        mask |= tokens >= limit
    positions = np.flatnonzero(mask)
    ends = np.cumsum(lengths, dtype=np.int64)
    documents = np.searchsorted(ends, positions, side="right")
    reasons: dict[int, str] = {}
    for position, document in zip(positions.tolist(), documents.tolist(), strict=True):
        if document in reasons:
            continue
        value = int(tokens[position])
        offset = position - (int(ends[document - 1]) if document else 0)
        if value < 0:
            reasons[document] = f"token id {value} at position {offset} is negative"
        else:
            reasons[document] = f"token id {value} at position {offset} is not below {limit}"
    return reasons


def _tick(documents: int, tokens: int, input_bytes: int) -> None:
    if _PARENT is not None and os.getppid() != _PARENT:
        os._exit(1)  # the coordinator died: stop, leave the unit for --resume to redo
    if _COUNTERS is not None:
        with _COUNTERS.get_lock():
            _COUNTERS[0] += documents
            _COUNTERS[1] += tokens
            _COUNTERS[2] += input_bytes
    if _TICK is not None:
        _TICK()


class _UnitShards:
    """The shards of one unit: validated ``(tokens, lengths)`` batches in, entries out.

    Batches go to :meth:`ShardWriter.write` whole (no per-document work), split only
    at shard boundaries. Without a fixed dtype the unit starts at uint16 and widens
    (rewriting its committed shards) when a batch needs more.
    """

    def __init__(
        self, directory: str, dtype: str | None, vocab_size: int | None, shard_size: int
    ) -> None:
        self.directory = directory
        self.fixed = dtype
        self.dtype = dtype or "uint16"
        self.vocab_size = vocab_size
        self.shard_size = shard_size
        self.entries: list[dict[str, Any]] = []
        self.shard: ShardWriter | None = None

    def write(self, tokens: np.ndarray, lengths: np.ndarray, checked_below: int | None) -> None:
        """Append a batch whose ids are known to be nonnegative and below ``checked_below``.

        An ``OSError`` without a file name (a full disk) names the shard being written.
        """
        with naming_file(self._current_file):
            self._write(tokens, lengths, checked_below)

    def _current_file(self) -> str:
        """The shard file being written (the unit directory between shards)."""
        if self.shard is None:
            return self.directory
        return os.path.join(self.directory, self.shard.tokens_name)

    def _write(self, tokens: np.ndarray, lengths: np.ndarray, checked_below: int | None) -> None:
        # An upper bound on the ids, from the dtype and the caller's check; the data is
        # scanned only when the bound does not prove that the current dtype holds them.
        max_id = _type_max(tokens.dtype) if tokens.shape[0] else 0
        if checked_below is not None:
            max_id = min(max_id, checked_below - 1)
        if max_id >= dtype_limit(self.dtype):
            max_id = int(tokens.max()) if tokens.shape[0] else 0
        if self.fixed is None and max_id >= dtype_limit(self.dtype):
            self._finish()
            wider = needed_dtype(max_id)
            self.entries = [
                rewrite_shard_dtype(self.directory, entry, from_dtype=self.dtype, to_dtype=wider)
                for entry in self.entries
            ]
            self.dtype = wider
        tokens = narrow(tokens, self.dtype, max_id)
        itemsize = tokens.dtype.itemsize
        ends = np.cumsum(lengths, dtype=np.int64)
        first, count = 0, lengths.shape[0]
        while first < count:
            if self.shard is None:
                self.shard = ShardWriter(self.directory, len(self.entries), dtype=self.dtype)
            room = max(self.shard_size - self.shard.nbytes, 0) // itemsize
            base = int(ends[first - 1]) if first else 0
            last = int(np.searchsorted(ends, base + room, side="right"))
            if last <= first:
                if self.shard.num_documents:
                    self._finish()
                    continue
                last = first + 1  # a document larger than a shard gets its own shard
            # owned: batches are fresh arrays or read-only input maps, never reused.
            self.shard.write(tokens[base : int(ends[last - 1])], lengths[first:last], owned=True)
            first = last

    def _finish(self) -> None:
        if self.shard is not None:
            if self.shard.num_documents:
                self.entries.append(self.shard.commit())
            else:
                self.shard.abort()
            self.shard = None

    def commit(self) -> Manifest:
        with naming_file(self.directory):
            self._finish()
        manifest = Manifest.build(self.entries, dtype=self.dtype, vocab_size=self.vocab_size)
        write_manifest(self.directory, manifest)
        return manifest

    def abort(self) -> None:
        if self.shard is not None:
            self.shard.abort()
            self.shard = None


def convert_unit(unit: WorkUnit, job: UnitJob, unit_dir: str) -> dict[str, Any]:
    """Write ``unit`` into ``unit_dir`` and return its statistics.

    Returns
    -------
    dict
        ``{"documents", "tokens", "skipped", "lines", "input_bytes", "dtype"}`` once
        the unit is durably complete, or ``{"failed": {"location", "reason"}}`` when
        ``job.on_error == "raise"`` and a record is bad, or an input file cannot be
        read (``location`` is then ``None``); nothing of a failed unit is kept.
    """
    _tick(0, 0, 0)  # exits first if the coordinator is gone
    if os.path.exists(unit_dir):  # leftovers of an interrupted attempt
        shutil.rmtree(unit_dir)
    os.makedirs(unit_dir)
    limit = job.vocab_size
    if limit is None and job.dtype is not None:
        limit = dtype_limit(job.dtype)
    writer = _UnitShards(unit_dir, job.dtype, job.vocab_size, job.shard_size)
    rejects: list[tuple[tuple[int, int], str]] = []
    stats = {"documents": 0, "tokens": 0, "lines": 0, "input_bytes": 0}
    runs: list[OriginRuns] = []
    ids: list[OriginIds] = []
    try:
        for batch in read_unit(unit, job.read):
            origins = record_origins(unit, batch)
            inputs, records = origins.file, origins.record
            names = None if origins.ids is None else OriginIds.of_strings(origins.ids)
            # A plain ndarray view (np.memmap slicing is slow) of the batch's ids.
            tokens, lengths = np.asarray(batch.tokens), batch.lengths
            if job.append_eos is not None:
                tokens, lengths = _append_eos(batch, job.append_eos)
            bad = _bad_documents(tokens, lengths, limit)
            problems = batch.rejects + [(batch.locations[d], reason) for d, reason in bad.items()]
            if problems and job.on_error == "raise":
                location, reason = min(problems)
                writer.abort()
                return {"failed": {"location": list(location), "reason": reason}}
            if bad:
                keep = np.ones(lengths.shape[0], dtype=bool)
                keep[list(bad)] = False
                tokens = tokens[np.repeat(keep, lengths)]
                lengths = lengths[keep]
                inputs, records = inputs[keep], records[keep]
                names = None if names is None else names.select(keep)
            runs.append(OriginRuns.of_documents(inputs, records, stats["documents"]))
            if names is not None:
                ids.append(names)
            writer.write(tokens, lengths, limit)
            rejects.extend(sorted(problems))
            stats["documents"] += int(lengths.shape[0])
            stats["tokens"] += int(tokens.shape[0])
            stats["lines"] += batch.lines
            stats["input_bytes"] += batch.input_bytes
            _tick(int(lengths.shape[0]), int(tokens.shape[0]), batch.input_bytes)
        manifest = writer.commit()
    except IngestError as exc:
        writer.abort()
        return {"failed": {"location": None, "reason": str(exc)}}
    except BaseException:
        writer.abort()
        raise
    if rejects:
        path = os.path.join(unit_dir, REJECTS_NAME)
        with naming_file(path), open(path, "w", encoding="utf-8") as handle:
            for location, reason in rejects:
                handle.write(json.dumps({"location": list(location), "reason": reason}) + "\n")
            fsync_file(handle)
    _write_unit_file(unit_dir, UNIT_ORIGINS_NAME, coalesce_runs(OriginRuns.joined(runs)).to_bytes())
    if job.read.id_field is not None:
        _write_unit_file(unit_dir, UNIT_IDS_NAME, OriginIds.joined(ids).to_bytes())
    result = seal_record(dict(stats, skipped=len(rejects), dtype=manifest.dtype))
    write_json_atomic(os.path.join(unit_dir, DONE_NAME), result)
    return result


def _write_unit_file(unit_dir: str, name: str, data: bytes) -> None:
    """Write ``data`` to ``unit_dir/name`` and fsync it (before ``done.json``)."""
    path = os.path.join(unit_dir, name)
    with naming_file(path), open(path, "wb") as handle:
        handle.write(data)
        fsync_file(handle)
