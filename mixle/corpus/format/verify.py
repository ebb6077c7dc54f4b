"""Full verification: every header, size, offset and SHA-256 checksum of a store's corpus,
and every token id against the manifest's ``vocab_size``."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from mixle._file_checks import open_regular
from mixle.corpus.format.block_offsets import BLOCK_OFFSETS_NAME, BlockOffsets, read_block_offsets
from mixle.corpus.format.document_offsets import (
    DOCUMENT_OFFSETS_NAME,
    DocumentOffsets,
    open_document_offsets,
)
from mixle.corpus.format.origins import ORIGINS_NAME, read_origins, sidecar_reference
from mixle.corpus.format.scale_sidecars import sidecar_status
from mixle.corpus.format.spec import HEADER_SIZE, OffsetsHeader, check_offsets
from mixle.errors import ChecksumError, CorpusError, CorpusFormatError

__all__ = ["ShardReport", "VerifyReport", "check_header", "check_shard_files", "verify_store"]

if TYPE_CHECKING:
    from mixle.corpus.format.manifest import Manifest
    from mixle.corpus.format.shard_entry import ShardEntry, ShardFile
    from mixle.corpus.format.store import ShardStore

_SCAN_CHUNK = 16 << 20


@dataclass(frozen=True, slots=True)
class ShardReport:
    """Outcome of verifying one shard: ``error`` is ``None`` when it is intact."""

    index: int
    tokens: str
    offsets: str
    num_documents: int
    num_tokens: int
    error: CorpusError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (the error as its class name and message)."""
        return {
            "index": self.index,
            "tokens": self.tokens,
            "offsets": self.offsets,
            "num_documents": self.num_documents,
            "num_tokens": self.num_tokens,
            "ok": self.ok,
            "error": None if self.error is None else f"{type(self.error).__name__}: {self.error}",
        }


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """Outcome of :func:`verify_corpus`: per-shard results and corpus-level errors."""

    location: str
    fingerprint: str | None
    shards: tuple[ShardReport, ...] = ()
    errors: tuple[CorpusError, ...] = field(default=())
    #: Whether the manifest names an origins sidecar (``origins.bin``).
    has_origins: bool = False
    #: What is wrong with the origins sidecar (missing, truncated, forged), or ``None``.
    origins_error: CorpusError | None = None
    #: Each scale sidecar by metadata key (``"block_offsets"``, ``"document_offsets"``):
    #: ``file``, ``present`` (the manifest names it), ``recommended`` (a corpus of this
    #: shape gets it by default; one missing is no error: ``mixle sidecars`` adds it)
    #: and ``ok`` (present and verified).
    sidecars: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the manifest, every shard and the origins sidecar (if any) verified."""
        return (
            not self.errors
            and self.origins_error is None
            and all(shard.ok for shard in self.shards)
        )

    def raise_first(self) -> None:
        """Raise the first problem found (corpus-level first, the sidecar last), if any."""
        for error in self.errors:
            raise error
        for shard in self.shards:
            if shard.error is not None:
                raise shard.error
        if self.origins_error is not None:
            raise self.origins_error

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form for ``mixle verify --json``."""
        return {
            "location": self.location,
            "fingerprint": self.fingerprint,
            "ok": self.ok,
            "errors": [f"{type(error).__name__}: {error}" for error in self.errors],
            "shards": [shard.to_dict() for shard in self.shards],
            "origins": None
            if not self.has_origins
            else {
                "file": ORIGINS_NAME,
                "ok": self.origins_error is None,
                "error": None
                if self.origins_error is None
                else f"{type(self.origins_error).__name__}: {self.origins_error}",
            },
            "sidecars": self.sidecars,
        }


def check_shard_files(store: ShardStore, dtype: str, number: int, entry: ShardEntry) -> None:
    """Cheap per-shard checks: header fields and file sizes against the manifest."""
    where = f"{store.location}/{entry.offsets}"
    check_header(store.read_prefix(entry.offsets, HEADER_SIZE), where, dtype, number, entry)
    kinds: tuple[ShardFile, ...] = ("offsets", "tokens")
    for kind in kinds:
        size = store.file_size(entry.file_name(kind))
        if size != entry.file_bytes(kind):
            raise CorpusFormatError(
                f"{store.location}/{entry.file_name(kind)}: {size} bytes on disk, expected "
                f"{entry.file_bytes(kind)} (truncated, extended or replaced)."
            )


