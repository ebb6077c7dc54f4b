"""Ingest inputs: find the files, tell their formats, cut them into work units.

Everything here runs in the coordinating process and is a pure function of the
inputs' names and contents (never of the worker count), so the list of
:class:`WorkUnit` — and therefore the corpus — is the same for every run.

Formats (auto-detected by extension, or forced with ``input_format``):

``jsonl``
    ``.jsonl``/``.ndjson`` (split into line-aligned byte ranges of ``unit_bytes``),
    ``.jsonl.gz`` / ``.jsonl.zst`` (one unit per file: compressed streams cannot seek).
``parquet``
    ``.parquet``; one unit per row group (needs the optional ``pyarrow``).
``npy``
    ``.npy`` files holding one 1-D document each; consecutive files are grouped.
``npz``
    ``NAME.npz`` with flat ``tokens`` and ``offsets`` (``n + 1`` entries), or the pair
    ``NAME.tokens.npy`` + ``NAME.offsets.npy``; split into document ranges.
``megatron``
    A Megatron-LM ``PREFIX.bin`` + ``PREFIX.idx`` pair; split into document ranges.
``text``
    ``.txt``/``.text``/``.md``: a whole file, or each blank-line-separated paragraph;
    consecutive files are grouped into units of about ``unit_bytes``.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mixle._file_checks import open_regular, regular_stat
from mixle._optional import import_optional
from mixle.corpus.ingestion.flat import document_ranges, open_flat
from mixle.corpus.storage.open import is_url
from mixle.errors import ArgumentError, IngestError

__all__ = [
    "INPUT_FORMATS",
    "InputFile",
    "WorkUnit",
    "input_format_names",
    "open_binary",
    "plan_units",
    "resolve_inputs",
]

INPUT_FORMATS = ("jsonl", "parquet", "npy", "npz", "megatron", "text")


def input_format_names() -> tuple[str, ...]:
    """The names ``input_format`` (``--input-format``) accepts, in ``--help`` order."""
    return INPUT_FORMATS


_GLOB_CHARS = frozenset("*?[")


def open_binary(path: str) -> Any:
    """Open ``path`` (local path or fsspec URL) for binary, seekable reading."""
    if path.startswith("file://"):
        path = path[len("file://") :]
    if not is_url(path):
        return open_regular(path, IngestError)  # never blocks on a FIFO or reads a device
    import fsspec

    return fsspec.open(path, "rb").open()


@dataclass(frozen=True, slots=True)
class InputFile:
    """One input: ``path`` (tokens / data file), its format and identity for resume.

    ``companion`` is the second file of a pair (Megatron ``.idx``, ``.offsets.npy``).
    """

    path: str
    format: str
    size: int
    mtime_ns: int
    companion: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-able identity recorded in the resume plan."""
        return {
            "path": self.path,
            "format": self.format,
            "size": self.size,
            "mtime_ns": self.mtime_ns,
            "companion": self.companion,
        }


