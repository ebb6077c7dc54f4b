"""Epoch plans in files: the file-backed :class:`~mixle.data._plan_store.PlanStore`.

One file per plan, ``<directory>/plan-<key>.bin`` where ``key`` is the first 32 hex
digits of the SHA-256 of the plan identity (canonical JSON). Layout, little-endian::

    b"MIXLEPLN"  uint64 header length  32-byte SHA-256 of the header  header (UTF-8 JSON)
    zero padding to a multiple of 64    the arrays, each starting at a multiple of 64

The header records the format version, the whole plan identity, the file size and
each array's dtype, shape and offset. Files are written with
:func:`mixle._io.atomic_write` (a reader sees no file or a complete one) and loaded as
read-only views of one ``mmap``: loading costs O(header), whatever the plan's size. A
file whose magic, header digest, size or identity does not match is treated as absent
(the data layer then rebuilds the plan and overwrites it); the arrays' consistency
with the corpus is checked by the data layer on a sample of documents.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from mixle._io import atomic_write
from mixle.errors import ArgumentTypeError

__all__ = ["PlanFiles"]

_MAGIC = b"MIXLEPLN"
_VERSION = 1
_ALIGN = 64
_PREFIX = struct.Struct("<8sQ32s")


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
        contiguous = {name: np.ascontiguousarray(a) for name, a in arrays.items()}
        entries: dict[str, dict[str, Any]] = {}
        offset = 0
        for name, array in contiguous.items():
            entries[name] = {
                "dtype": array.dtype.newbyteorder("<").str,
                "shape": list(array.shape),
                "offset": offset,
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
                handle.write(array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes())
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
        (no file, or a file that is torn, corrupt, of another version or identity)."""
        try:
            with open(self.path_for(identity), "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size < _PREFIX.size:
                    return None
                mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        except (FileNotFoundError, ValueError):
            return None
        magic, length, digest = _PREFIX.unpack_from(mapping, 0)
        header = mapping[_PREFIX.size : _PREFIX.size + length]
        if magic != _MAGIC or len(header) != length or hashlib.sha256(header).digest() != digest:
            return None
        try:
            fields = json.loads(header)
        except ValueError:
            return None
        if (
            not isinstance(fields, dict)
            or fields.get("version") != _VERSION
            or fields.get("size") != size
            or fields.get("identity") != json.loads(_canonical(identity))
        ):
            return None
        body = _aligned(_PREFIX.size + length)
        arrays: dict[str, np.ndarray] = {}
        for name, entry in fields["arrays"].items():
            dtype = np.dtype(entry["dtype"])
            count = int(np.prod(entry["shape"], dtype=np.int64))
            start = body + int(entry["offset"])
            if start + count * dtype.itemsize > size:
                return None
            if count == 0:
                arrays[name] = np.empty(entry["shape"], dtype=dtype)
                continue
            array = np.frombuffer(mapping, dtype=dtype, count=count, offset=start)
            arrays[name] = array.reshape(entry["shape"])
        return arrays

    def __repr__(self) -> str:
        return f"PlanFiles({self.directory!r})"
