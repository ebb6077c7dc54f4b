"""The block-offsets sidecar: cumulative token offsets at every ``stride``-th document
(``docs/format.md`` section "Block-offsets sidecar").

A plan that groups documents into blocks (the ``"blocks"`` epoch order) needs the
token total of every block before its first batch: the cumulative token offset before
documents ``0, B, 2B, ..., N``. Read from the shards' offsets files those are one
scattered 8-byte value per ``8 B`` bytes of offsets, so at 10^9 documents the page
cache maps every page of ~8 GB of offsets to answer 244,141 values. This sidecar keeps
the same values contiguously (8 bytes per ``stride`` documents: ~2 MB at 10^9 documents
and a stride of 4096), so the plan reads one small file instead.

The file is optional and derived: ``metadata["block_offsets"]`` names it with its
version, stride, size and SHA-256, so it is sealed by the manifest's own checksum and
the corpus fingerprint (shards only) does not change when it is added. A reader that
finds no entry answers from the offsets files as before.

Layout (little-endian): ``MAGIC`` (8 bytes), ``u32`` version (1), ``u32`` flags (0),
``u64`` stride, ``u64`` documents ``N``, ``u64`` tokens, ``u64`` entries
(``ceil(N / stride) + 1``), then ``entries`` int64 values: entry ``k`` is the number of
tokens of documents ``0 .. min(k * stride, N) - 1`` (entry 0 is 0, the last is the
token count, never decreasing).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from mixle.corpus.format.sidecar import read_sealed_sidecar
from mixle.errors import CorpusFormatError

if TYPE_CHECKING:
    from mixle.corpus.format.store import ShardStore

__all__ = [
    "BLOCK_OFFSETS_KEY",
    "BLOCK_OFFSETS_MAGIC",
    "BLOCK_OFFSETS_MIN_DOCUMENTS",
    "BLOCK_OFFSETS_NAME",
    "BLOCK_OFFSETS_STRIDE",
    "BLOCK_OFFSETS_VERSION",
    "BlockOffsets",
    "BlockOffsetsRecorder",
    "block_offsets_reference",
    "block_offsets_sidecar",
    "encode_block_offsets",
    "read_block_offsets",
    "sidecar_reference",
]

BLOCK_OFFSETS_NAME = "block_offsets.bin"
BLOCK_OFFSETS_MAGIC = b"MXBLKOFF"
BLOCK_OFFSETS_VERSION = 1
#: Documents per entry the writers use: the ``"blocks"`` order's default block size, so
#: a stream whose ``block_documents`` is a multiple of it reads the sidecar.
BLOCK_OFFSETS_STRIDE = 4096
#: Corpora from this many documents get a sidecar by default (below it the offsets
#: files answer the block boundaries in a few milliseconds).
BLOCK_OFFSETS_MIN_DOCUMENTS = 1 << 24
#: The manifest metadata key that names the sidecar.
BLOCK_OFFSETS_KEY = "block_offsets"
_HEADER = struct.Struct("<8sIIQQQQ")
_REFERENCE_KEYS = frozenset({"file", "version", "stride", "bytes", "sha256"})


def _entries(num_documents: int, stride: int) -> int:
    return -(-num_documents // stride) + 1


def encode_block_offsets(values: np.ndarray, num_documents: int, stride: int) -> bytes:
    """The sidecar's bytes for ``values`` (entry ``k`` the offset before document
    ``min(k * stride, num_documents)``; ``ceil(num_documents / stride) + 1`` of them)."""
    values = np.ascontiguousarray(values, dtype="<i8")
    if values.shape != (_entries(num_documents, stride),):
        raise ValueError(f"{values.shape[0]} block offsets for {num_documents} / {stride}")
    header = _HEADER.pack(
        BLOCK_OFFSETS_MAGIC,
        BLOCK_OFFSETS_VERSION,
        0,
        stride,
        num_documents,
        int(values[-1]),
        values.shape[0],
    )
    return header + values.tobytes()


def block_offsets_sidecar(
    token_offsets: Callable[[np.ndarray], np.ndarray],
    num_documents: int,
    stride: int = BLOCK_OFFSETS_STRIDE,
) -> bytes:
    """The sidecar of a corpus of ``num_documents`` documents whose cumulative offsets
    ``token_offsets(indices)`` answers (e.g. ``ShardedDocuments.token_offsets``)."""
    boundaries = np.minimum(
        np.arange(_entries(num_documents, stride), dtype=np.int64) * stride, num_documents
    )
    return encode_block_offsets(token_offsets(boundaries), num_documents, stride)


class BlockOffsetsRecorder:
    """The sidecar's entries collected while documents are written, in order.

    :meth:`record` takes each written batch's lengths (O(batch / stride) work and
    memory); :meth:`encode` the sidecar's bytes once the last document is written.
    """

    def __init__(self, stride: int = BLOCK_OFFSETS_STRIDE) -> None:
        self.stride = stride
        self.documents = self.tokens = 0
        self._parts: list[np.ndarray] = []

    def record(self, lengths: np.ndarray, ends: np.ndarray) -> None:
        """Documents of ``lengths`` (``ends`` their int64 cumulative sum) written next."""
        local = np.arange(-self.documents % self.stride, lengths.shape[0], self.stride)
        before = np.where(local > 0, ends[np.maximum(local - 1, 0)], 0) if local.size else local
        self._parts.append(self.tokens + before.astype(np.int64))
        self.documents += lengths.shape[0]
        self.tokens += int(ends[-1]) if ends.size else 0

    def encode(self) -> bytes:
        """The sidecar of every document recorded."""
        values = np.concatenate([*self._parts, np.array([self.tokens], dtype=np.int64)])
        return encode_block_offsets(values, self.documents, self.stride)


def block_offsets_reference(data: bytes) -> dict[str, Any]:
    """The manifest metadata entry that names a sidecar of bytes ``data``."""
    stride = _HEADER.unpack_from(data)[3]
    return {
        "file": BLOCK_OFFSETS_NAME,
        "version": BLOCK_OFFSETS_VERSION,
        "stride": stride,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def sidecar_reference(metadata: Mapping[str, Any]) -> dict[str, Any] | None:
    """The sidecar named in a manifest's ``metadata``, or ``None`` when it names none.

    Raises
    ------
    CorpusFormatError
        The entry is not a version-1 reference (``file``, ``version``, ``stride``,
        ``bytes``, ``sha256``).
    """
    reference = metadata.get(BLOCK_OFFSETS_KEY)
    if reference is None:
        return None
    if (
        not isinstance(reference, dict)
        or set(reference) != _REFERENCE_KEYS
        or reference["file"] != BLOCK_OFFSETS_NAME
        or reference["version"] != BLOCK_OFFSETS_VERSION
        or not all(
            isinstance(reference[key], int) and not isinstance(reference[key], bool)
            for key in ("stride", "bytes")
        )
        or reference["stride"] < 1
        or not isinstance(reference["sha256"], str)
    ):
        raise CorpusFormatError(
            f"manifest metadata '{BLOCK_OFFSETS_KEY}' is {reference!r}, not a version-"
            f"{BLOCK_OFFSETS_VERSION} reference to {BLOCK_OFFSETS_NAME}."
        )
    return reference


class BlockOffsets:
    """A parsed, checked sidecar: :meth:`at` answers offsets at multiples of ``stride``.

    Parameters
    ----------
    data
        The whole file.
    num_documents, num_tokens
        The corpus's counts (from its manifest).
    stride
        The stride the manifest names.
    where
        The file, for messages.

    Raises
    ------
    CorpusFormatError
        Truncated, of another version, stride or corpus, or not a cumulative sum.
    """

    def __init__(
        self, data: bytes, num_documents: int, num_tokens: int, stride: int, where: str
    ) -> None:
        if len(data) < _HEADER.size:
            raise CorpusFormatError(f"{where}: {len(data)} bytes, shorter than its header.")
        magic, version, _, stored_stride, documents, tokens, count = _HEADER.unpack_from(data)
        if magic != BLOCK_OFFSETS_MAGIC or version != BLOCK_OFFSETS_VERSION:
            raise CorpusFormatError(
                f"{where}: not a version-{BLOCK_OFFSETS_VERSION} block-offsets sidecar."
            )
        expected = _entries(num_documents, stride)
        if (stored_stride, documents, tokens, count) != (
            stride,
            num_documents,
            num_tokens,
            expected,
        ) or len(data) != _HEADER.size + 8 * count:
            raise CorpusFormatError(
                f"{where}: {count} entries of stride {stored_stride} for {documents} documents "
                f"and {tokens} tokens in {len(data)} bytes; the corpus has {num_documents} "
                f"documents and {num_tokens} tokens at stride {stride} (truncated or from "
                "another corpus)."
            )
        values = np.frombuffer(data, dtype="<i8", offset=_HEADER.size)
        if values[0] != 0 or values[-1] != num_tokens or bool((values[1:] < values[:-1]).any()):
            raise CorpusFormatError(
                f"{where}: its offsets do not run from 0 to {num_tokens} without decreasing."
            )
        self.values, self.stride, self.num_documents = values, stride, num_documents

    def answers(self, indices: np.ndarray) -> bool:
        """Whether every index (int64) is a multiple of ``stride`` or the document count."""
        if not indices.size:
            return True
        body = indices[:-1] if indices[-1] == self.num_documents else indices
        if self.stride & (self.stride - 1) == 0:
            # One pass and no temporary (a fresh process pays a page fault per 4 KiB of
            # each new array): the OR of the indices has no low bit set.
            return not int(np.bitwise_or.reduce(body)) & (self.stride - 1)
        return bool(((body % self.stride == 0) | (body == self.num_documents)).all())

    def at(self, indices: np.ndarray) -> np.ndarray:
        """The offsets before ``indices`` (int64, each one that :meth:`answers` accepts).

        Every entry in order (``0, stride, 2 stride, ..., num_documents``: a plan's
        block boundaries) is answered with a read-only view of the sidecar's values,
        no copy; any other selection with a fresh array.
        """
        if (
            indices.shape[0] == self.values.shape[0] > 1
            and indices[0] == 0
            and indices[-1] == self.num_documents
            and bool((indices[1:] > indices[:-1]).all())
        ):
            # Ascending, distinct and as many as the entries: each is its own entry.
            view = self.values[:]
            view.setflags(write=False)
            return view
        positions = indices // self.stride
        if self.num_documents % self.stride:  # the count is not a multiple: its own entry
            positions[indices == self.num_documents] = self.values.shape[0] - 1
        return self.values[positions]


def read_block_offsets(
    store: ShardStore, metadata: Mapping[str, Any], num_documents: int, num_tokens: int
) -> BlockOffsets | None:
    """The sidecar of a corpus in ``store``, checked against its manifest reference;
    ``None`` when the manifest names none.

    Raises
    ------
    CorpusFormatError
        The sidecar is missing, of another size (truncated), of another digest (forged)
        or malformed; the message names the file.
    """
    reference = sidecar_reference(metadata)
    if reference is None:
        return None
    data, where = read_sealed_sidecar(store, BLOCK_OFFSETS_NAME, reference, copy=False)
    return BlockOffsets(data, num_documents, num_tokens, reference["stride"], where)
