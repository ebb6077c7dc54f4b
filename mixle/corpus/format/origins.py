"""The origins sidecar: where each document of a corpus was read (``docs/format.md``
section "Origins sidecar").

A corpus may carry one file, ``origins.bin``, naming for every document the input file
and the record in it (a line, row, document or file, by the input's format) that it
was made from. Documents read from consecutive records of one file form a *run*, and
the file stores runs, not documents: a line-indexed input without skipped lines costs
one run (24 bytes) per input file, however many documents it holds. The manifest's
``metadata["origins"]`` names the file with its size and SHA-256, so the file is
sealed by the manifest's own checksum; a reader that does not want origins never
opens it, and a corpus without one is an ordinary corpus.

Layout (little-endian): ``MAGIC`` (8 bytes), ``u32`` version (1 or 2), ``u32`` flags,
``u64`` documents, ``u64`` runs, ``u64`` input-table bytes, the input table (UTF-8
JSON: a list of ``{"path", "kind"}``), zero padding to a multiple of 8, then three
``int64`` columns of ``runs`` entries each: the run's first document (0 first, strictly
increasing, below the document count), its input (an index into the table), and its
first record. Document ``d`` of run ``k`` has record ``record[k] + d - first[k]``.
Version 2 adds flag bit 0 (:data:`FLAG_IDS`): an id column follows the runs
(:class:`~.origin_ids.OriginIds`, one string per document, from ``--id-field``).
Writers write version 1 when there are no ids (readable by mixle before ids) and 2
with them; readers read both.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from mixle.corpus.format.origin_ids import OriginIds
from mixle.corpus.format.sidecar import read_sealed_sidecar
from mixle.errors import CorpusFormatError

if TYPE_CHECKING:
    from mixle.corpus.format.store import ShardStore

__all__ = [
    "FLAG_IDS",
    "METADATA_KEY",
    "ORIGINS_MAGIC",
    "ORIGINS_NAME",
    "ORIGINS_VERSION",
    "ORIGINS_VERSIONS",
    "Origin",
    "OriginRuns",
    "OriginsTable",
    "coalesce_runs",
    "concatenate_origins",
    "encode_origins",
    "origins_reference",
    "read_origins",
    "sidecar_reference",
]

ORIGINS_NAME = "origins.bin"
ORIGINS_MAGIC = b"MXORIGIN"
#: The newest version written (2: with an id column); :data:`ORIGINS_VERSIONS` are read.
ORIGINS_VERSION = 2
ORIGINS_VERSIONS = (1, 2)
#: Flag bit: an id column follows the runs (version 2).
FLAG_IDS = 1
_HEADER = struct.Struct("<8sIIQQQ")
#: The manifest metadata key that names the sidecar.
METADATA_KEY = "origins"


@dataclass(frozen=True, slots=True)
class Origin:
    """Where one document came from: ``record`` (0-based) of kind ``kind`` (``"line"``,
    ``"row"``, ``"document"``, ``"file"``) in the input file ``path``, and the value of
    its ``--id-field`` (``id``; ``None`` when the corpus was ingested without one)."""

    path: str
    kind: str
    record: int
    id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"path": self.path, "kind": self.kind, "record": self.record, "id": self.id}


@dataclass(frozen=True, slots=True)
class OriginRuns:
    """Runs of documents from consecutive records: three equal-length int64 columns."""

    first: np.ndarray
    input: np.ndarray
    record: np.ndarray

    @classmethod
    def empty(cls) -> OriginRuns:
        """No runs."""
        zero = np.empty(0, dtype=np.int64)
        return cls(zero, zero, zero)

    @classmethod
    def of_documents(cls, inputs: np.ndarray, records: np.ndarray, base: int = 0) -> OriginRuns:
        """The runs of documents ``base, base + 1, …`` read from ``records`` of ``inputs``."""
        inputs = np.asarray(inputs, dtype=np.int64)
        records = np.asarray(records, dtype=np.int64)
        if inputs.shape[0] == 0:
            return cls.empty()
        breaks = (inputs[1:] != inputs[:-1]) | (records[1:] != records[:-1] + 1)
        starts = np.concatenate(([0], np.flatnonzero(breaks) + 1))
        return cls(starts + base, inputs[starts], records[starts])

    @classmethod
    def joined(cls, parts: Sequence[OriginRuns]) -> OriginRuns:
        """The runs of ``parts`` one after the other (not coalesced: see
        :func:`coalesce_runs`)."""
        if not parts:
            return cls.empty()
        return cls(
            np.concatenate([part.first for part in parts]),
            np.concatenate([part.input for part in parts]),
            np.concatenate([part.record for part in parts]),
        )

    def shifted(self, documents: int, inputs: np.ndarray, records: np.ndarray) -> OriginRuns:
        """Runs with ``documents`` added to every first document, inputs mapped through
        ``inputs`` (old index → new) and ``records[old input]`` added to the records."""
        return OriginRuns(
            self.first + documents, inputs[self.input], self.record + records[self.input]
        )

    def to_bytes(self) -> bytes:
        """The three columns, as ``encode_origins`` stores them."""
        return b"".join(
            column.astype("<i8").tobytes() for column in (self.first, self.input, self.record)
        )

    @classmethod
    def from_bytes(cls, data: bytes | memoryview, where: str) -> OriginRuns:
        """Runs from :meth:`to_bytes` output.

        Raises
        ------
        CorpusFormatError
            ``data`` is not three equal int64 columns (names ``where``).
        """
        if len(data) % 24:
            raise CorpusFormatError(f"{where}: {len(data)} bytes is not a whole number of runs.")
        columns = np.frombuffer(data, dtype="<i8").reshape(3, -1).astype(np.int64)
        return cls(columns[0], columns[1], columns[2])


def coalesce_runs(runs: OriginRuns) -> OriginRuns:
    """``runs`` with every run that continues the one before it (same input, the next
    record) merged into it: the smallest run list for the same documents."""
    if runs.first.shape[0] < 2:
        return runs
    gaps = runs.first[1:] - runs.first[:-1]
    joins = (runs.input[1:] == runs.input[:-1]) & (runs.record[1:] == runs.record[:-1] + gaps)
    keep = np.concatenate(([True], ~joins))
    return OriginRuns(runs.first[keep], runs.input[keep], runs.record[keep])


def encode_origins(
    inputs: Sequence[tuple[str, str]],
    runs: OriginRuns,
    documents: int,
    ids: OriginIds | None = None,
) -> bytes:
    """The sidecar's bytes for ``documents`` documents read from ``inputs`` (``(path,
    kind)`` pairs) as ``runs``, with their ``ids`` (version 2) or without (version 1)."""
    if ids is not None and ids.documents != documents:
        raise ValueError(f"{ids.documents} ids for {documents} documents")
    table = json.dumps([{"path": path, "kind": kind} for path, kind in inputs]).encode()
    padding = b"\0" * (-(_HEADER.size + len(table)) % 8)
    version, flags = (1, 0) if ids is None else (2, FLAG_IDS)
    header = _HEADER.pack(ORIGINS_MAGIC, version, flags, documents, runs.first.shape[0], len(table))
    column = b"" if ids is None else ids.to_bytes()
    return header + table + padding + runs.to_bytes() + column


def concatenate_origins(tables: Sequence[OriginsTable]) -> bytes:
    """The sidecar of the concatenation of the corpora whose sidecars are ``tables``
    (in order): one input table, documents counted on; the ids kept when every table
    has them (dropped otherwise: a document never has a made-up id)."""
    inputs: dict[tuple[str, str], int] = {}
    parts = []
    documents = 0
    for table in tables:
        mapping = np.array([inputs.setdefault(item, len(inputs)) for item in table.inputs])
        zero = np.zeros(len(table.inputs), dtype=np.int64)
        parts.append(table.runs.shifted(documents, mapping.astype(np.int64), zero))
        documents += table.documents
    columns = [table.ids for table in tables]
    ids = None
    if tables and all(column is not None for column in columns):
        ids = OriginIds.joined([column for column in columns if column is not None])
    return encode_origins(list(inputs), coalesce_runs(OriginRuns.joined(parts)), documents, ids)


def origins_reference(data: bytes) -> dict[str, Any]:
    """The manifest metadata entry that names a sidecar of bytes ``data`` (its version
    is the file's own)."""
    return {
        "file": ORIGINS_NAME,
        "version": struct.unpack_from("<I", data, 8)[0],
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def sidecar_reference(metadata: Mapping[str, Any]) -> dict[str, Any] | None:
    """The sidecar named in a manifest's ``metadata``, or ``None`` when it names none.

    Raises
    ------
    CorpusFormatError
        The entry is not an object of ``file``, ``version``, ``bytes``, ``sha256``.
    """
    reference = metadata.get(METADATA_KEY)
    if reference is None:
        return None
    if (
        not isinstance(reference, dict)
        or reference.get("file") != ORIGINS_NAME
        or reference.get("version") not in ORIGINS_VERSIONS
        or isinstance(reference.get("version"), bool)
        or not isinstance(reference.get("bytes"), int)
        or not isinstance(reference.get("sha256"), str)
    ):
        raise CorpusFormatError(
            f"manifest metadata 'origins' is {reference!r}, not a version "
            f"{' or '.join(map(str, ORIGINS_VERSIONS))} reference to {ORIGINS_NAME}."
        )
    return reference


class OriginsTable:
    """A parsed, checked sidecar: :meth:`origin` of any document in O(log runs)."""

    def __init__(self, data: bytes, documents: int, where: str) -> None:
        """Parse ``data`` (the whole file) of a corpus of ``documents`` documents.

        Raises
        ------
        CorpusFormatError
            The file is truncated, of another version, or inconsistent (names ``where``).
        """
        if len(data) < _HEADER.size:
            raise CorpusFormatError(f"{where}: {len(data)} bytes, shorter than its header.")
        magic, version, flags, count, runs, table_bytes = _HEADER.unpack_from(data)
        if magic != ORIGINS_MAGIC or version not in ORIGINS_VERSIONS:
            raise CorpusFormatError(
                f"{where}: not an origins sidecar of version "
                f"{' or '.join(map(str, ORIGINS_VERSIONS))}."
            )
        if flags & ~FLAG_IDS or (version == 1 and flags):
            raise CorpusFormatError(f"{where}: unknown flags {flags:#x} for version {version}.")
        start = _HEADER.size + table_bytes + (-(_HEADER.size + table_bytes) % 8)
        end = start + 24 * runs
        with_ids = bool(flags & FLAG_IDS)
        if count != documents or len(data) < end or (not with_ids and len(data) != end):
            raise CorpusFormatError(
                f"{where}: {len(data)} bytes for {runs} runs of {count} documents; the corpus "
                f"has {documents} (truncated or from another corpus)."
            )
        try:
            table = json.loads(bytes(data[_HEADER.size : _HEADER.size + table_bytes]))
            self.inputs = [(str(item["path"]), str(item["kind"])) for item in table]
        except (ValueError, TypeError, KeyError) as exc:
            raise CorpusFormatError(f"{where}: its input table is not valid ({exc}).") from exc
        self.runs = OriginRuns.from_bytes(data[start:end], where)
        #: The id column (``--id-field``), or ``None``.
        self.ids = OriginIds.from_bytes(data[end:], documents, where) if with_ids else None
        self._where = where
        first, inputs = self.runs.first, self.runs.input
        if runs and (
            first[0] != 0
            or np.any(first[1:] <= first[:-1])
            or first[-1] >= documents
            or inputs.min() < 0
            or inputs.max() >= len(self.inputs)
        ):
            raise CorpusFormatError(f"{where}: its runs are not in order or name no input.")
        if documents and not runs:
            raise CorpusFormatError(f"{where}: no runs for {documents} documents.")
        self.documents = documents

    @classmethod
    def of_file(cls, data: bytes, where: str) -> OriginsTable:
        """Parse a sidecar that no manifest names (an export's ``PREFIX.origins``), for
        the document count its own header gives.

        Raises
        ------
        CorpusFormatError
            As :class:`OriginsTable` (names ``where``).
        """
        if len(data) < _HEADER.size:
            raise CorpusFormatError(f"{where}: {len(data)} bytes, shorter than its header.")
        return cls(data, int(_HEADER.unpack_from(data)[3]), where)

    def origin(self, index: int) -> Origin:
        """The origin of document ``index`` (``0 <= index < documents``, checked by the caller)."""
        run = int(np.searchsorted(self.runs.first, index, side="right")) - 1
        path, kind = self.inputs[int(self.runs.input[run])]
        record = int(self.runs.record[run]) + index - int(self.runs.first[run])
        name = None if self.ids is None else self.ids.get(index, self._where)
        return Origin(path, kind, record, name)

    def section(
        self, start: int, stop: int
    ) -> tuple[list[tuple[str, str]], OriginRuns, OriginIds | None]:
        """The origins of documents ``start .. stop - 1`` (``0 <= start <= stop <=
        documents``) as a sidecar of their own: the inputs they name, their runs
        (documents from 0, inputs indexing that list) and their ids."""
        first = self.runs.first
        low = int(np.searchsorted(first, start, side="right")) - 1
        high = int(np.searchsorted(first, stop, side="left"))
        if stop <= start:
            low = high = 0
        firsts = first[low:high].copy()
        records = self.runs.record[low:high].copy()
        if firsts.shape[0]:
            records[0] += start - firsts[0]
            firsts[0] = start
        used, inputs = np.unique(self.runs.input[low:high], return_inverse=True)
        ids = None
        if self.ids is not None:
            offsets = self.ids.offsets[start : stop + 1]
            data = self.ids.data[int(offsets[0]) : int(offsets[-1])]
            ids = OriginIds(offsets - offsets[0], data)
        runs = OriginRuns(firsts - start, inputs.astype(np.int64), records)
        return [self.inputs[int(k)] for k in used], runs, ids

    def section_bytes(self, start: int, stop: int) -> bytes:
        """The sidecar of documents ``start .. stop - 1`` (:meth:`section`), encoded."""
        inputs, runs, ids = self.section(start, stop)
        return encode_origins(inputs, runs, max(stop - start, 0), ids)

    def find_id(self, value: str) -> np.ndarray | None:
        """The documents (ascending indices) whose id is ``value``, by one scan of the id
        column; ``None`` when the sidecar has no ids."""
        return None if self.ids is None else self.ids.find(value)


def read_origins(
    store: ShardStore, metadata: Mapping[str, Any], documents: int
) -> OriginsTable | None:
    """The sidecar of a corpus in ``store`` (a :class:`~.store.ShardStore`), checked against
    its manifest reference; ``None`` when the manifest names none.

    Raises
    ------
    CorpusFormatError
        The sidecar is missing, of another size (truncated), of another digest (forged)
        or malformed; the message names the file.
    """
    reference = sidecar_reference(metadata)
    if reference is None:
        return None
    data, where = read_sealed_sidecar(store, ORIGINS_NAME, reference)
    return OriginsTable(data, documents, where)
