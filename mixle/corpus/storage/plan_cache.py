"""Epoch plans in files: the file-backed :class:`~mixle.data._plan_store.PlanStore`.

One file per plan, ``<directory>/plan-<key>.bin`` where ``key`` is the first 32 hex
digits of the SHA-256 of the plan identity (canonical JSON). Layout, little-endian::

    b"MIXLEPLN"  uint64 header length  32-byte SHA-256 of the header  header (UTF-8 JSON)
    zero padding to a multiple of 64    the arrays, each starting at a multiple of 64

The header records the format version, the whole plan identity, the file size and
each array's dtype, shape, offset and CRC-32. Files are written with
:func:`mixle._io.atomic_write` (a reader sees no file or a complete one) and loaded as
read-only views of one ``mmap``. A regular file whose magic, header digest, size,
version, header fields, identity or any array's CRC-32 does not match is treated as
absent (the data layer then rebuilds the plan and overwrites it), so a flipped bit
anywhere in the file cannot change a batch; files of version 1 (no array checksums)
are stale in the same way. Something other than a regular file at a plan's path (a
directory, a FIFO, a link to a device) is refused with :class:`CorpusFormatError`,
before any byte is read. The arrays' consistency with the corpus is also checked by
the data layer on a sample of documents.

Loading costs O(header) plus one CRC-32 pass over the mapped arrays (~3 GB/s from
the page cache, page faults included: ~30 ms per 100 MiB of plan, about a fifth of
planning the epoch again). CRC-32 rather than a cryptographic digest: the
check guards against accidental change (any burst of up to 32 bits, anything else with
probability 1 - 2**-32); a deliberate forger could rewrite the header's SHA-256 as
easily as any unkeyed digest, and SHA-256 costs four times as much on every restart.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import struct
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from mixle._file_checks import open_regular
from mixle._io import atomic_write
from mixle._safe_json import loads_bounded
from mixle.errors import ArgumentTypeError, CorpusFormatError

__all__ = ["PlanFiles"]

_MAGIC = b"MIXLEPLN"
# Version 2 added each array's CRC-32; a version-1 file is stale (rebuilt).
_VERSION = 2
_ALIGN = 64
_PREFIX = struct.Struct("<8sQ32s")
# Headers hold an identity and a few array entries (a few KiB): a longer one is corrupt.
_MAX_HEADER = 1 << 20
# Plain numeric dtypes only: a forged header must not make numpy build object arrays.
_KINDS = "biuf"
_MAX_DIMENSIONS = 32


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
        """Write the plan atomically (replacing any file of the same identity)."""
        contiguous = {
            name: np.ascontiguousarray(a, dtype=np.asarray(a).dtype.newbyteorder("<"))
            for name, a in arrays.items()
        }
        entries: dict[str, dict[str, Any]] = {}
        offset = 0
        for name, array in contiguous.items():
            entries[name] = {
                "dtype": array.dtype.str,
                "shape": list(array.shape),
                "offset": offset,
                "crc32": _crc32(array),
            }
            offset = _aligned(offset + array.nbytes)
        header_fields = {"version": _VERSION, "identity": dict(identity), "arrays": entries}
        # The body offset depends on the header size, which records the file size: fix
        # the size field's width by writing it last as a zero-padded number.
        header = self._header(header_fields, body_size=offset)
        os.makedirs(self.directory, exist_ok=True)
        with atomic_write(self.path_for(identity)) as handle:
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

    def load(self, identity: Mapping[str, Any]) -> dict[str, np.ndarray] | None:
        """The plan saved with ``identity`` as read-only memory-mapped arrays, or ``None``
        (no file, or a file that is torn, corrupt, stale, of another version or identity).

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
                return None
            mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        magic, length, digest = _PREFIX.unpack_from(mapping, 0)
        if magic != _MAGIC or length > min(size - _PREFIX.size, _MAX_HEADER):
            return None
        header = mapping[_PREFIX.size : _PREFIX.size + length]
        if hashlib.sha256(header).digest() != digest:
            return None
        try:
            fields = loads_bounded(header, path, CorpusFormatError)
        except CorpusFormatError:
            return None
        if (
            not isinstance(fields, dict)
            or fields.get("version") != _VERSION
            or fields.get("size") != size
            or fields.get("identity") != json.loads(_canonical(identity))
            or not isinstance(fields.get("arrays"), dict)
        ):
            return None
        body = _aligned(_PREFIX.size + length)
        arrays: dict[str, np.ndarray] = {}
        for name, entry in fields["arrays"].items():
            array = _mapped_array(mapping, entry, body, size)
            if array is None:
                return None
            arrays[name] = array
        return arrays

    def __repr__(self) -> str:
        return f"PlanFiles({self.directory!r})"


def _crc32(array: np.ndarray) -> int:
    """CRC-32 of a C-contiguous array's bytes (0 for an empty one)."""
    return zlib.crc32(array.data.cast("B")) if array.nbytes else 0


def _mapped_array(mapping: mmap.mmap, entry: Any, body: int, size: int) -> np.ndarray | None:
    """The read-only array a header ``entry`` describes, or ``None`` when the entry is
    malformed (dtype, shape, offset, CRC-32), lies outside the file or its bytes do not
    match their CRC-32."""
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "offset", "crc32"}:
        return None
    kind, shape, offset, crc = entry["dtype"], entry["shape"], entry["offset"], entry["crc32"]
    if not isinstance(kind, str) or not isinstance(shape, list):
        return None
    if len(shape) > _MAX_DIMENSIONS or not all(_natural(v) for v in (offset, crc, *shape)):
        return None
    if any(extent > size for extent in shape):  # also keeps an empty array's shape sane
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
    if start + count * dtype.itemsize > size:
        return None
    if count == 0:
        return None if crc else np.empty(shape, dtype=dtype)
    array = np.frombuffer(mapping, dtype=dtype, count=count, offset=start).reshape(shape)
    return array if _crc32(array) == crc else None


def _natural(value: Any) -> bool:
    """Whether ``value`` is a nonnegative int (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
