"""The registry of input formats: the one place that knows which formats exist.

Detection by extension, ``--input-format`` choices and its help, plan validation and
the inputs table of ``docs/ingest.md`` (:func:`formats_table`) are all read from here,
so a format registered with :func:`register_format` is detected, accepted, planned,
read and documented like a built-in one.
"""

from __future__ import annotations

import re

from mixle.corpus.ingestion.formats.base import InputFormat
from mixle.errors import ArgumentError

__all__ = [
    "detect_format",
    "format_names",
    "formats_table",
    "get_format",
    "input_formats",
    "register_format",
]

_FORMATS: dict[str, InputFormat] = {}
_NAME = re.compile(r"[a-z][a-z0-9_-]*")


def register_format(fmt: InputFormat, *, replace: bool = False) -> InputFormat:
    """Make ``fmt`` an input format of every later ingest in this process; return it.

    Register it at import time of the module that defines it, and import that module
    before ingesting: worker processes are spawned, so with ``workers > 1`` the module
    must also be imported by the workers (a module of an installed package whose import
    registers the format, imported by the code that runs ``ingest``, is enough for
    in-process runs; spawned workers import ``mixle`` only).

    Raises
    ------
    ArgumentError
        ``fmt`` is not an :class:`InputFormat`, its name is not a lower-case word or is
        taken (pass ``replace=True`` to replace that format), or an extension is not a
        lower-case ``.ending`` or is claimed by another format (both named).
    """
    if not isinstance(fmt, InputFormat):
        raise ArgumentError(
            f"`fmt` must be an InputFormat instance. Got {type(fmt).__name__} instead."
        )
    name = getattr(fmt, "name", None)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ArgumentError(
            f"an input format's `name` must be a lower-case word like 'jsonl'. Got {name!r} instead."
        )
    if name in _FORMATS and not replace:
        raise ArgumentError(
            f"input format {name!r} is already registered; pass replace=True to replace it."
        )
    for ending in fmt.extensions:
        if not isinstance(ending, str) or not ending.startswith(".") or ending != ending.lower():
            raise ArgumentError(
                f"input format {name!r}: an extension must be a lower-case '.ending' like "
                f"'.jsonl'. Got {ending!r} instead."
            )
        owner = next(
            (
                other
                for other in _FORMATS.values()
                if other.name != name and ending in other.extensions
            ),
            None,
        )
        if owner is not None:
            raise ArgumentError(
                f"input format {name!r}: extension {ending!r} is already the format {owner.name!r}'s."
            )
    _FORMATS[name] = fmt
    return fmt


def input_formats() -> tuple[InputFormat, ...]:
    """The registered formats, in registration order (the built-in ones first)."""
    return tuple(_FORMATS.values())


def format_names() -> tuple[str, ...]:
    """The names of the registered formats, in registration order."""
    return tuple(_FORMATS)


def get_format(name: str) -> InputFormat:
    """The format registered as ``name``.

    Raises
    ------
    ArgumentError
        No format has that name (the registered names are listed).
    """
    try:
        return _FORMATS[name]
    except KeyError:
        raise ArgumentError(
            f"`input_format` must be one of {', '.join(_FORMATS)}. Got {name!r} instead."
        ) from None


def detect_format(path: str) -> str | None:
    """The format of ``path`` from its name: the format with the longest extension that
    the name ends with (case-insensitive), or ``None``."""
    best, best_length = None, 0
    for fmt in _FORMATS.values():
        ending = fmt.detects(path)
        if ending is not None and len(ending) > best_length:
            best, best_length = fmt.name, len(ending)
    return best


def formats_table() -> str:
    """The inputs table of ``docs/ingest.md`` (Markdown, one row per format, ending in
    a newline); a test keeps the page equal to it."""
    lines = [
        "| format | files | a document is | parallel work units |",
        "|---|---|---|---|",
    ]
    for fmt in _FORMATS.values():
        doc = fmt.doc
        lines.append(f"| `{fmt.name}` | {doc.files} | {doc.document} | {doc.units} |")
    return "\n".join(lines) + "\n"
