"""The completion record of a work unit (``done.json``): what it holds, how it is checked.

:func:`~mixle.corpus.ingestion.units.run_unit` writes the record last, after the
unit's shards and its own ``manifest.json``; the commit step publishes the corpus
from the records alone. Records live in an output that other tasks, other machines
and careless scripts also write, so nothing in one is trusted: :func:`record_problems`
checks it against the plan, against the unit's manifest (validated in full, sealed
by its own checksum) and against the listed file sizes, and says what is wrong, by
unit and field. A record that passes describes exactly the unit's files: its shard
entries are the manifest's, its counts are the manifest's totals, its dtype the
plan's.

A record also seals itself: ``record_sha256`` (:data:`RECORD_DIGEST_KEY`) is the SHA-256
of the record's canonical JSON without that key (:func:`record_digest`), written by
:func:`seal_record` whenever a unit finishes. Most fields are checked against the unit's
files, but ``lines`` (the input lines the unit read) is not: it cannot be without reading
the inputs, yet it places the line origins of the later units of the same file in the
corpus (``origins.bin``). The digest catches an edited or damaged record (it is a
checksum, not a signature: whoever rewrites a record can reseal it); a record without it
(written by an older mixle) is checked as before.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from mixle._safe_json import loads_bounded
from mixle.corpus.format.manifest import canonical_json, parse_manifest
from mixle.errors import CorpusError, IngestError

__all__ = [
    "RECORD_DIGEST_KEY",
    "RECORD_KEYS",
    "load_record",
    "record_digest",
    "record_problems",
    "seal_record",
]

#: The keys of a completion record: the unit's statistics, its plan, its shards.
RECORD_KEYS = frozenset(
    ("plan", "unit", "documents", "tokens", "skipped", "lines", "input_bytes", "dtype", "shards")
)
#: The record's self-digest (version 2 records; version 1 records, without it, still commit).
RECORD_DIGEST_KEY = "record_sha256"
_SEALED_KEYS = RECORD_KEYS | {RECORD_DIGEST_KEY}
_COUNTS = ("documents", "tokens", "skipped", "lines", "input_bytes")


def record_digest(record: Mapping[str, Any]) -> str:
    """The SHA-256 (hex) of ``record``'s canonical JSON without ``record_sha256``.

    Canonical as the manifest's ``manifest_sha256``: sorted keys, no whitespace, ASCII
    only (:func:`~mixle.corpus.format.manifest.canonical_json`).
    """
    body = {key: value for key, value in record.items() if key != RECORD_DIGEST_KEY}
    return hashlib.sha256(canonical_json(body)).hexdigest()


def seal_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` with its ``record_sha256`` (re)computed: what a finished unit writes."""
    body = {key: value for key, value in record.items() if key != RECORD_DIGEST_KEY}
    return dict(body, **{RECORD_DIGEST_KEY: record_digest(body)})


def load_record(data: bytes | None, where: str) -> Any:
    """``data`` (a ``done.json``) parsed as bounded JSON; ``None`` when missing.

    Raises
    ------
    IngestError
        Not JSON, nested too deep, or a number literal out of bounds (names ``where``).
    """
    return None if data is None else loads_bounded(data, where, IngestError)


