"""Byte-level layout of format version 1: dtypes, the offsets header, names, checksums.

Everything here is pure (no directory walking, no manifest logic) so that the writer,
the reader, the verifier and a future remote cache share one definition of the bytes.
``docs/format.md`` is the normative description; this module implements it.

Layout of a shard ``NAME``:

``NAME.tokens``
    ``num_tokens`` little-endian token ids of the corpus dtype, no header.
``NAME.offsets``
    A 32-byte header (see :data:`HEADER`) followed by ``num_documents + 1``
    little-endian int64 offsets: ``offsets[0] == 0``, non-decreasing,
    ``offsets[-1] == num_tokens``. Document ``j`` of the shard is
    ``tokens[offsets[j]:offsets[j + 1]]``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle._file_checks import is_safe_name, open_regular
from mixle.errors import ArgumentError, ArgumentTypeError, CorpusFormatError, UnsafePathError

__all__ = [
    "CHECKSUM_ALGORITHM",
    "DTYPE_CODES",
    "FORMAT_VERSION",
    "HEADER",
    "HEADER_SIZE",
    "MAGIC",
    "MANIFEST_NAME",
    "MAX_MANIFEST_BYTES",
    "OffsetsHeader",
    "check_file_name",
    "check_offset_ends",
    "check_offsets",
    "check_offsets_range",
    "dtype_for_max_id",
    "dtype_limit",
    "normalize_dtype",
    "offsets_file_size",
    "read_header",
    "resolve_dtype",
    "shard_file_names",
]

#: The only entry point of a corpus; written last, atomically.
MANIFEST_NAME = "manifest.json"
#: Largest ``manifest.json`` read (about 3 million shard entries): a larger file is
#: refused, never read into memory whole.
MAX_MANIFEST_BYTES = 1 << 30
#: Version of the on-disk layout written into every header and manifest.
FORMAT_VERSION = 1
#: First 8 bytes of every ``.offsets`` file.
MAGIC = b"MIXLEOFS"
#: ``<`` little-endian: magic (8s), version (u32), dtype code (u32), documents (u64), tokens (u64).
HEADER = struct.Struct("<8sIIQQ")
HEADER_SIZE = HEADER.size  # 32: keeps the int64 offsets that follow 8-byte aligned.
#: Content checksum of every shard file and of the manifest itself.
CHECKSUM_ALGORITHM = "sha256"

#: Token dtypes of format version 1 and their header codes. Ids are never negative, so
#: the unsigned types hold the most ids per byte; int64 (not uint64) is the widest so
#: every id also fits the data layer's int64 token arrays.
DTYPE_CODES: dict[str, int] = {"uint16": 1, "uint32": 2, "int64": 3}
_CODE_TO_DTYPE = {code: name for name, code in DTYPE_CODES.items()}
_LIMITS = {"uint16": 2**16, "uint32": 2**32, "int64": 2**63}


def normalize_dtype(dtype: Any, what: str = "`dtype`") -> str:
    """Return the format-1 name (``"uint16"``, ``"uint32"`` or ``"int64"``) of ``dtype``.

    Raises
    ------
    ArgumentError
        ``dtype`` is not one of the three token dtypes.
    """
    try:
        name = np.dtype(dtype).name
    except TypeError as exc:
        raise ArgumentTypeError(
            f"{what} must be one of uint16, uint32, int64. Got {dtype!r} instead."
        ) from exc
    except (ValueError, SyntaxError) as exc:  # numpy parses strings: "0041,u2" -> SyntaxError
        raise ArgumentError(
            f"{what} must be one of uint16, uint32, int64. Got {str(dtype)[:40]!r} instead."
        ) from exc
    if name not in DTYPE_CODES:
        raise ArgumentError(f"{what} must be one of uint16, uint32, int64. Got {name} instead.")
    return name


def dtype_limit(dtype: str) -> int:
    """Return one more than the largest token id ``dtype`` holds (ids are never negative)."""
    return _LIMITS[dtype]


def dtype_for_max_id(max_id: int) -> str:
    """Return the smallest token dtype holding every id in ``[0, max_id]``."""
    for name in ("uint16", "uint32", "int64"):
        if max_id < _LIMITS[name]:
            return name
    raise ArgumentError(f"token id {max_id} does not fit in int64.")


def resolve_dtype(vocab_size: int | None, dtype: Any) -> str | None:
    """Combine the writer's ``vocab_size`` and ``dtype`` arguments into a dtype name.

    Returns ``None`` when neither is given: the dtype is then chosen from the data.

    Raises
    ------
    ArgumentError
        ``dtype`` is not a token dtype, or it cannot hold id ``vocab_size - 1``.
    """
    name = None if dtype is None else normalize_dtype(dtype)
    if vocab_size is None:
        return name
    # vocab_size - 1 is the largest id, e.g. 65536 ids fit uint16 exactly.
    needed = dtype_for_max_id(max(vocab_size - 1, 0))
    if name is None:
        return needed
    if vocab_size > _LIMITS[name]:
        raise ArgumentError(
            f"`dtype` {name} cannot hold token ids up to {vocab_size - 1} "
            f"(`vocab_size` = {vocab_size}); use {needed} or wider."
        )
    return name


def shard_file_names(index: int) -> tuple[str, str]:
    """Return the conventional ``(tokens, offsets)`` file names of shard ``index``."""
    stem = f"shard-{index:05d}"
    return f"{stem}.tokens", f"{stem}.offsets"


def check_file_name(name: Any, what: str) -> str:
    """Return ``name`` if it is a plain file name inside the corpus directory.

    Accepts only :data:`mixle._file_checks.SAFE_NAME` (ASCII letters, digits, ``.``,
    ``_``, ``-``; first a letter or digit; no ``..``): no path separators, drive
    letters, NUL bytes, ``~`` or ``%``-escapes, so a name means the same file in a
    directory and as a URL path segment.

    Raises
    ------
    UnsafePathError
        The name could resolve outside the corpus directory (or is not a string).
    """
    if not isinstance(name, str):
        raise UnsafePathError(f"{what} must be a plain file name string. Got {name!r} instead.")
    if not is_safe_name(name):
        raise UnsafePathError(
            f"{what} must be a plain file name inside the corpus directory "
            f"(only letters, digits, '.', '_' and '-', starting with a letter or digit, no "
            f"'..'). Got {name!r} instead."
        )
    return name


def offsets_file_size(num_documents: int) -> int:
    """Return the exact byte size of an ``.offsets`` file holding ``num_documents``."""
    return HEADER_SIZE + 8 * (num_documents + 1)


@dataclass(frozen=True, slots=True)
class OffsetsHeader:
    """The 32-byte header at the start of every ``.offsets`` file."""

    dtype: str
    num_documents: int
    num_tokens: int
    version: int = FORMAT_VERSION

    def pack(self) -> bytes:
        """Return the header's 32 bytes."""
        return HEADER.pack(
            MAGIC, self.version, DTYPE_CODES[self.dtype], self.num_documents, self.num_tokens
        )

    @classmethod
    def unpack(cls, data: bytes, where: str) -> OffsetsHeader:
        """Parse and validate header bytes read from ``where`` (named in errors).

        Raises
        ------
        CorpusFormatError
            Short read, wrong magic, unsupported version, unknown dtype code, or counts
            outside the int64 range.
        """
        if len(data) < HEADER_SIZE:
            raise CorpusFormatError(
                f"{where}: offsets header is {len(data)} bytes, expected {HEADER_SIZE} (file truncated)."
            )
        magic, version, code, num_documents, num_tokens = HEADER.unpack(data[:HEADER_SIZE])
        if magic != MAGIC:
            raise CorpusFormatError(
                f"{where}: not a mixle offsets file (magic {magic!r}, expected {MAGIC!r})."
            )
        if version != FORMAT_VERSION:
            raise CorpusFormatError(
                f"{where}: unsupported format version {version} (this reader knows {FORMAT_VERSION})."
            )
        if code not in _CODE_TO_DTYPE:
            raise CorpusFormatError(
                f"{where}: unknown dtype code {code} (expected one of {sorted(_CODE_TO_DTYPE)})."
            )
        if num_documents >= 2**63 or num_tokens >= 2**63:
            raise CorpusFormatError(f"{where}: document or token count exceeds the int64 range.")
        return cls(_CODE_TO_DTYPE[code], num_documents, num_tokens, version)