@dataclass(frozen=True, slots=True)
class WorkUnit:
    """A deterministic slice of the input, converted by one worker into its own shards.

    ``start``/``stop`` are byte offsets (``jsonl``), a row group (``parquet``), document
    indices (``npz``, ``megatron``) or file indices into ``paths`` (``npy``, ``text``:
    consecutive small files are grouped); ``stop == -1`` means "to the end".
    """

    index: int
    input: int
    format: str
    path: str
    start: int
    stop: int
    companion: str = ""
    paths: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-able description recorded in the resume plan."""
        return {
            "index": self.index,
            "input": self.input,
            "format": self.format,
            "path": self.path,
            "start": self.start,
            "stop": self.stop,
            "companion": self.companion,
            "paths": list(self.paths),
        }


def detect_format(path: str) -> str | None:
    """Return the input format of ``path`` from its extension, or ``None``."""
    name = os.path.basename(path).lower()
    if name.endswith((".jsonl", ".ndjson", ".jsonl.gz", ".jsonl.zst", ".ndjson.gz")):
        return "jsonl"
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith((".npz", ".tokens.npy")):
        return "npz"
    if name.endswith(".npy"):
        return "npy"
    if name.endswith((".bin", ".idx")):
        return "megatron"
    if name.endswith((".txt", ".text", ".md")):
        return "text"
    return None


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
        stem = path[: -len(".bin")] if path.endswith(".bin") else path
        if os.path.exists(stem + ".bin") and os.path.exists(stem + ".idx"):
            return [stem + ".bin"], False
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
        ``input_format`` is not one of :data:`INPUT_FORMATS`.
    """
    if input_format is not None and input_format not in INPUT_FORMATS:
        raise ArgumentError(
            f"`input_format` must be one of {', '.join(INPUT_FORMATS)}. Got {input_format!r} instead."
        )
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
                    f"--input-format ({', '.join(INPUT_FORMATS)})."
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
    companion = ""
    if fmt == "megatron":
        stem = path[: -len(".idx")] if path.endswith(".idx") else path
        stem = stem[: -len(".bin")] if stem.endswith(".bin") else stem
        path, companion = stem + ".bin", stem + ".idx"
    elif fmt == "npz" and path.endswith(".offsets.npy"):
        return None
    elif fmt == "npz" and path.endswith(".tokens.npy"):
        companion = path[: -len(".tokens.npy")] + ".offsets.npy"
    elif fmt == "npy" and path.endswith(".offsets.npy") and expanded:
        tokens = path[: -len(".offsets.npy")] + ".tokens.npy"
        if os.path.exists(tokens):
            return None
    for item in (path, companion):
        if item and not is_url(item) and not os.path.exists(item):
            raise IngestError(f"input {item} is missing (it is half of a {fmt} pair).")
    size, mtime = _stat(path)
    if companion:
        extra_size, extra_mtime = _stat(companion)
        size, mtime = size + extra_size, max(mtime, extra_mtime)
    return InputFile(path, fmt, size, mtime, companion)


def _compressed(path: str) -> bool:
    return path.lower().endswith((".gz", ".zst"))


def plan_units(
    files: Sequence[InputFile], unit_bytes: int, flat_unit_bytes: int | None = None
) -> list[WorkUnit]:
    """Cut ``files`` into work units of about ``unit_bytes`` of input each.

    Deterministic: depends only on the files, their sizes and headers, ``unit_bytes``
    and ``flat_unit_bytes``. Flat inputs (``npz``, ``megatron``) are cut at document
    boundaries into units of ``flat_unit_bytes`` of ids (default ``unit_bytes``), so
    every unit holds whole documents; uncompressed JSONL is cut at byte offsets and
    each line belongs to the unit holding its first byte.

    Raises
    ------
    IngestError
        A header of a flat input is malformed (names the file and the field).
    """
    units: list[WorkUnit] = []

    def add(
        position: int, item: InputFile, start: int, stop: int, paths: tuple[str, ...] = ()
    ) -> None:
        units.append(
            WorkUnit(
                len(units), position, item.format, item.path, start, stop, item.companion, paths
            )
        )

    # Consecutive small files of one format (npy documents, text files) share a unit.
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
        if item.format in ("npy", "text"):
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
        if item.format == "jsonl" and not _compressed(item.path):
            for start in range(0, item.size, unit_bytes):
                add(position, item, start, min(start + unit_bytes, item.size))
        elif item.format == "parquet":
            for row_group in range(_parquet_row_groups(item.path)):
                add(position, item, row_group, row_group + 1)
        elif item.format in ("npz", "megatron"):
            try:
                source = open_flat(item.format, item.path, item.companion, check_crc=True)
            except IngestError:
                # Unreadable: one unit whose reader reports why, as a failure or,
                # with on_error="skip", a reject (input_guard).
                add(position, item, 0, -1)
                continue
            try:
                for start, stop in document_ranges(source, flat_unit_bytes or unit_bytes):
                    add(position, item, start, stop)
            finally:
                source.close()
        else:
            add(position, item, 0, -1)
    flush_group()
    return units


def _parquet_row_groups(path: str) -> int:
    parquet = import_optional("pyarrow.parquet", "parquet")
    try:
        with open_binary(path) as handle:
            return int(parquet.ParquetFile(handle).metadata.num_row_groups)
    except Exception:  # pyarrow raises its own ArrowInvalid family
        # Unreadable: one unit whose reader reports why (a failure, or a reject with
        # on_error="skip"; see input_guard).
        return 1