def check_header(data: bytes, where: str, dtype: str, number: int, entry: ShardEntry) -> None:
    """Check offsets header bytes read from ``where`` against shard ``number``'s entry."""
    header = OffsetsHeader.unpack(data, where)
    expected = (dtype, entry.num_documents, entry.num_tokens)
    actual = (header.dtype, header.num_documents, header.num_tokens)
    if actual != expected:
        raise CorpusFormatError(
            f"{where}: header says dtype {header.dtype}, {header.num_documents} documents, "
            f"{header.num_tokens} tokens; manifest shard {number} says {dtype}, "
            f"{entry.num_documents} documents, {entry.num_tokens} tokens."
        )


def _scan_tokens(path: str, size: int, dtype: str, vocab_size: int | None) -> tuple[str, int]:
    """Hash the tokens file in one bounded pass; return ``(sha256, first id index >= vocab)``.

    The index is -1 when every id is below ``vocab_size`` (or it is ``None``). Reads at
    most ``size`` bytes of a regular file of exactly that size (never a device).
    """
    digest = hashlib.sha256()
    item = np.dtype(dtype).itemsize
    chunk = (_SCAN_CHUNK // item) * item
    bad = -1
    done = 0
    with open_regular(path, CorpusFormatError, size) as handle:
        while done < size:
            data = handle.read(min(chunk, size - done))
            if not data:
                raise CorpusFormatError(f"{path}: ended after {done} of {size} bytes.")
            digest.update(data)
            if vocab_size is not None and bad < 0:
                ids = np.frombuffer(data, dtype=np.dtype(dtype).newbyteorder("<"))
                over = np.flatnonzero(ids >= vocab_size)
                if over.size:
                    bad = done // item + int(over[0])
            done += len(data)
    return digest.hexdigest(), bad


def _verify_shard(
    store: ShardStore,
    dtype: str,
    vocab_size: int | None,
    number: int,
    entry: ShardEntry,
    first_document: int,
) -> np.ndarray:
    """Verify one shard; return its offsets (int64, ``num_documents + 1``)."""
    check_shard_files(store, dtype, number, entry)
    offsets_path = store.local_path(entry.offsets)
    tokens_path = store.local_path(entry.tokens)
    with open_regular(offsets_path, CorpusFormatError, entry.offsets_bytes) as handle:
        data = handle.read(entry.offsets_bytes)
    OffsetsHeader.unpack(data[:HEADER_SIZE], offsets_path)
    offsets = np.frombuffer(data, dtype="<i8", offset=HEADER_SIZE)
    check_offsets(offsets, entry.num_tokens, offsets_path)
    digests: dict[ShardFile, tuple[str, str]] = {
        "offsets": (offsets_path, hashlib.sha256(data).hexdigest()),
    }
    tokens_digest, bad = _scan_tokens(tokens_path, entry.tokens_bytes, dtype, vocab_size)
    digests["tokens"] = (tokens_path, tokens_digest)
    for kind, (path, actual) in digests.items():
        if actual != entry.file_sha256(kind):
            raise ChecksumError(
                f"{path}: SHA-256 is {actual}, the manifest says {entry.file_sha256(kind)}."
            )
    if bad >= 0:
        document = int(np.searchsorted(offsets, bad, side="right")) - 1
        position = bad - int(offsets[document])
        raise CorpusFormatError(
            f"{tokens_path}: the token id at document {first_document + document} (shard "
            f"{number}), position {position} is not below the manifest's vocab_size "
            f"{vocab_size}; the corpus was written with a wrong vocab_size."
        )
    return offsets


def verify_store(store: ShardStore, manifest: Manifest) -> VerifyReport:
    """Verify every shard of an already parsed manifest; collect, do not raise."""
    reports = []
    first_document = first_token = 0
    errors: list[CorpusError] = []
    sidecar = _block_offsets(store, manifest, errors)
    documents_sidecar = _document_offsets(store, manifest, errors)
    for number, entry in enumerate(manifest.shards):
        error: CorpusError | None = None
        try:
            offsets = _verify_shard(
                store, manifest.dtype, manifest.vocab_size, number, entry, first_document
            )
            if sidecar is not None and not _block_offsets_agree(
                sidecar, offsets, first_document, first_token
            ):
                errors.append(
                    CorpusFormatError(
                        f"{store.location}/{BLOCK_OFFSETS_NAME}: its offsets in shard {number} "
                        "differ from the shard's offsets file."
                    )
                )
                sidecar = None  # one report is enough
            if documents_sidecar is not None:
                try:
                    local = np.arange(offsets.shape[0], dtype=np.int64) + first_document
                    agree = np.array_equal(documents_sidecar.at(local), offsets + first_token)
                except CorpusError as exc:  # a chunk fails its digest or its structure
                    errors.append(exc)
                    documents_sidecar = None
                else:
                    if not agree:
                        errors.append(
                            CorpusFormatError(
                                f"{store.location}/{DOCUMENT_OFFSETS_NAME}: its offsets in "
                                f"shard {number} differ from the shard's offsets file."
                            )
                        )
                        documents_sidecar = None
        except CorpusError as exc:
            error = exc
        except OSError as exc:
            error = CorpusFormatError(f"{store.location}: shard {number} unreadable ({exc}).")
        reports.append(
            ShardReport(
                number,
                entry.tokens,
                entry.offsets,
                entry.num_documents,
                entry.num_tokens,
                error,
            )
        )
        first_document += entry.num_documents
        first_token += entry.num_tokens
    has_origins, origins_error = _verify_origins(store, manifest)
    sidecars = sidecar_status(manifest)
    for item in sidecars.values():  # each problem found names its file
        item["ok"] = item["present"] and not any(item["file"] in str(e) for e in errors)
    return VerifyReport(
        store.location,
        manifest.fingerprint,
        tuple(reports),
        tuple(errors),
        has_origins,
        origins_error,
        sidecars,
    )


def _block_offsets(
    store: ShardStore, manifest: Manifest, errors: list[CorpusError]
) -> BlockOffsets | None:
    """The block-offsets sidecar the manifest names (``None``: none, or a problem
    appended to ``errors``)."""
    try:
        return read_block_offsets(
            store, manifest.metadata, manifest.num_documents, manifest.num_tokens
        )
    except CorpusError as exc:
        errors.append(exc)
    except OSError as exc:
        errors.append(
            CorpusFormatError(f"{store.location}/{BLOCK_OFFSETS_NAME}: unreadable ({exc}).")
        )
    return None


def _document_offsets(
    store: ShardStore, manifest: Manifest, errors: list[CorpusError]
) -> DocumentOffsets | None:
    """The document-offsets sidecar the manifest names (``None``: none, or a problem
    appended to ``errors``: a reader falls back to the offsets files, verify reports)."""
    starts = np.array([0, *(entry.num_documents for entry in manifest.shards)], dtype=np.int64)
    tokens = np.array([0, *(entry.num_tokens for entry in manifest.shards)], dtype=np.int64)
    try:
        return open_document_offsets(store, manifest.metadata, np.cumsum(starts), np.cumsum(tokens))
    except CorpusError as exc:
        errors.append(exc)
    except OSError as exc:
        errors.append(
            CorpusFormatError(f"{store.location}/{DOCUMENT_OFFSETS_NAME}: unreadable ({exc}).")
        )
    return None


def _block_offsets_agree(
    sidecar: BlockOffsets, offsets: np.ndarray, first_document: int, first_token: int
) -> bool:
    """Whether the sidecar's entries inside one shard equal the shard's own offsets."""
    local = np.arange(-first_document % sidecar.stride, offsets.shape[0] - 1, sidecar.stride)
    expected = offsets[local] + first_token
    return bool(np.array_equal(sidecar.at(local + first_document), expected))


def _verify_origins(store: ShardStore, manifest: Manifest) -> tuple[bool, CorpusError | None]:
    """``(whether the manifest names a sidecar, what is wrong with it or None)``."""
    try:
        if sidecar_reference(manifest.metadata) is None:
            return False, None
        read_origins(store, manifest.metadata, manifest.num_documents)
    except CorpusError as exc:
        return True, exc
    except OSError as exc:
        return True, CorpusFormatError(f"{store.location}/{ORIGINS_NAME}: unreadable ({exc}).")
    return True, None
