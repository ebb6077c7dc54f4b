"""The sharded offset-plus-token corpus format: writers, readers, verification.

A corpus is a directory holding ``manifest.json`` and shard pairs
``shard-NNNNN.tokens`` / ``shard-NNNNN.offsets`` (see ``docs/format.md``).

Public API
----------
CorpusWriter
    Stream documents in; shards roll over by size; manifest written last, atomically.
open_corpus, ShardedDocuments, DocumentsView
    Lazy, memory-mapped, picklable ``Sequence`` of read-only token arrays.
verify_corpus, VerifyReport, ShardReport
    Full checksum verification.
describe_corpus, plot_lengths
    Summary statistics and a document-length histogram (``mixle inspect``).

Building blocks (for parallel ingest and remote backends)
----------------------------------------------------------
ShardWriter, write_shard
    Write one shard crash-safely (temporary name, fsync, rename); return its entry.
commit_manifest
    Publish a list of shard entries as a corpus (totals, fingerprint, atomic write).
"""

from __future__ import annotations

from mixle.corpus._format import FORMAT_VERSION, MANIFEST_NAME
from mixle.corpus._ingest import IngestSummary, ingest
from mixle.corpus._inspect import describe_corpus, plot_lengths
from mixle.corpus._manifest import commit_manifest
from mixle.corpus._reader import (
    DEFAULT_MAX_OPEN_SHARDS,
    DocumentsView,
    ShardedDocuments,
    open_corpus,
)
from mixle.corpus._shard import ShardWriter, write_shard
from mixle.corpus._verify import ShardReport, VerifyReport, verify_corpus
from mixle.corpus._writer import DEFAULT_SHARD_MAX_BYTES, CorpusWriter
from mixle.errors import CorpusError

__all__ = [
    "DEFAULT_MAX_OPEN_SHARDS",
    "DEFAULT_SHARD_MAX_BYTES",
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "CorpusError",
    "CorpusWriter",
    "DocumentsView",
    "ShardReport",
    "ShardWriter",
    "ShardedDocuments",
    "VerifyReport",
    "commit_manifest",
    "describe_corpus",
    "open_corpus",
    "plot_lengths",
    "verify_corpus",
    "write_shard",
]
__all__ += ["IngestSummary", "ingest"]