def read_header(path: str) -> OffsetsHeader:
    """Read and validate the header of the ``.offsets`` file at ``path``.

    Raises
    ------
    CorpusFormatError
        The file is missing, unreadable or its header is invalid.
    """
    try:
        with open_regular(path, CorpusFormatError) as handle:
            data = handle.read(HEADER_SIZE)
    except OSError as exc:
        raise CorpusFormatError(f"{path}: cannot read offsets header ({exc}).") from exc
    return OffsetsHeader.unpack(data, path)


def check_offsets(offsets: np.ndarray, num_tokens: int, where: str) -> None:
    """Check that ``offsets`` starts at 0, never decreases and ends at ``num_tokens``.

    O(documents), vectorized. Raises :class:`CorpusFormatError` naming the first bad
    document.
    """
    check_offset_ends(offsets, num_tokens, where)
    check_offsets_range(offsets, 0, offsets.shape[0] - 1, num_tokens, where)


def check_offset_ends(offsets: np.ndarray, num_tokens: int, where: str) -> None:
    """Check that ``offsets`` starts at 0 and ends at ``num_tokens`` (O(1))."""
    if offsets.shape[0] == 0 or int(offsets[0]) != 0:
        raise CorpusFormatError(f"{where}: offsets must start at 0.")
    if int(offsets[-1]) != num_tokens:
        raise CorpusFormatError(
            f"{where}: last offset is {int(offsets[-1])}, expected the token count {num_tokens}."
        )


def check_offsets_range(
    offsets: np.ndarray, first: int, stop: int, num_tokens: int, where: str
) -> None:
    """Check the offsets around documents ``[first, stop)``: ``offsets[first - 1 : stop + 2]``
    (clipped to the array) never decreases and stays within ``[0, num_tokens]``.

    The window reaches one offset past each end, so every decrease next to an offset of
    a document in the range is seen: a corrupt offset that makes a document longer also
    makes its neighbour negative, and reading either raises. With
    :func:`check_offset_ends`, checking the ranges of a partition of the documents is
    :func:`check_offsets`, so a reader may check a large offsets file range by range as
    documents are first read. Raises :class:`CorpusFormatError` naming the first bad
    document.
    """
    low = max(first - 1, 0)
    window = offsets[low : stop + 2]
    decreasing = window[1:] < window[:-1]
    if decreasing.any():
        doc = low + int(np.flatnonzero(decreasing)[0])
        raise CorpusFormatError(
            f"{where}: offsets decrease at document {doc} "
            f"({int(offsets[doc])} then {int(offsets[doc + 1])})."
        )
    if window.shape[0] and (int(window[0]) < 0 or int(window[-1]) > num_tokens):
        raise CorpusFormatError(
            f"{where}: offsets of documents {low} to {low + window.shape[0] - 2} leave "
            f"[0, {num_tokens}] ({int(window[0])} to {int(window[-1])})."
        )
