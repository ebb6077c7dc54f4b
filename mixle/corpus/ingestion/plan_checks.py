"""Checks of an ingest plan read from a file: shape, then the units its inputs imply.

A plan file (``--write-plan``, or ``OUTPUT/.mixle-ingest/plan.json``) may have been
edited by hand or by a careless script, and whatever it says is what gets converted:
a deleted unit drops documents, a duplicated range repeats them, a unit naming
another file ingests that file. Two checks stand between a plan file and any work:

:func:`parse_plan`
    Before the plan is built, without touching the disk: every key and type, the
    options and the worker ``job`` they imply, and the units against the plan's own
    files (each unit names its input by position and must name that input's path;
    the units of one input are consecutive, contiguous ranges from 0; every input has
    units, in order). Enough for the commit step, which may run where the inputs are
    not readable.
:func:`compare_units`
    Once the inputs are resolved again: the units must be exactly the ones planning
    those files with those options gives (it is what planning does, and cheap: file
    sizes and the headers of flat and Parquet inputs).

Every refusal is an :class:`~mixle.errors.IngestError` naming the plan file, the unit
(index) or key, the field, the value found and what was expected.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields as dataclass_fields
from typing import Any

from mixle.corpus.format.spec import resolve_dtype
from mixle.corpus.ingestion.formats import format_names, get_format
from mixle.corpus.ingestion.inputs import InputFile, WorkUnit
from mixle.errors import IngestError

__all__ = ["compare_units", "implied_job", "parse_plan"]

_OPTION_KEYS = (
    "input_format",
    "field",
    "tokenizer",
    "split",
    "append_eos",
    "shard_size",
    "vocab_size",
    "dtype",
    "on_error",
    "unit_size",
)
_JOB_KEYS = (
    "fields",
    "tokenizer",
    "split",
    "append_eos",
    "vocab_size",
    "dtype",
    "shard_size",
    "on_error",
)
_INT64_MAX = 2**63 - 1


def _fail(where: str, what: str, found: Any, expected: str) -> IngestError:
    text = repr(found)
    if len(text) > 120:
        text = text[:120] + "..."
    return IngestError(f"{where}: {what} is {text}; expected {expected}.")


def _int(where: str, what: str, value: Any, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= _INT64_MAX:
        raise _fail(where, what, value, f"an integer >= {low}")
    return value


def _optional_int(where: str, what: str, value: Any, low: int) -> int | None:
    return None if value is None else _int(where, what, value, low)


def _str(where: str, what: str, value: Any, allowed: Sequence[str] | None = None) -> str:
    if not isinstance(value, str) or (allowed is not None and value not in allowed):
        raise _fail(
            where, what, value, "a string" if allowed is None else f"one of {list(allowed)}"
        )
    return value


def _object(where: str, what: str, value: Any, keys: Sequence[str]) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise _fail(where, what, type(value).__name__, "a JSON object")
    if set(value) != set(keys):
        extra = sorted(set(value) - set(keys))
        missing = sorted(set(keys) - set(value))
        raise IngestError(
            f"{where}: {what} has the keys {sorted(value)[:12]}; expected exactly "
            f"{sorted(keys)} (missing {missing}, unexpected {extra[:5]})."
        )
    return value


def _list(where: str, what: str, value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise _fail(where, what, type(value).__name__, "a JSON list")
    return value


def _options(where: str, options: Any) -> Mapping[str, Any]:
    """Check the recorded options (``source.options``) and return them."""
    keys = _OPTION_KEYS + (
        ("id_field",) if isinstance(options, dict) and "id_field" in options else ()
    )
    options = _object(where, "source.options", options, keys)
    name = "source.options"
    if "id_field" in options:
        _str(where, f"{name}.id_field", options["id_field"])
    if options["input_format"] is not None:
        _str(where, f"{name}.input_format", options["input_format"], format_names())
    names = _list(where, f"{name}.field", options["field"])
    if not names or any(not isinstance(item, str) or not item for item in names):
        raise _fail(where, f"{name}.field", names, "a list of field names")
    tokenizer = options["tokenizer"]
    if tokenizer is not None and tokenizer != "bytes":
        _object(where, f"{name}.tokenizer", tokenizer, ("file", "sha256"))
        _str(where, f"{name}.tokenizer.file", tokenizer["file"])
        _str(where, f"{name}.tokenizer.sha256", tokenizer["sha256"])
    _str(where, f"{name}.split", options["split"], ("none", "paragraphs"))
    _optional_int(where, f"{name}.append_eos", options["append_eos"], 0)
    _int(where, f"{name}.shard_size", options["shard_size"], 1)
    vocab = _optional_int(where, f"{name}.vocab_size", options["vocab_size"], 1)
    dtype = _str(where, f"{name}.dtype", options["dtype"], ("auto", "uint16", "uint32", "int64"))
    _str(where, f"{name}.on_error", options["on_error"], ("raise", "skip"))
    _int(where, f"{name}.unit_size", options["unit_size"], 1)
    try:
        resolve_dtype(vocab, None if dtype == "auto" else dtype)
    except ValueError as exc:
        raise IngestError(f"{where}: source.options: {exc}") from None
    return options


def implied_job(options: Mapping[str, Any], tokenizer_path: Any) -> dict[str, Any]:
    """The worker ``job`` that the recorded ``options`` imply (``tokenizer_path`` is the
    one thing the options do not fix: where the tokenizer file is on this machine)."""
    job = {
        "fields": list(options["field"]),
        "tokenizer": tokenizer_path,
        "split": options["split"],
        "append_eos": options["append_eos"],
        "vocab_size": options["vocab_size"],
        "dtype": resolve_dtype(
            options["vocab_size"], None if options["dtype"] == "auto" else options["dtype"]
        ),
        "shard_size": options["shard_size"],
        "on_error": options["on_error"],
    }
    if "id_field" in options:  # recorded only when given (older plans have no such key)
        job["id_field"] = options["id_field"]
    return job


def _job(where: str, job: Any, options: Mapping[str, Any]) -> dict[str, Any]:
    """Check that ``job`` is the one ``options`` imply (field by field) and return it."""
    keys = _JOB_KEYS + (("id_field",) if "id_field" in options else ())
    job = _object(where, "job", job, keys)
    recorded = options["tokenizer"]
    tokenizer = job["tokenizer"]
    if isinstance(recorded, dict):
        _str(where, "job.tokenizer", tokenizer)
    elif tokenizer != recorded:
        raise _fail(where, "job.tokenizer", tokenizer, f"{recorded!r} (source.options.tokenizer)")
    expected = implied_job(options, tokenizer)
    for key in keys:
        if job[key] != expected[key] or type(job[key]) is not type(expected[key]):
            raise _fail(
                where, f"job.{key}", job[key], f"{expected[key]!r} (implied by source.options)"
            )
    return dict(job)


def _files(where: str, value: Any) -> tuple[InputFile, ...]:
    keys = [item.name for item in dataclass_fields(InputFile)]
    files = []
    for position, item in enumerate(_list(where, "files", value)):
        what = f"files[{position}]"
        item = _object(where, what, item, keys)
        files.append(
            InputFile(
                _str(where, f"{what}.path", item["path"]),
                _str(where, f"{what}.format", item["format"], format_names()),
                _int(where, f"{what}.size", item["size"]),
                _int(where, f"{what}.mtime_ns", item["mtime_ns"], -_INT64_MAX),
                _str(where, f"{what}.companion", item["companion"]),
            )
        )
    if not files:
        raise IngestError(f"{where}: files is empty; a plan has at least one input file.")
    return tuple(files)


def _unit(where: str, position: int, item: Any, files: Sequence[InputFile]) -> WorkUnit:
    """Parse unit ``position`` and check it against the plan's files (not yet its range
    against its neighbours)."""
    what = f"unit {position}"
    keys = [field.name for field in dataclass_fields(WorkUnit)]
    item = _object(where, what, item, keys)
    index = _int(where, f"{what} field 'index'", item["index"])
    if index != position:
        raise _fail(
            where, f"{what} field 'index'", index, f"{position} (units are numbered in order)"
        )
    source = _int(where, f"{what} field 'input'", item["input"])
    if source >= len(files):
        raise _fail(
            where, f"{what} field 'input'", source, f"an input of the plan (< {len(files)})"
        )
    paths = _list(where, f"{what} field 'paths'", item["paths"])
    unit = WorkUnit(
        index,
        source,
        _str(where, f"{what} field 'format'", item["format"], format_names()),
        _str(where, f"{what} field 'path'", item["path"]),
        _int(where, f"{what} field 'start'", item["start"]),
        _int(where, f"{what} field 'stop'", item["stop"], -1),
        _str(where, f"{what} field 'companion'", item["companion"]),
        tuple(_str(where, f"{what} field 'paths'", path) for path in paths),
    )
    file = files[source]
    if unit.format != file.format:
        raise _fail(where, f"{what} field 'format'", unit.format, f"{file.format!r} (its input's)")
    if get_format(unit.format).groups_files:
        inputs = [item.path for item in files[source : source + len(unit.paths)]]
        same_format = all(
            item.format == unit.format for item in files[source : source + len(inputs)]
        )
        if not unit.paths or list(unit.paths) != inputs or not same_format:
            raise _fail(
                where,
                f"{what} field 'paths'",
                list(unit.paths),
                f"consecutive input files {inputs}",
            )
        checks: tuple[tuple[str, Any, Any], ...] = (
            ("path", unit.path, unit.paths[0]),
            ("companion", unit.companion, ""),
            ("start", unit.start, 0),
            ("stop", unit.stop, len(unit.paths)),
        )
    else:
        checks = (
            ("path", unit.path, file.path),
            ("companion", unit.companion, file.companion),
            ("paths", list(unit.paths), []),
        )
    for field, found, wanted in checks:
        if found != wanted:
            raise _fail(
                where, f"{what} field {field!r}", found, f"{wanted!r} (from input {source})"
            )
    if unit.stop != -1 and unit.stop <= unit.start:
        raise _fail(where, f"{what} field 'stop'", unit.stop, f"-1 or above start {unit.start}")
    if unit.format == "jsonl" and unit.stop > file.size:
        raise _fail(
            where, f"{what} field 'stop'", unit.stop, f"at most the file's {file.size} bytes"
        )
    return unit


def _units(where: str, value: Any, files: Sequence[InputFile]) -> tuple[WorkUnit, ...]:
    """Parse the units; check they cover every input once, in order, without overlap."""
    units = tuple(
        _unit(where, position, item, files)
        for position, item in enumerate(_list(where, "units", value))
    )
    following = 0  # the input the next unit must start (or continue)
    previous: WorkUnit | None = None
    for unit in (*units, None):
        if previous is not None and (unit is None or unit.input != previous.input):
            _check_last(where, previous, files[previous.input])
        if unit is None:
            break
        what = f"unit {unit.index}"
        continues = (
            previous is not None
            and previous.input == unit.input
            and not get_format(unit.format).groups_files
        )
        if continues:
            assert previous is not None
            if previous.stop == -1 or unit.start != previous.stop:
                raise _fail(
                    where,
                    f"{what} field 'start'",
                    unit.start,
                    f"{previous.stop} (where unit {previous.index} of the same input stops; "
                    "units of an input are contiguous and do not overlap)",
                )
        else:
            if unit.input != following:
                raise _fail(
                    where,
                    f"{what} field 'input'",
                    unit.input,
                    f"{following} (every input has units, in the order of the plan's files)",
                )
            if unit.start != 0:
                raise _fail(
                    where, f"{what} field 'start'", unit.start, "0 (the first unit of an input)"
                )
        following = unit.input + (len(unit.paths) if get_format(unit.format).groups_files else 1)
        previous = unit
    if following != len(files):
        raise IngestError(
            f"{where}: units end at input {following} of {len(files)}; the inputs "
            f"{[item.path for item in files[following : following + 3]]} have no units."
        )
    return units


def _check_last(where: str, unit: WorkUnit, file: InputFile) -> None:
    """The last unit of an uncompressed JSONL input must end at the end of the file."""
    if unit.format == "jsonl" and unit.stop != -1 and unit.stop != file.size:
        raise _fail(
            where,
            f"unit {unit.index} field 'stop'",
            unit.stop,
            f"the file's {file.size} bytes (the last unit of {file.path})",
        )


def parse_plan(
    value: Any, where: str
) -> tuple[dict[str, Any], tuple[InputFile, ...], tuple[WorkUnit, ...], dict[str, Any]]:
    """Check a plan's JSON value (see the module docstring); return its four parts.

    Raises
    ------
    IngestError
        A key is missing, unexpected or mistyped, the job is not the one the options
        imply, or a unit does not fit the plan's files (names ``where``, the unit and
        the field).
    """
    try:
        value = _object(where, "the plan", value, ("version", "source", "files", "units", "job"))
        source = _object(where, "source", value["source"], ("tool", "version", "inputs", "options"))
        _str(where, "source.tool", source["tool"], ("mixle ingest",))
        _str(where, "source.version", source["version"])
        inputs = _list(where, "source.inputs", source["inputs"])
        for position, item in enumerate(inputs):
            _str(where, f"source.inputs[{position}]", item)
        options = _options(where, source["options"])
        job = _job(where, value["job"], options)
        files = _files(where, value["files"])
        units = _units(where, value["units"], files)
    except IngestError as exc:
        text = str(exc).removeprefix(f"{where}: ")
        raise IngestError(f"{where} is not an ingest plan this mixle runs: {text}") from None
    return dict(source), files, units, job


def compare_units(planned: Sequence[WorkUnit], implied: Sequence[WorkUnit], where: str) -> None:
    """Refuse ``planned`` unless it equals ``implied`` (the units planning gives now).

    Raises
    ------
    IngestError
        Names the first unit that differs and its field (or the missing or extra unit).
    """
    for position in range(max(len(planned), len(implied))):
        if position >= len(planned):
            unit = implied[position]
            raise IngestError(
                f"{where}: unit {position} ({unit.path} [{unit.start}, {unit.stop})) is missing; "
                f"the plan's inputs and options imply {len(implied)} units, the plan has "
                f"{len(planned)}. Make the plan again (--write-plan)."
            )
        if position >= len(implied):
            raise IngestError(
                f"{where}: unit {position} is not implied by the plan's inputs and options "
                f"({len(implied)} units, the plan has {len(planned)}). Make the plan again "
                "(--write-plan)."
            )
        found, wanted = planned[position].to_dict(), implied[position].to_dict()
        for field, value in found.items():
            if value != wanted[field]:
                raise _fail(
                    where,
                    f"unit {position} field {field!r}",
                    value,
                    f"{wanted[field]!r}, as the plan's inputs and options imply (make the plan "
                    "again with --write-plan)",
                )
