"""Epoch plans in files: the file-backed :class:`~mixle.data._plan_store.PlanStore`.

One file per plan, ``<directory>/plan-<key>.bin`` where ``key`` is the first 32 hex
digits of the SHA-256 of the plan identity (canonical JSON). Layout, little-endian::

    b"MIXLEPLN"  uint64 header length  32-byte SHA-256 of the header  header (UTF-8 JSON)
    zero padding to a multiple of 64    the arrays, each starting at a multiple of 64
    the chunk table (uint32 CRC-32s, starting at a multiple of 64)

The header records the format version, the whole plan identity, the file size, the
chunk size and each array's dtype, shape, offset and first chunk-table entry, and the
table's offset, length and CRC-32. Each array is cut into chunks of ``chunk_bytes``
(64 KiB; the last one shorter) with one CRC-32 each in the table. Files are written
with :func:`mixle._io.atomic_write` (a reader sees no file or a complete one) and
loaded as read-only views of one ``mmap``. A regular file whose magic, header digest,
size, version, header fields, identity, array extents or chunk table does not match is
treated as absent, with a warning naming the file and the reason on the ``mixle.plans``
logger (the data layer then rebuilds the plan and overwrites it). The arrays' chunks
are verified lazily: :meth:`PlanFiles.load` returns a
:class:`~mixle.corpus.storage.plan_chunks.StoredPlan`, whose ``check`` verifies a
chunk the first time a read touches it and raises :class:`CorpusFormatError` naming
the file and chunk when its bytes changed; ``check_all`` verifies the whole file. The
data layer reads every range through that check and, when it raises (at open or
mid-epoch, in any process), rebuilds the plan, saves it over the file (atomically)
and goes on with the rebuilt arrays (:class:`~mixle.data._plan_store.VerifiedArrays`):
a changed byte never changes a batch nor stops a run. Opening costs O(header + chunks)
(4 bytes per 64 KiB of plan), so a restart costs O(what it reads) however large the
plan.

Version 2 files (one CRC-32 per array, no chunk table) still load: their arrays are
checked whole on load, as before (O(file)), and a mismatch makes them absent; version
1 files (no checksums) are stale. Something other than a regular file at a plan's
path (a directory, a FIFO, a link to a device) is refused with
:class:`CorpusFormatError`, before any byte is read. The arrays' consistency with the
corpus is also checked by the data layer on a sample of documents.

CRC-32 rather than a cryptographic digest: the check guards against accidental change
(any burst of up to 32 bits, anything else with probability 1 - 2**-32); a deliberate
forger could rewrite the header's SHA-256 as easily as any unkeyed digest.
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import struct
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from mixle._file_checks import open_regular
from mixle._io import atomic_write, temporary_name
from mixle._safe_json import loads_bounded
from mixle.corpus.storage.plan_chunks import StoredPlan
from mixle.errors import ArgumentTypeError, CorpusFormatError

__all__ = ["PlanFiles"]

_MAGIC = b"MIXLEPLN"
# Version 2 added each array's CRC-32 (a version-1 file is stale, rebuilt); version 3
# replaced it with a table of per-chunk CRC-32s, checked lazily (version 2 still loads).
_VERSION = 3
_WHOLE_CRC_VERSION = 2
# Chunk size of version 3 files: a multiple of every item size (and of _ALIGN).
_CHUNK_BYTES = 1 << 16
_ALIGN = 64
_PREFIX = struct.Struct("<8sQ32s")
# Headers hold an identity and a few array entries (a few KiB): a longer one is corrupt.
_MAX_HEADER = 1 << 20
# Plain numeric dtypes only: a forged header must not make numpy build object arrays.
_KINDS = "biuf"
_MAX_DIMENSIONS = 32
# The data layer's plan logger (mixle.data._plan_store): a refused file is reported
# where a rebuilt one is.
_LOG = logging.getLogger("mixle.plans")


def _canonical(identity: Mapping[str, Any]) -> bytes:
    return json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()


def _aligned(offset: int) -> int:
    return -(-offset // _ALIGN) * _ALIGN


class PlanFiles:
    """A directory of memory-mapped epoch-plan files (created on the first save).

    Parameters
    ----------
    directory
        Where the plan files live, e.g. ``<checkpoint_dir>/plans`` beside a run, or a
        shared cache directory (plans of different streams never collide: the file
        name is derived from the identity, which the header repeats and ``load``
        compares).
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        if not isinstance(directory, str | os.PathLike):
            raise ArgumentTypeError(
                f"`directory` must be a path. Got {type(directory).__name__} instead."
            )
        self.directory = os.fspath(directory)

    def path_for(self, identity: Mapping[str, Any]) -> str:
        """The file that holds the plan of ``identity``."""
        key = hashlib.sha256(_canonical(identity)).hexdigest()[:32]
        return os.path.join(self.directory, f"plan-{key}.bin")

    def save(self, identity: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        """Write the plan atomically (replacing any file of the same identity; several
        writers of one plan at once are safe: each renames a whole file over it)."""
        contiguous = {
            name: np.ascontiguousarray(a, dtype=np.asarray(a).dtype.newbyteorder("<"))
            for name, a in sorted(arrays.items())  # the header's order (sorted keys)
        }
        entries: dict[str, dict[str, Any]] = {}
        tables: list[np.ndarray] = []
        offset = chunks = 0
        for name, array in contiguous.items():
            entries[name] = {
                "dtype": array.dtype.str,
                "shape": list(array.shape),
                "offset": offset,
                "first_chunk": chunks,
            }
            tables.append(_chunk_crcs(array))
            chunks += len(tables[-1])
            offset = _aligned(offset + array.nbytes)
        table = np.concatenate(tables) if tables else np.empty(0, dtype="<u4")
        header_fields = {
            "version": _VERSION,
            "identity": dict(identity),
            "arrays": entries,
            "chunk_bytes": _CHUNK_BYTES,
            "table": {"offset": offset, "count": len(table), "crc32": zlib.crc32(table.data)},
        }
        # The body offset depends on the header size, which records the file size: fix
        # the size field's width by writing it last as a zero-padded number.
        body_size = offset + table.nbytes
        header = self._header(header_fields, body_size=body_size)
        os.makedirs(self.directory, exist_ok=True)
        path = self.path_for(identity)
        # A unique temporary name: processes that found the same changed plan (DataLoader
        # workers, ranks on other machines sharing the directory) rewrite it at once, and
        # a per-pid name could be shared by two of them (threads, or hosts).
        with atomic_write(path, temporary=temporary_name(path, unique=True)) as handle:
            handle.write(_PREFIX.pack(_MAGIC, len(header), hashlib.sha256(header).digest()))
            handle.write(header)
            handle.write(
                b"\0" * (_aligned(_PREFIX.size + len(header)) - _PREFIX.size - len(header))
            )
            position = 0
            for name, array in contiguous.items():
                start = entries[name]["offset"]
                handle.write(b"\0" * (start - position))
                handle.write(array.data.cast("B") if array.nbytes else b"")
                position = start + array.nbytes
            handle.write(b"\0" * (offset - position))
            handle.write(table.data)

    @staticmethod
    def _header(fields: dict[str, Any], body_size: int) -> bytes:
        draft = json.dumps({**fields, "size": 0}, sort_keys=True).encode()
        for _ in range(4):  # the size's digits change the header length at most a few times
            size = _aligned(_PREFIX.size + len(draft)) + body_size
            header = json.dumps({**fields, "size": size}, sort_keys=True).encode()
            if len(header) == len(draft):
                return header
            draft = header
        return draft  # pragma: no cover - converges in two rounds

    def load(self, identity: Mapping[str, Any]) -> Mapping[str, np.ndarray] | None:
        """The plan saved with ``identity`` as read-only memory-mapped arrays, or ``None``
        (no file, or a file that is torn, corrupt, stale, of another version or identity:
        each of these but a missing file is logged, with the file and the reason, as a
        warning on the ``mixle.plans`` logger).

        A version 3 file loads as a :class:`StoredPlan` (chunks verified on first read by
        its ``check``; ``check_all`` verifies all of them); a version 2 file as a dict of
        arrays checked whole here.

        Raises
        ------
        CorpusFormatError
            The plan's path names something other than a regular file (a directory, a
            FIFO, a device, a link to one): refused before any byte is read.
        """
        path = self.path_for(identity)
        try:
            handle = open_regular(path, CorpusFormatError)
        except CorpusFormatError as exc:
            if not os.path.exists(path):
                return None  # no plan (or a dangling link, which the rebuild replaces)
            raise CorpusFormatError(
                f"epoch-plan file {exc} Plan files are a cache: remove it and the plan is rebuilt."
            ) from None
        with handle:
            size = os.fstat(handle.fileno()).st_size
            if size < _PREFIX.size:
                _refused(path, f"is {size} bytes, shorter than its prefix (torn)")
                return None
            mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        loaded = _parsed(path, mapping, size, identity)
        if isinstance(loaded, str):
            _refused(path, loaded)
            return None
        return loaded

    def __repr__(self) -> str:
        return f"PlanFiles({self.directory!r})"


def _refused(path: str, reason: str) -> None:
    """Report a plan file treated as absent (the data layer rebuilds and overwrites it)."""
    _LOG.warning(
        "epoch-plan file %s %s: ignored, the plan is rebuilt from the corpus and the file "
        "rewritten.",
        path,
        reason,
    )


def _parsed(
    path: str, mapping: mmap.mmap, size: int, identity: Mapping[str, Any]
) -> Mapping[str, np.ndarray] | str:
    """The plan of a mapped file, or why it is treated as absent."""
    magic, length, digest = _PREFIX.unpack_from(mapping, 0)
    if magic != _MAGIC:
        return f"does not start with {_MAGIC!r}"
    if length > min(size - _PREFIX.size, _MAX_HEADER):
        return f"records a header of {length} bytes, past its {size} bytes (torn or corrupt)"
    header = mapping[_PREFIX.size : _PREFIX.size + length]
    if hashlib.sha256(header).digest() != digest:
        return "has a header that fails its SHA-256 check"
    try:
        fields = loads_bounded(header, path, CorpusFormatError)
    except CorpusFormatError:
        return "has a header that is not the JSON of a plan"
    version = fields.get("version") if isinstance(fields, dict) else None
    if not isinstance(fields, dict) or version not in (_VERSION, _WHOLE_CRC_VERSION):
        return f"is of version {version!r} (this reader loads versions 2 and 3)"
    if fields.get("size") != size:
        return f"records {fields.get('size')!r} bytes but has {size} (torn)"
    if fields.get("identity") != json.loads(_canonical(identity)):
        return "was saved for another plan identity"
    if not isinstance(fields.get("arrays"), dict):
        return "has a header without array entries"
    body = _aligned(_PREFIX.size + length)
    if version == _WHOLE_CRC_VERSION:
        return _whole_checked_arrays(mapping, fields["arrays"], body, size)
    return _stored_plan(path, mapping, fields, body, size)


def _crc32(array: np.ndarray) -> int:
    """CRC-32 of a C-contiguous array's bytes (0 for an empty one)."""
    return zlib.crc32(array.data.cast("B")) if array.nbytes else 0


def _chunk_crcs(array: np.ndarray) -> np.ndarray:
    """The CRC-32 of each ``_CHUNK_BYTES`` chunk of a C-contiguous array (uint32, LE)."""
    data = array.data.cast("B") if array.nbytes else memoryview(b"")
    starts = range(0, array.nbytes, _CHUNK_BYTES)
    return np.array([zlib.crc32(data[at : at + _CHUNK_BYTES]) for at in starts], dtype="<u4")


def _whole_checked_arrays(
    mapping: mmap.mmap, entries: dict[str, Any], body: int, size: int
) -> dict[str, np.ndarray] | str:
    """A version 2 file's arrays, each checked against its CRC-32, or why not."""
    arrays: dict[str, np.ndarray] = {}
    for name, entry in entries.items():
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "offset", "crc32"}:
            return f"has a malformed entry for array `{name}`"
        crc = entry["crc32"]
        array = _mapped_array(mapping, entry, body, size)
        if array is None or not _natural(crc):
            return f"has a malformed entry for array `{name}`"
        if _crc32(array) != crc:
            return f"(version 2) has an array `{name}` that fails its CRC-32 check"
        arrays[name] = array
    return arrays


