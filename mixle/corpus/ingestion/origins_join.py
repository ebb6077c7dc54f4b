"""Join the units' origin runs into the corpus's origins sidecar at commit.

Each unit leaves its runs in its own frame (:data:`~.workers.UNIT_ORIGINS_NAME`):
documents from the unit's first, inputs indexing the unit's files, JSONL lines from
the unit's first line. The commit step knows what the units do not: how many
documents come before each unit, the corpus-wide table of input files, and the lines
of the earlier units of the same JSONL file (their ``done.json`` ``lines``). Runs that
continue across units (one JSONL file cut into several) are merged, so a line-indexed
input costs one run per file. With ``--id-field`` each unit also leaves its documents'
ids (:data:`~.workers.UNIT_IDS_NAME`), concatenated here in corpus order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from mixle.corpus.format.origin_ids import OriginIds
from mixle.corpus.format.origins import OriginRuns, coalesce_runs, encode_origins
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
    columns: list[OriginIds] = []
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
        if with_ids:
            column = _unit_ids(unit, count, read)
            if column is None:
                return None
            columns.append(column)
        form = get_format(unit.format)
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
    ids = OriginIds.joined(columns) if with_ids else None
    return encode_origins(list(inputs), runs, documents, ids)


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
