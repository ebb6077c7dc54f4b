"""Full verification: every header, size, offset and SHA-256 checksum of a store's corpus."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from mixle._io import file_sha256
from mixle.corpus.format.spec import HEADER_SIZE, OffsetsHeader, check_offsets
from mixle.errors import ChecksumError, CorpusError, CorpusFormatError

__all__ = ["ShardReport", "VerifyReport", "check_shard_files", "verify_store"]

if TYPE_CHECKING:
    from mixle.corpus.format.manifest import Manifest, ShardEntry, ShardFile
    from mixle.corpus.format.store import ShardStore


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

    @property
    def ok(self) -> bool:
        """True when the manifest and every shard verified."""
        return not self.errors and all(shard.ok for shard in self.shards)

    def raise_first(self) -> None:
        """Raise the first problem found (corpus-level first), if any."""
        for error in self.errors:
            raise error
        for shard in self.shards:
            if shard.error is not None:
                raise shard.error

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form for ``mixle verify --json``."""
        return {
            "location": self.location,
            "fingerprint": self.fingerprint,
            "ok": self.ok,
            "errors": [f"{type(error).__name__}: {error}" for error in self.errors],
            "shards": [shard.to_dict() for shard in self.shards],
        }


def check_shard_files(store: ShardStore, dtype: str, number: int, entry: ShardEntry) -> None:
    """Cheap per-shard checks: header fields and file sizes against the manifest."""
    where = f"{store.location}/{entry.offsets}"
    header = OffsetsHeader.unpack(store.read_prefix(entry.offsets, HEADER_SIZE), where)
    expected = (dtype, entry.num_documents, entry.num_tokens)
    actual = (header.dtype, header.num_documents, header.num_tokens)
    if actual != expected:
        raise CorpusFormatError(
            f"{where}: header says dtype {header.dtype}, {header.num_documents} documents, "
            f"{header.num_tokens} tokens; manifest shard {number} says {dtype}, "
            f"{entry.num_documents} documents, {entry.num_tokens} tokens."
        )
    kinds: tuple[ShardFile, ...] = ("offsets", "tokens")
    for kind in kinds:
        size = store.file_size(entry.file_name(kind))
        if size != entry.file_bytes(kind):
            raise CorpusFormatError(
                f"{store.location}/{entry.file_name(kind)}: {size} bytes on disk, expected "
                f"{entry.file_bytes(kind)} (truncated, extended or replaced)."
            )


def _verify_shard(store: ShardStore, dtype: str, number: int, entry: ShardEntry) -> None:
    check_shard_files(store, dtype, number, entry)
    offsets_path = store.local_path(entry.offsets)
    tokens_path = store.local_path(entry.tokens)
    with open(offsets_path, "rb") as handle:
        data = handle.read()
    OffsetsHeader.unpack(data[:HEADER_SIZE], offsets_path)
    offsets = np.frombuffer(data, dtype="<i8", offset=HEADER_SIZE)
    check_offsets(offsets, entry.num_tokens, offsets_path)
    checks: tuple[tuple[ShardFile, str], ...] = (("offsets", offsets_path), ("tokens", tokens_path))
    for kind, path in checks:
        actual = file_sha256(path)
        if actual != entry.file_sha256(kind):
            raise ChecksumError(
                f"{path}: SHA-256 is {actual}, the manifest says {entry.file_sha256(kind)}."
            )


def verify_store(store: ShardStore, manifest: Manifest) -> VerifyReport:
    """Verify every shard of an already parsed manifest; collect, do not raise."""
    reports = []
    for number, entry in enumerate(manifest.shards):
        error: CorpusError | None = None
        try:
            _verify_shard(store, manifest.dtype, number, entry)
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
    return VerifyReport(store.location, manifest.fingerprint, tuple(reports))
