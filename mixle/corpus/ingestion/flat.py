"""Flat token inputs: one token array plus document boundaries, memory-mapped.

Three on-disk layouts share this reader:

* ``NAME.npz`` with a 1-D integer ``tokens`` array and ``offsets`` (``n + 1`` int
  entries, ``offsets[0] == 0``, non-decreasing, ``offsets[-1] == len(tokens)``).
  Members stored uncompressed (``np.savez``) are memory-mapped in place; compressed
  members (``np.savez_compressed``) must be decompressed into memory first.
* ``NAME.tokens.npy`` + ``NAME.offsets.npy``: the same two arrays as ``.npy`` files.
* A Megatron-LM indexed dataset ``PREFIX.bin`` + ``PREFIX.idx``. The ``.idx`` layout
  (all little-endian) is: magic ``b"MMIDIDX\\x00\\x00"`` (9 bytes), version ``u64``
  (1), dtype code ``u8`` (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64,
  7 float32, 8 uint16), sequence count ``u64``, document-index count ``u64``, then
  ``int32`` sequence lengths, ``int64`` sequence byte pointers into ``.bin`` and
  ``int64`` document indices (``[0, ..., n_sequences]``: document ``d`` is sequences
  ``doc_idx[d]:doc_idx[d + 1]``), optionally followed by per-sequence modes. A
  document is imported as the concatenation of its sequences.

Every read is a slice of a memory map, so a unit costs O(unit) memory and the
planner touches only the offsets.
"""

from __future__ import annotations

import contextlib
import os
import struct
import zipfile
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from mixle._file_checks import regular_size
from mixle.errors import IngestError

__all__ = [
    "MEGATRON_DTYPES",
    "MEGATRON_MAGIC",
    "FlatSource",
    "document_ranges",
    "npy_header",
    "open_megatron",
    "open_npz",
]

MEGATRON_MAGIC = b"MMIDIDX\x00\x00"
#: Megatron-LM dtype codes (``DType`` enum of its indexed dataset).
MEGATRON_DTYPES: dict[int, str] = {
    1: "uint8",
    2: "int8",
    3: "int16",
    4: "int32",
    5: "int64",
    6: "float64",
    7: "float32",
    8: "uint16",
}
_MEGATRON_HEADER = struct.Struct("<9sQBQQ")


def _check_integer(array: np.ndarray, what: str) -> None:
    if array.ndim != 1 or array.dtype.kind not in "iu" or array.dtype == np.uint64:
        raise IngestError(
            f"{what} must be a 1-D integer array (int8..int64 or uint8..uint32). "
            f"Got {array.dtype} with shape {array.shape} instead."
        )


def npy_header(handle: Any, where: str) -> tuple[tuple[int, ...], bool, np.dtype[Any]]:
    """Read a ``.npy`` header (format 1.0 or 2.0) from ``handle``: shape, Fortran order, dtype."""
    version = np.lib.format.read_magic(handle)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(handle)
    if version == (2, 0):
        return np.lib.format.read_array_header_2_0(handle)
    raise IngestError(f"{where}: unsupported .npy format version {version}.")


def _check_crc(path: str, start: int, size: int, expected: int, name: str) -> None:
    """Compare the CRC-32 of ``size`` stored bytes at ``start`` with the zip's record."""
    crc = 0
    with open(path, "rb") as handle:
        handle.seek(start)
        left = size
        while left:
            chunk = handle.read(min(left, 16 << 20))
            if not chunk:
                break
            crc = zlib.crc32(chunk, crc)
            left -= len(chunk)
    if left or crc != expected:
        raise IngestError(f"{path}: member `{name}` fails its CRC-32 check (damaged archive).")


def _npz_member(path: str, name: str, check_crc: bool) -> np.ndarray:
    """Memory-map member ``name`` of an ``.npz`` if it is stored uncompressed, else
    decompress it; either way only after its header agrees with the member's size.
    A stored member's CRC-32 is checked when ``check_crc`` (decompression always
    checks it)."""
    member = f"{name}.npy"
    with zipfile.ZipFile(path) as archive:
        try:
            info = archive.getinfo(member)
        except KeyError as exc:
            raise IngestError(
                f"{path}: has no `{name}` array (found {sorted(archive.namelist())})."
            ) from exc
        with archive.open(info) as stream:
            shape, fortran, dtype = npy_header(stream, f"{path}: `{name}`")
            header_bytes = stream.tell()
    if dtype.hasobject:
        raise IngestError(f"{path}: `{name}` holds Python objects; only integer arrays are read.")
    count = int(np.prod(shape, dtype=object))
    if header_bytes + count * dtype.itemsize != info.file_size:
        raise IngestError(
            f"{path}: `{name}` header says {shape} {dtype} ({count * dtype.itemsize} bytes), "
            f"the member holds {info.file_size - header_bytes} bytes of data."
        )
    if info.compress_type == zipfile.ZIP_STORED:
        with open(path, "rb") as handle:
            handle.seek(info.header_offset)
            local = handle.read(30)
            name_len, extra_len = struct.unpack("<HH", local[26:30])
            member_start = info.header_offset + 30 + name_len + extra_len
        if check_crc:
            _check_crc(path, member_start, info.file_size, info.CRC, member)
        data_start = member_start + header_bytes
        if len(shape) == 1 and not fortran and shape[0] > 0:
            return np.memmap(path, dtype=dtype, mode="r", offset=data_start, shape=shape)
    with np.load(path, allow_pickle=False) as archive:
        return np.asarray(archive[name])


