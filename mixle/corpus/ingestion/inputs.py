"""Ingest inputs: find the files, tell their formats, cut them into work units.

Everything here runs in the coordinating process and is a pure function of the
inputs' names and contents (never of the worker count), so the list of
:class:`WorkUnit` — and therefore the corpus — is the same for every run.

What a file of each format is, how it pairs with a companion and how it is cut is
asked of its registered format (:mod:`mixle.corpus.ingestion.formats`); the formats
are auto-detected by extension, or forced with ``input_format``.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from typing import Any

from mixle._file_checks import regular_stat
from mixle.corpus.ingestion.formats import (
    BUILTIN_FORMATS,
    UnitSizes,
    detect_format,
    format_names,
    get_format,
    input_formats,
)
from mixle.corpus.ingestion.work import InputFile, WorkUnit, open_binary
from mixle.corpus.storage.open import is_url
from mixle.errors import IngestError

__all__ = [
    "INPUT_FORMATS",
    "InputFile",
    "WorkUnit",
    "detect_format",
    "open_binary",
    "plan_units",
    "resolve_inputs",
]

#: The built-in input formats; :func:`~.formats.format_names` also lists registered ones.
INPUT_FORMATS = BUILTIN_FORMATS
_GLOB_CHARS = frozenset("*?[")


def _stat(path: str) -> tuple[int, int]:
    if is_url(path):
        import fsspec

        fs, inner = fsspec.core.url_to_fs(path)
        return int(fs.size(inner)), 0
    info = regular_stat(path, IngestError)  # a FIFO or device is an error, not 0 bytes
    return info.st_size, info.st_mtime_ns


def _expand(spec: str) -> tuple[list[str], bool]:
    """Return the files ``spec`` names (sorted within a directory or glob) and whether
    it was a pattern or directory (then files of unknown format are skipped)."""
    if is_url(spec):
        import fsspec

        fs, inner = fsspec.core.url_to_fs(spec)
        if any(char in inner for char in _GLOB_CHARS):
            found = sorted(fs.glob(inner))
        elif fs.isdir(inner):
            found = sorted(fs.find(inner))
        else:
            return [spec], False
        return [fs.unstrip_protocol(item) for item in found], True
    path = spec[len("file://") :] if spec.startswith("file://") else spec
    if any(char in path for char in _GLOB_CHARS):
        return sorted(
            item for item in glob.glob(path, recursive=True) if os.path.isfile(item)
        ), True
    if os.path.isdir(path):
        found = []
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            found.extend(os.path.join(root, f) for f in files if not f.startswith("."))
        return sorted(found), True
    if not os.path.exists(path):
        for fmt in input_formats():
            named = fmt.named_by(path)
            if named is not None:
                return [named], False
        raise IngestError(f"input {spec} does not exist.")
    return [path], False


def resolve_inputs(inputs: Sequence[Any], input_format: str | None = None) -> list[InputFile]:
    """Return the input files named by ``inputs``, in order, with their formats.

    Each entry is a file, a directory (walked recursively, hidden entries skipped,
    sorted), a glob pattern (sorted) or an fsspec URL. A Megatron prefix may be given
    without its extension. Pairs (``.bin``/``.idx``, ``.tokens.npy``/``.offsets.npy``)
    become one input.

    Raises
    ------
    IngestError
        An input does not exist, a named file's format cannot be told from its
        extension (pass ``input_format``), half of a pair is missing, or nothing is found.
    ArgumentError
        ``input_format`` is not a registered format (:func:`~.formats.format_names`).
    """
    if input_format is not None:
        get_format(input_format)
    if isinstance(inputs, str | os.PathLike):
        inputs = [inputs]
    result: list[InputFile] = []
    seen: set[str] = set()
    for spec in inputs:
        files, expanded = _expand(os.fspath(spec))
        for path in files:
            fmt = input_format or detect_format(path)
            if fmt is None:
                if expanded:
                    continue
                raise IngestError(
                    f"cannot tell the format of {path} from its extension; pass "
                    f"--input-format ({', '.join(format_names())})."
                )
            entry = _pair(path, fmt, expanded)
            if entry is None or entry.path in seen:
                continue
            seen.add(entry.path)
            result.append(entry)
    if not result:
        raise IngestError(f"no input files found in {[os.fspath(s) for s in inputs]}.")
    return result


def _pair(path: str, fmt: str, expanded: bool) -> InputFile | None:
    pair = get_format(fmt).pair(path, expanded)
    if pair is None:
        return None
    path, companion = pair
    for item in (path, companion):
        if item and not is_url(item) and not os.path.exists(item):
            raise IngestError(f"input {item} is missing (it is half of a {fmt} pair).")
    size, mtime = _stat(path)
    if companion:
        extra_size, extra_mtime = _stat(companion)
        size, mtime = size + extra_size, max(mtime, extra_mtime)
    return InputFile(path, fmt, size, mtime, companion)


def plan_units(
    files: Sequence[InputFile], unit_bytes: int, flat_unit_bytes: int | None = None
) -> list[WorkUnit]:
    """Cut ``files`` into work units of about ``unit_bytes`` of input each.

    Deterministic: depends only on the files, their sizes and headers, ``unit_bytes``
    and ``flat_unit_bytes``. Each file is cut by its format's
    :meth:`~.formats.InputFormat.cut` (flat inputs, ``npz`` and ``megatron``, at
    document boundaries into units of ``flat_unit_bytes`` of ids, default
    ``unit_bytes``; uncompressed JSONL at byte offsets, each line belonging to the unit
    holding its first byte), except that consecutive files of a format that
    ``groups_files`` share units of about ``unit_bytes``.
    """
    sizes = UnitSizes(unit_bytes, flat_unit_bytes or unit_bytes)
    units: list[WorkUnit] = []
    # Consecutive small files of one grouping format (npy documents, text files)
    # share a unit.
    group: list[str] = []
    group_bytes = 0
    group_input = 0
    group_format = ""

    def flush_group() -> None:
        nonlocal group, group_bytes
        if group:
            units.append(
                WorkUnit(
                    len(units), group_input, group_format, group[0], 0, len(group), "", tuple(group)
                )
            )
        group, group_bytes = [], 0

    for position, item in enumerate(files):
        fmt = get_format(item.format)
        if fmt.groups_files:
            if group and group_format != item.format:
                flush_group()
            if not group:
                group_input, group_format = position, item.format
            group.append(item.path)
            group_bytes += item.size
            if group_bytes >= unit_bytes:
                flush_group()
            continue
        flush_group()
        for start, stop in fmt.cut(item, sizes):
            units.append(
                WorkUnit(len(units), position, item.format, item.path, start, stop, item.companion)
            )
    flush_group()
    return units
