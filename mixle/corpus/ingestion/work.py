"""The records of a plan: :class:`InputFile` (one input) and :class:`WorkUnit` (a slice
of one, or a group of small files), plus :func:`open_binary` to read an input.

Both are frozen, JSON-able, and a pure function of the inputs' names and contents, so
the plan (and therefore the corpus) is the same for every run and worker count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mixle._file_checks import open_regular
from mixle.corpus.storage.open import is_url
from mixle.errors import IngestError

__all__ = ["InputFile", "WorkUnit", "open_binary"]


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

    ``start``/``stop`` are what the format's :meth:`~.formats.InputFormat.cut` made of
    the file (byte offsets for ``jsonl``, a row group for ``parquet``, document indices
    for ``npz`` and ``megatron``), or file indices into ``paths`` for a format that
    groups consecutive small files (``npy``, ``text``); ``stop == -1`` means "to the end".
    """

    index: int
    input: int
    format: str
    path: str
    start: int
    stop: int
    companion: str = ""
    paths: tuple[str, ...] = ()

    @property
    def files(self) -> tuple[str, ...]:
        """The input files this unit reads: ``paths`` for a group, else ``(path,)``.
        :class:`~.formats.RecordOrigins` index this tuple."""
        return self.paths or (self.path,)

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