class FlatSource:
    """Memory-mapped ``tokens`` plus a way to read document offsets by range.

    Attributes
    ----------
    tokens
        All token ids, in the input's integer dtype.
    num_documents
        Number of documents.
    """

    def __init__(
        self,
        where: str,
        tokens: np.ndarray,
        num_documents: int,
        offsets: np.ndarray | None = None,
        megatron: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> None:
        self.where = where
        self.tokens = tokens
        self.num_documents = num_documents
        self.itemsize = tokens.dtype.itemsize
        self._offsets = offsets
        self._megatron = megatron

    def offsets(self, start: int, stop: int) -> np.ndarray:
        """Return the int64 token offsets of document boundaries ``start..stop`` (inclusive).

        Validates the slice: non-decreasing and inside the token array (and, for
        Megatron, that sequences are stored back to back). Raises :class:`IngestError`
        naming the file and the first bad document or sequence.
        """
        total = self.tokens.shape[0]
        if self._offsets is not None:
            result = np.asarray(self._offsets[start : stop + 1], dtype=np.int64)
        else:
            assert self._megatron is not None
            sizes, pointers, doc_idx = self._megatron
            bounds = np.asarray(doc_idx[start : stop + 1], dtype=np.int64)
            first, last = int(bounds[0]), int(bounds[-1])
            n_seq = sizes.shape[0]
            if np.any(np.diff(bounds) < 0) or first < 0 or last > n_seq:
                raise IngestError(
                    f"{self.where}: document indices {start}..{stop} are not a non-decreasing "
                    f"range inside [0, {n_seq}]."
                )
            seq_sizes = np.asarray(sizes[first:last], dtype=np.int64)
            seq_ptr = np.asarray(pointers[first:last], dtype=np.int64)
            if seq_sizes.size and int(seq_sizes.min()) < 0:
                bad = first + int(np.flatnonzero(seq_sizes < 0)[0])
                raise IngestError(f"{self.where}: sequence {bad} has a negative length.")
            seq_start = seq_ptr // self.itemsize
            if seq_ptr.size:
                expected = seq_start[0] + np.concatenate(([0], np.cumsum(seq_sizes[:-1])))
                gap = (seq_start != expected) | (seq_ptr % self.itemsize != 0)
                if gap.any():
                    bad = first + int(np.flatnonzero(gap)[0])
                    raise IngestError(
                        f"{self.where}: sequence {bad} does not follow the previous one in "
                        ".bin (pointers must be back to back)."
                    )
                base = int(seq_start[0])
            else:
                base = int(pointers[first]) // self.itemsize if first < n_seq else total
            ends = np.concatenate(([base], base + np.cumsum(seq_sizes)))
            result = ends[bounds - first]
        if result.shape[0] and (
            int(result.min()) < 0 or int(result.max()) > total or np.any(np.diff(result) < 0)
        ):
            raise IngestError(
                f"{self.where}: offsets of documents {start}..{stop} must be non-decreasing "
                f"and within the {total} tokens."
            )
        return result

    def close(self) -> None:
        """Drop the memory maps (they close when no view is left)."""
        self._offsets = None
        self._megatron = None


def _open_megatron(bin_path: str, idx_path: str) -> FlatSource:
    where = idx_path
    with open(idx_path, "rb") as handle:
        header = handle.read(_MEGATRON_HEADER.size)
    if len(header) < _MEGATRON_HEADER.size or header[:9] != MEGATRON_MAGIC:
        raise IngestError(
            f"{where}: not a Megatron-LM index (expected magic {MEGATRON_MAGIC!r}, found {header[:9]!r})."
        )
    _, version, code, n_seq, n_doc_idx = _MEGATRON_HEADER.unpack(header)
    if version != 1:
        raise IngestError(f"{where}: unsupported Megatron index version {version} (expected 1).")
    dtype = MEGATRON_DTYPES.get(code)
    if dtype is None or dtype.startswith("float"):
        raise IngestError(
            f"{where}: Megatron dtype code {code} ({dtype or 'unknown'}) is not an integer token dtype."
        )
    size = os.path.getsize(idx_path)
    start = _MEGATRON_HEADER.size
    needed = start + 4 * n_seq + 8 * n_seq + 8 * n_doc_idx
    if size < needed or n_doc_idx < 1:
        raise IngestError(
            f"{where}: index is {size} bytes but its counts ({n_seq} sequences, {n_doc_idx} "
            f"document indices) need {needed} (file truncated)."
        )

    def view(dtype_: str, offset: int, count: int) -> np.ndarray:
        if count == 0:
            return np.empty(0, dtype=dtype_)
        return np.memmap(idx_path, dtype=dtype_, mode="r", offset=offset, shape=(count,))

    sizes = view("<i4", start, n_seq)
    pointers = view("<i8", start + 4 * n_seq, n_seq)
    doc_idx = view("<i8", start + 12 * n_seq, n_doc_idx)
    if int(doc_idx[0]) != 0 or int(doc_idx[-1]) != n_seq:
        raise IngestError(
            f"{where}: document indices must run from 0 to the sequence count {n_seq}; "
            f"found {int(doc_idx[0])}..{int(doc_idx[-1])}."
        )
    item = np.dtype(dtype).itemsize
    bin_size = os.path.getsize(bin_path)
    if bin_size % item:
        raise IngestError(f"{bin_path}: {bin_size} bytes is not a whole number of {dtype} ids.")
    tokens = (
        np.memmap(bin_path, dtype=np.dtype(dtype).newbyteorder("<"), mode="r")
        if bin_size
        else np.empty(0, dtype=dtype)
    )
    return FlatSource(bin_path, tokens, n_doc_idx - 1, megatron=(sizes, pointers, doc_idx))


@contextlib.contextmanager
def _opening(path: str, companion: str) -> Iterator[None]:
    """Check that both files are regular (never open a FIFO or a device), then turn any
    failure of a damaged input while opening into an :class:`IngestError` naming ``path``."""
    for item in (path, companion):
        if item:
            regular_size(item, IngestError)
    try:
        yield
    except IngestError:
        raise
    except Exception as exc:  # zipfile, zlib, numpy: any failure of a damaged archive
        raise IngestError(
            f"{path}: cannot read tokens/offsets ({type(exc).__name__}: {exc})."
        ) from exc


def open_megatron(bin_path: str, idx_path: str) -> FlatSource:
    """Open a Megatron-LM ``.bin``/``.idx`` pair without reading its tokens.

    Raises
    ------
    IngestError
        A file is not of the expected layout; names the file and what is wrong.
    """
    with _opening(bin_path, idx_path):
        return _open_megatron(bin_path, idx_path)


def open_npz(path: str, companion: str = "", *, check_crc: bool = False) -> FlatSource:
    """Open ``NAME.npz`` (``companion`` empty) or ``NAME.tokens.npy`` + ``companion``
    ``NAME.offsets.npy`` without reading its tokens.

    With ``check_crc``, the CRC-32 of memory-mapped (stored) ``.npz`` members is
    verified, reading them once: the planner does it once per file, so workers can
    trust the members they map.

    Raises
    ------
    IngestError
        A file is not of the expected layout; names the file and what is wrong.
    """
    with _opening(path, companion):
        if path.endswith(".npz"):
            tokens = _npz_member(path, "tokens", check_crc)
            offsets = _npz_member(path, "offsets", check_crc)
        else:
            tokens = np.load(path, mmap_mode="r", allow_pickle=False)
            offsets = np.load(companion, mmap_mode="r", allow_pickle=False)
    _check_integer(tokens, f"{path}: `tokens`")
    _check_integer(offsets, f"{companion or path}: `offsets`")
    if offsets.shape[0] < 1 or int(offsets[0]) != 0 or int(offsets[-1]) != tokens.shape[0]:
        first = int(offsets[0]) if offsets.shape[0] else None
        last = int(offsets[-1]) if offsets.shape[0] else None
        raise IngestError(
            f"{companion or path}: `offsets` must hold n + 1 boundaries from 0 to "
            f"len(tokens) = {tokens.shape[0]}; found first {first}, last {last}."
        )
    return FlatSource(path, tokens, offsets.shape[0] - 1, offsets=offsets)


def document_ranges(source: FlatSource, unit_bytes: int) -> list[tuple[int, int]]:
    """Split documents ``[0, n)`` into consecutive ranges of at least ``unit_bytes``
    of ids (the last may be shorter), reading offsets in bounded blocks."""
    count = source.num_documents
    step = max(unit_bytes // source.itemsize, 1)
    block = 1 << 20
    ranges: list[tuple[int, int]] = []
    start, start_token = 0, 0
    for block_start in range(0, count, block):
        block_stop = min(block_start + block, count)
        offsets = source.offsets(block_start, block_stop)
        ends = offsets[1:]
        while True:
            k = int(np.searchsorted(ends, start_token + step, side="left"))
            if k >= ends.shape[0]:
                break
            stop = max(block_start + 1 + k, start + 1)
            ranges.append((start, stop))
            start, start_token = stop, int(offsets[stop - block_start])
    if start < count:
        ranges.append((start, count))
    return ranges
