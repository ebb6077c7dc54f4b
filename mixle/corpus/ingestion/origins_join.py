"""Join the units' origin runs into the corpus's origins sidecar at commit.

Each unit leaves its runs in its own frame (:data:`~.workers.UNIT_ORIGINS_NAME`):
documents from the unit's first, inputs indexing the unit's files, JSONL lines from
the unit's first line. The commit step knows what the units do not: how many
documents come before each unit, the corpus-wide table of input files, and the lines
of the earlier units of the same JSONL file (their ``done.json`` ``lines``). Runs that
continue across units (one JSONL file cut into several) are merged, so a line-indexed
input costs one run per file. With ``--id-field`` each unit also leaves its documents'
ids (:data:`~.workers.UNIT_IDS_NAME`), concatenated here in corpus order. An input
that came with origins of its own (:meth:`~.formats.InputFormat.carried_origins`: a
Megatron export's ``PREFIX.origins``) passes those on: its documents' runs are
mapped through that sidecar, ids included, so an export round trip keeps them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from mixle.corpus.format.origin_ids import OriginIds
from mixle.corpus.format.origins import OriginRuns, OriginsTable, coalesce_runs, encode_origins
from mixle.corpus.ingestion.formats import get_format
from mixle.corpus.ingestion.work import WorkUnit
from mixle.corpus.ingestion.workers import UNIT_IDS_NAME, UNIT_ORIGINS_NAME
from mixle.errors import CorpusFormatError

__all__ = ["MAX_UNIT_ID_BYTES", "join_unit_origins"]

#: Most bytes of ids read from one unit (beyond their offsets).
MAX_UNIT_ID_BYTES = 1 << 32


def join_unit_origins(
    units: Sequence[WorkUnit],
    results: Mapping[int, Mapping[str, Any]],
    read: Callable[[WorkUnit, str, int], bytes | None],
    with_ids: bool = False,
) -> bytes | None:
    """The ``origins.bin`` bytes of the corpus made of ``units`` (in corpus order), or
    ``None`` when a unit left no runs (written by a mixle without origins, then
    resumed) or runs that do not match its record, or (``with_ids``) no ids or ids of
    another count: the corpus is then published without a sidecar, never with a
    wrong one.

    ``results[unit.index]`` is the unit's ``done.json``; ``read(unit, name, limit)`` the
    bytes (at most ``limit``) of file ``name`` in the unit's directory (``None`` when
    missing).
    """
    inputs: dict[tuple[str, str], int] = {}
    parts: list[OriginRuns] = []
    documents = 0
    lines_before: dict[str, int] = {}
    columns: list[OriginIds | None] = []
    for unit in units:
        result = results[unit.index]
        count = int(result["documents"])
        data = read(unit, UNIT_ORIGINS_NAME, 24 * count)  # a run per document at most
        if data is None:
            return None
        try:
            runs = OriginRuns.from_bytes(data, f"unit {unit.index} {UNIT_ORIGINS_NAME}")
        except CorpusFormatError:
            return None
        files = unit.files
        if runs.first.shape[0] and (
            runs.first[0] != 0
            or runs.first[-1] >= count
            or runs.input.min() < 0
            or runs.input.max() >= len(files)
        ):
            return None
        if count and not runs.first.shape[0]:
            return None
        form = get_format(unit.format)
        carried = None if form.groups_files else form.carried_origins(unit)
        if with_ids:
            column = _unit_ids(unit, count, read)
            if column is None:
                return None
            columns.append(column)
        if carried is not None:
            through = _through(runs, count, carried, documents, inputs)
            if through is None:
                return None
            parts.append(through[0])
            if not with_ids:
                columns.append(through[1])
            documents += count
            continue
        if not with_ids:
            columns.append(None)
        kind = form.record_kind
        mapping = np.array(
            [inputs.setdefault((path, kind), len(inputs)) for path in files], dtype=np.int64
        )
        base = np.zeros(len(files), dtype=np.int64)
        if kind == "line" and not form.groups_files:  # lines from the unit's first
            base[:] = lines_before.get(unit.path, 0)
            lines_before[unit.path] = int(base[0]) + int(result["lines"])
        parts.append(runs.shifted(documents, mapping, base))
        documents += count
    runs = coalesce_runs(OriginRuns.joined(parts))
    present = [column for column in columns if column is not None]
    ids = OriginIds.joined(present) if present and len(present) == len(columns) else None
    return encode_origins(list(inputs), runs, documents, ids)


def _through(
    runs: OriginRuns,
    count: int,
    table: OriginsTable,
    documents: int,
    inputs: dict[tuple[str, str], int],
) -> tuple[OriginRuns, OriginIds | None] | None:
    """The runs (corpus frame: ``documents`` before the unit, inputs added to
    ``inputs``) and ids of a unit of ``count`` documents whose records index ``table``
    (the origins its input came with); ``None`` when a record lies beyond the table."""
    ends = np.append(runs.first[1:], count)
    pieces: list[OriginRuns] = []
    columns: list[OriginIds | None] = []
    for first, end, record in zip(runs.first, ends, runs.record, strict=True):
        stop = int(record + end - first)
        if record < 0 or stop > table.documents:
            return None
        names, section, ids = table.section(int(record), stop)
        mapping = np.array([inputs.setdefault(name, len(inputs)) for name in names], dtype=np.int64)
        pieces.append(
            OriginRuns(section.first + documents + first, mapping[section.input], section.record)
        )
        columns.append(ids)
    present = [column for column in columns if column is not None]
    ids = OriginIds.joined(present) if len(present) == len(columns) else None
    return OriginRuns.joined(pieces), ids


def _unit_ids(
    unit: WorkUnit, count: int, read: Callable[[WorkUnit, str, int], bytes | None]
) -> OriginIds | None:
    """The ``count`` ids ``unit`` left, or ``None`` when missing or malformed."""
    data = read(unit, UNIT_IDS_NAME, 8 * (count + 1) + MAX_UNIT_ID_BYTES)
    if data is None:
        return None
    try:
        return OriginIds.from_bytes(data, count, f"unit {unit.index} {UNIT_IDS_NAME}")
    except CorpusFormatError:
        return None
