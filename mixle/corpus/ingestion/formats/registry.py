"""The registry of input formats: the one place that knows which formats exist.

Detection by extension, ``--input-format`` choices and its help, plan validation and
the inputs table of ``docs/ingest.md`` (:func:`formats_table`) are all read from here,
so a format registered with :func:`register_format` is detected, accepted, planned,
read and documented like a built-in one.

A format shipped in an installed package is found without being imported first: the
package declares it as an entry point of the group ``mixle_input_formats`` (name: the
format's name; value: its :class:`InputFormat` subclass or instance), which is
loaded the first time the list of formats is asked for or a name or extension is not
known (never for a name a loaded format already detects, so an entry point's
extensions may not end with a loaded format's). That is also how spawned worker processes (``workers > 1``) and other machines
(``--task``, dask) know it: they import ``mixle``, not the code that registered it.
"""

from __future__ import annotations

import importlib.metadata
import os
import re

from mixle.corpus.ingestion.formats.base import InputFormat
from mixle.errors import ArgumentError

__all__ = [
    "ENTRY_POINT_GROUP",
    "detect_format",
    "format_names",
    "formats_table",
    "get_format",
    "input_formats",
    "register_format",
]

ENTRY_POINT_GROUP = "mixle_input_formats"
_NAME = re.compile(r"[a-z][a-z0-9_-]*")
_entry_points_loaded = False


class _Registry:
    """The registered formats by name, and their extensions indexed for detection."""

    def __init__(self, formats: tuple[InputFormat, ...] = ()) -> None:
        self.formats: dict[str, InputFormat] = {}
        self._by_length: list[tuple[int, dict[str, str]]] = []
        for fmt in formats:
            self.add(fmt)

    def add(self, fmt: InputFormat) -> None:
        """Register ``fmt`` (already validated) and re-index the extensions."""
        self.formats[fmt.name] = fmt
        table: dict[int, dict[str, str]] = {}
        for item in self.formats.values():
            for ending in item.extensions:
                table.setdefault(len(ending), {})[ending] = item.name
        self._by_length = sorted(table.items(), reverse=True)

    def copy(self) -> _Registry:
        """An independent registry holding the same formats."""
        return _Registry(tuple(self.formats.values()))

    def detect(self, path: str) -> str | None:
        """The format whose longest extension ``path``'s name ends with: one dict lookup
        per distinct extension length (this runs once per input file, 10^4-10^6 times
        for a directory of small files)."""
        name = os.path.basename(path).lower()
        for length, endings in self._by_length:
            found = endings.get(name[-length:])
            if found is not None:
                return found
        return None


_REGISTRY = _Registry()


def _load_entry_points() -> None:
    """Register the formats installed packages declare, once per process (scanning the
    installed distributions costs 12-16 ms of CPU with 200 of them installed, so it
    waits until a format is not found or the whole list is asked for)."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry.name in _REGISTRY.formats:
            continue
        try:
            loaded = entry.load()
        except Exception as exc:  # whatever the plugin's import raises
            raise ArgumentError(
                f"input format {entry.name!r} (entry point {entry.value!r} of "
                f"{ENTRY_POINT_GROUP}) cannot be loaded: {type(exc).__name__}: {exc}"
            ) from exc
        if entry.name in _REGISTRY.formats:
            continue  # its module registered it on import
        fmt = loaded() if isinstance(loaded, type) else loaded
        if getattr(fmt, "name", None) != entry.name:
            raise ArgumentError(
                f"entry point {entry.name!r} of {ENTRY_POINT_GROUP} ({entry.value!r}) must be "
                f"the input format named {entry.name!r}. Got {getattr(fmt, 'name', fmt)!r} instead."
            )
        for ending in getattr(fmt, "extensions", ()):
            # Loaded lazily, it must not claim a name that a loaded format already
            # claims: that name would be read one way before the load, another after.
            owner = _REGISTRY.detect("file" + str(ending))
            if owner is not None:
                raise ArgumentError(
                    f"input format {entry.name!r} (entry point of {ENTRY_POINT_GROUP}): "
                    f"files ending in {ending!r} are already the format {owner!r}'s."
                )
        register_format(fmt)


def register_format(fmt: InputFormat, *, replace: bool = False) -> InputFormat:
    """Make ``fmt`` an input format of every later ingest in this process; return it.

    A format registered in code is known to this process only: spawned workers
    (``workers > 1``) and other machines import ``mixle``, not the registering code,
    so a format meant for them is declared as an entry point (module docstring).

    Raises
    ------
    ArgumentError
        ``fmt`` is not an :class:`InputFormat`, its name is not a lower-case word or is
        taken (pass ``replace=True`` to replace that format), or an extension is not a
        lower-case ``.ending`` or is claimed by another format (both named).
    """
    if not isinstance(fmt, InputFormat):
        got = f"the class {fmt.__name__}" if isinstance(fmt, type) else type(fmt).__name__
        raise ArgumentError(f"`fmt` must be an InputFormat instance. Got {got} instead.")
    name = getattr(fmt, "name", None)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ArgumentError(
            f"an input format's `name` must be a lower-case word like 'jsonl'. Got {name!r} instead."
        )
    if name in _REGISTRY.formats and not replace:
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
                for other in _REGISTRY.formats.values()
                if other.name != name and ending in other.extensions
            ),
            None,
        )
        if owner is not None:
            raise ArgumentError(
                f"input format {name!r}: extension {ending!r} is already the format {owner.name!r}'s."
            )
    _REGISTRY.add(fmt)
    return fmt


def input_formats() -> tuple[InputFormat, ...]:
    """The registered formats, in registration order (the built-in ones first, then
    those of installed packages' entry points)."""
    _load_entry_points()
    return tuple(_REGISTRY.formats.values())


def format_names() -> tuple[str, ...]:
    """The names of the registered formats, in registration order (see
    :func:`input_formats`)."""
    _load_entry_points()
    return tuple(_REGISTRY.formats)


def get_format(name: str) -> InputFormat:
    """The format registered as ``name``.

    Raises
    ------
    ArgumentError
        No format has that name, also after loading the entry points (the registered
        names are listed).
    """
    fmt = _REGISTRY.formats.get(name)
    if fmt is None:
        _load_entry_points()
        fmt = _REGISTRY.formats.get(name)
    if fmt is None:
        raise ArgumentError(
            f"`input_format` must be one of {', '.join(_REGISTRY.formats)}. Got {name!r} instead."
        )
    return fmt


def detect_format(path: str) -> str | None:
    """The format of ``path`` from its name: the format with the longest extension that
    the name ends with (case-insensitive), or ``None``. The entry points are loaded
    only for a name no loaded format claims (an entry point's format cannot claim a
    name a loaded one does, so the answer never depends on when they load)."""
    found = _REGISTRY.detect(path)
    if found is None and not _entry_points_loaded:
        _load_entry_points()
        found = _REGISTRY.detect(path)
    return found


def formats_table() -> str:
    """The inputs table of ``docs/ingest.md`` (Markdown, one row per format, ending in
    a newline); a test keeps the page equal to it."""
    lines = [
        "| format | files | a document is | parallel work units |",
        "|---|---|---|---|",
    ]
    for fmt in input_formats():
        doc = fmt.doc
        lines.append(f"| `{fmt.name}` | {doc.files} | {doc.document} | {doc.units} |")
    return "\n".join(lines) + "\n"
