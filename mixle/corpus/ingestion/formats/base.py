"""What an input format is: the one contract every format module implements.

A format knows, for its own files only, everything ingestion needs: its name and
extensions (detection, ``--input-format``), how a file pairs with a companion
(Megatron ``.idx``, ``.offsets.npy``), how a file is cut into work units, how a unit is
read into batches of documents, and how a position is described in an error message
and mapped to a record's origin. The planner, the workers and the error reports ask
the registered format (:mod:`.registry`) and never switch on a format's name.

A new format subclasses :class:`InputFormat`, implements :meth:`~InputFormat.read`,
:meth:`~InputFormat.describe` and :meth:`~InputFormat.origins`, overrides the
defaults that do not fit, and is registered with :func:`.registry.register_format`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

from mixle.corpus.format.origins import OriginsTable
from mixle.corpus.ingestion.formats.reading import InputBatch, ReadOptions, RecordOrigins
from mixle.corpus.ingestion.work import InputFile, WorkUnit

__all__ = ["FormatDoc", "InputFormat", "UnitSizes"]


@dataclass(frozen=True, slots=True)
class FormatDoc:
    """The format's row of the inputs table in ``docs/ingest.md`` (Markdown cells):
    which ``files`` it reads, what ``document`` is in them, how it is cut into ``units``."""

    files: str
    document: str
    units: str


@dataclass(frozen=True, slots=True)
class UnitSizes:
    """Target sizes of work units: ``unit_bytes`` of input, or ``flat_unit_bytes`` of ids
    for formats cut at document boundaries of a token array."""

    unit_bytes: int
    flat_unit_bytes: int


class InputFormat(ABC):
    """One input format. Subclasses set the class attributes and implement the
    abstract methods; instances are stateless and shared by every ingest.

    Attributes
    ----------
    name
        What ``--input-format`` and the plan call it (``"jsonl"``).
    extensions
        Lower-case file name endings it is detected by (``".jsonl"``, ``".jsonl.gz"``);
        the longest ending registered by any format wins (``.tokens.npy`` over ``.npy``).
    doc
        Its row of the docs table.
    groups_files
        Consecutive files of this format share work units of about ``unit_bytes``
        (``start``/``stop`` index :attr:`WorkUnit.paths`), instead of being cut by
        :meth:`cut`: for formats of many small files, one document each or a few.
    record_kind
        What a record is for :class:`RecordOrigins` (``"line"``, ``"row"``, ``"document"``,
        ``"file"``).
    named_fields
        Records have named fields (JSON keys, columns), so ``--id-field`` can name one:
        the reader then gives every document its id (:attr:`InputBatch.ids`; a record
        without a usable id is a bad record) and :meth:`origins` passes them on.
    """

    name: ClassVar[str]
    extensions: ClassVar[tuple[str, ...]]
    doc: ClassVar[FormatDoc]
    groups_files: ClassVar[bool] = False
    record_kind: ClassVar[str]
    named_fields: ClassVar[bool] = False

    def named_by(self, spec: str) -> str | None:
        """The input file that ``spec``, which names no existing file, stands for, or
        ``None``: a Megatron ``PREFIX`` stands for ``PREFIX.bin``. Default ``None``."""
        return None

    def pair(self, path: str, expanded: bool) -> tuple[str, str] | None:
        """``(data file, companion)`` for a file of this format, ``""`` when it has no
        companion, or ``None`` to pass over ``path`` (it is the second half of a pair
        that its first half brings in). ``expanded``: ``path`` came from a directory or
        glob, not named by the user. Default: the file alone."""
        return path, ""

    def cut(self, item: InputFile, sizes: UnitSizes) -> Sequence[tuple[int, int]]:
        """The ``(start, stop)`` ranges of ``item``'s work units, in order: a pure
        function of the file's name, size and headers, never of the worker count.
        Default: one unit for the whole file, ``(0, -1)``. Never raises for a damaged
        file: cut it as one unit, whose reader reports the damage."""
        return [(0, -1)]

    @abstractmethod
    def read(self, unit: WorkUnit, options: ReadOptions) -> Iterator[InputBatch]:
        """Yield the documents of ``unit`` in input order, in batches of about
        :data:`~.reading.BATCH_TOKENS` ids. Never raises for bad input: a bad record is
        a reject of its batch, and whatever fails while reading a file ends that file
        with a reject (:func:`~mixle.corpus.ingestion.input_guard.guard`)."""

    @abstractmethod
    def describe(self, unit: WorkUnit, location: tuple[int, int], line_base: int) -> str:
        """``"FILE line L, column C"`` (or row / document / file) for a location this
        format's reader gave. ``line_base`` is :meth:`lines_before` the unit."""

    @abstractmethod
    def origins(self, unit: WorkUnit, batch: InputBatch) -> RecordOrigins:
        """Where each document of ``batch`` (read from ``unit``) came from: O(documents
        in the batch) array work, no I/O."""

    def carried_origins(self, item: InputFile | WorkUnit) -> OriginsTable | None:
        """The origins that came with the input file (an export's sidecar), indexed by
        the file's records, or ``None`` (default): the commit step then records those
        origins (the documents' first inputs and ids) instead of the file's records.

        Raises
        ------
        IngestError
            The sidecar is there but is not one (names it).
        """
        return None

    def lines_before(self, unit: WorkUnit) -> int:
        """Lines of ``unit``'s file before the unit (read from the file; only asked to
        name a bad record). Default 0: units of other formats start at a file's start
        or name their records without line numbers."""
        return 0