def _stored_plan(
    path: str, mapping: mmap.mmap, fields: dict[str, Any], body: int, size: int
) -> StoredPlan | str:
    """A version 3 file's arrays with their chunk table, or why not (the chunk size, an
    entry or the table's extent, length or CRC-32 is not what the arrays need)."""
    chunk_bytes, table = fields.get("chunk_bytes"), fields.get("table")
    if chunk_bytes != _CHUNK_BYTES:
        return f"records chunks of {chunk_bytes!r} bytes (this reader uses {_CHUNK_BYTES})"
    if not isinstance(table, dict) or set(table) != {"offset", "count", "crc32"}:
        return "has a malformed chunk table entry"
    if not all(map(_natural, table.values())):
        return "has a malformed chunk table entry"
    start, count = body + table["offset"], table["count"]
    if start % _ALIGN or start + 4 * count != size:
        return "has a chunk table that does not end the file"
    crcs = np.frombuffer(mapping, dtype="<u4", count=count, offset=start)
    if zlib.crc32(crcs.data) != table["crc32"]:
        return "has a chunk table that fails its CRC-32 check"
    arrays: dict[str, np.ndarray] = {}
    firsts: dict[str, int] = {}
    expected = 0
    for name, entry in sorted(fields["arrays"].items()):  # the table's order
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "offset", "first_chunk"}:
            return f"has a malformed entry for array `{name}`"
        array = _mapped_array(mapping, entry, body, start)
        if array is None or entry["first_chunk"] != expected:
            return f"has a malformed entry for array `{name}`"
        arrays[name], firsts[name] = array, expected
        expected += -(-array.nbytes // _CHUNK_BYTES)
    if expected != count:
        return f"has {count} chunk CRC-32s where its arrays have {expected} chunks"
    return StoredPlan(path, arrays, _CHUNK_BYTES, firsts, crcs)


def _mapped_array(
    mapping: mmap.mmap, entry: dict[str, Any], body: int, end: int
) -> np.ndarray | None:
    """The read-only array a header ``entry`` describes (unchecked), or ``None`` when
    the entry is malformed (dtype, shape, offset) or runs past file offset ``end``."""
    kind, shape, offset = entry["dtype"], entry["shape"], entry["offset"]
    if not isinstance(kind, str) or not isinstance(shape, list):
        return None
    if len(shape) > _MAX_DIMENSIONS or not all(_natural(v) for v in (offset, *shape)):
        return None
    if any(extent > end for extent in shape):  # also keeps an empty array's shape sane
        return None
    try:
        dtype = np.dtype(kind)
    except (TypeError, ValueError):
        return None
    if dtype.kind not in _KINDS or dtype.str != kind or kind[0] not in "<|":
        return None
    count = 1
    for extent in shape:
        count *= extent  # Python ints: a forged shape cannot overflow
    start = body + offset
    if start + count * dtype.itemsize > end or start % _ALIGN:
        return None
    if count == 0:
        return np.empty(shape, dtype=dtype)
    return np.frombuffer(mapping, dtype=dtype, count=count, offset=start).reshape(shape)


def _natural(value: Any) -> bool:
    """Whether ``value`` is a nonnegative int (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