def record_problems(
    name: str,
    record: Any,
    manifest: bytes | None,
    sizes: dict[str, int],
    dtype: str | None,
    on_error: str,
) -> list[str]:
    """What is wrong with unit ``name``'s record; ``[]`` when it describes its files.

    Parameters
    ----------
    name
        The unit's directory name (``unit-000042``), used in the messages.
    record
        The parsed ``done.json`` (any JSON value).
    manifest
        The bytes of the unit's ``manifest.json`` (``None`` when missing).
    sizes
        ``{file name: size}`` of the files in the unit's directory.
    dtype
        The plan's token dtype (``None``: not fixed by the plan).
    on_error
        The plan's ``on_error``; with ``"raise"`` a unit never skips a record.
    """
    if not isinstance(record, dict):
        return [f"unit {name}: done.json is {type(record).__name__}, not a JSON object"]
    if set(record) not in (RECORD_KEYS, _SEALED_KEYS):
        missing = sorted(RECORD_KEYS - set(record))
        unknown = sorted(set(record) - _SEALED_KEYS)[:5]
        return [f"unit {name}: done.json lacks the keys {missing} (unknown: {unknown})"]
    problems = [
        f"unit {name}: done.json field {key!r} is {record[key]!r}, not a count"
        for key in _COUNTS
        if isinstance(record[key], bool) or not isinstance(record[key], int) or record[key] < 0
    ]
    if on_error == "raise" and record["skipped"] != 0 and not problems:
        problems.append(
            f"unit {name}: done.json field 'skipped' is {record['skipped']!r}, but the plan "
            "stops at the first bad record (on_error raise)"
        )
    if dtype is not None and record["dtype"] != dtype:
        problems.append(
            f"unit {name}: done.json field 'dtype' is {record['dtype']!r}, the plan's is {dtype!r}"
        )
    if problems:
        return problems
    if manifest is None:
        return [f"unit {name}: its manifest.json is missing"]
    try:
        parsed = parse_manifest(manifest, f"unit {name} manifest.json")
    except CorpusError as exc:
        return [str(exc).rstrip(".")]
    entries = [entry.to_dict() for entry in parsed.shards]
    if record["shards"] != entries:
        return _shard_differences(name, record["shards"], entries)
    for key, total in (("documents", parsed.num_documents), ("tokens", parsed.num_tokens)):
        if record[key] != total:
            problems.append(
                f"unit {name}: done.json field {key!r} is {record[key]}, its shards hold {total}"
            )
    if record["dtype"] != parsed.dtype:
        problems.append(
            f"unit {name}: done.json field 'dtype' is {record['dtype']!r}, its manifest's is "
            f"{parsed.dtype!r}"
        )
    for entry in parsed.shards:
        for file, expected in (
            (entry.tokens, entry.tokens_bytes),
            (entry.offsets, entry.offsets_bytes),
        ):
            size = sizes.get(file)
            if size is None:
                problems.append(f"unit {name}: shard file {file} is missing")
            elif size != expected:
                problems.append(
                    f"unit {name}: shard file {file} has {size} bytes, its record says "
                    f"{expected} (truncated or replaced)"
                )
    # Last, so that a field the files contradict is named first; what is left for the
    # digest to catch is an edit of what no file shows (``lines``, ``input_bytes``).
    sealed = RECORD_DIGEST_KEY in record
    if not problems and sealed and record[RECORD_DIGEST_KEY] != record_digest(record):
        problems.append(
            f"unit {name}: done.json field {RECORD_DIGEST_KEY!r} does not match the record's "
            "content (edited or damaged)"
        )
    return problems


def _shard_differences(name: str, recorded: Any, entries: list[dict[str, Any]]) -> list[str]:
    """How the record's ``shards`` differ from the unit manifest's ``entries``."""
    if not isinstance(recorded, list) or len(recorded) != len(entries):
        count = len(recorded) if isinstance(recorded, list) else type(recorded).__name__
        return [
            f"unit {name}: done.json field 'shards' holds {count} entries, the unit's manifest "
            f"{len(entries)}"
        ]
    problems = []
    for position, (found, entry) in enumerate(zip(recorded, entries, strict=True)):
        if not isinstance(found, dict):
            problems.append(f"unit {name}: done.json shard {position} is not a JSON object")
            continue
        for key, value in entry.items():
            if key not in found:
                problems.append(f"unit {name}: done.json shard {position} lacks {key!r}")
            elif found[key] != value and key.endswith("_sha256"):
                problems.append(
                    f"unit {name}: shard file {entry[key.split('_')[0]]} has another digest in "
                    "the unit's manifest than in its record"
                )
            elif found[key] != value or type(found[key]) is not type(value):
                problems.append(
                    f"unit {name}: done.json shard {position} field {key!r} is {found[key]!r}, "
                    f"the unit's manifest says {value!r}"
                )
        if set(found) - set(entry):
            problems.append(
                f"unit {name}: done.json shard {position} has unknown keys "
                f"{sorted(set(found) - set(entry))[:5]}"
            )
    return problems
