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
add_block_offsets, BLOCK_OFFSETS_NAME
    Give a corpus the block-offsets sidecar ``block_offsets.bin`` (``docs/format.md``,
    "Block-offsets sidecar"; ``CorpusWriter`` writes it from 2^24 documents on).
add_document_offsets, DOCUMENT_OFFSETS_NAME
    Give a corpus the document-offsets sidecar ``document_offsets.bin`` (every
    document's token offset in one file, checked chunk by chunk: ``docs/format.md``,
    "Document-offsets sidecar"; ``CorpusWriter`` writes it for many small shards).
add_sidecars, sidecar_status
    Give a corpus every scale sidecar its shape calls for, or the ones asked for
    (``mixle sidecars PATH``), and say which it has and lacks; every writer, ingest commit and merge writes them itself.
Origin, ORIGINS_NAME
    Where a document was read (``ShardedDocuments.origin(i)``), from the optional
    origins sidecar ``origins.bin`` (``docs/format.md`` section 15).
describe_corpus, plot_lengths
    Summary statistics and a document-length histogram (``mixle inspect``).
publish_corpus, convert_corpus, upload_corpus, stored_bytes
    Write a corpus to a local directory or fsspec URL, raw or zarr layout; the bytes a
    stored corpus occupies (``mixle convert`` reports the ratio of the two layouts).
ingest, IngestOptions (CorpusShape, IngestRun, IngestOutput), IngestSummary; plan_ingest, IngestPlan, run_unit, commit_ingest
    Ingest inputs in one call, or as three steps that may run on many machines (plan,
    run each unit, commit: ``docs/ingest.md``); merge_corpora, export_corpus.
CachedDocuments, RangeDocuments, RemoteStore, ShardCache
    Remote corpora: shared local shard cache with prefetch, or byte-range reads.
PlanFiles
    A directory of memory-mapped epoch plans: the file-backed
    :class:`mixle.data.PlanStore` (``StreamingCorpus(..., plan_store=PlanFiles(dir))``).

Building blocks (for parallel ingest and remote backends)
----------------------------------------------------------
ShardWriter, write_shard
    Write one shard crash-safely (temporary name, fsync, rename); return its entry.
commit_manifest
    Publish a list of shard entries as a corpus (totals, fingerprint, atomic write).
Manifest, ShardEntry
    The typed, validated manifest (``ShardedDocuments.parsed_manifest``) and its shards.
ShardStore, ShardLoader, ShardArrays, register_backend
    Where a corpus's files live (read and written through one store with capability
    flags), and how a reader obtains one shard's arrays (mapped in place, cached,
    range-read): the contracts a new storage backend implements, and the call that
    makes ``scheme://`` locations use it (checked with :mod:`mixle.testing`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mixle._lazy import attribute_names, load_attribute
from mixle.errors import CorpusError, RemoteError

if TYPE_CHECKING:
    from mixle.corpus.export import (
        DEFAULT_CHUNK_BYTES,
        EXPORT_FORMATS,
        ExportSummary,
        export_corpus,
    )
    from mixle.corpus.format.block_offsets import BLOCK_OFFSETS_NAME
    from mixle.corpus.format.document_offsets import DOCUMENT_OFFSETS_NAME
    from mixle.corpus.format.documents import DEFAULT_MAX_OPEN_SHARDS, ShardedDocuments
    from mixle.corpus.format.manifest import Manifest, ShardEntry, commit_manifest
    from mixle.corpus.format.origins import ORIGINS_NAME, Origin
    from mixle.corpus.format.scale_sidecars import sidecar_status
    from mixle.corpus.format.shard import ShardWriter, write_shard
    from mixle.corpus.format.shard_loader import ShardArrays, ShardLoader
    from mixle.corpus.format.spec import FORMAT_VERSION, MANIFEST_NAME
    from mixle.corpus.format.store import ShardStore
    from mixle.corpus.format.verify import ShardReport, VerifyReport
    from mixle.corpus.format.view import DocumentsView
    from mixle.corpus.format.writer import DEFAULT_SHARD_MAX_BYTES, CorpusWriter
    from mixle.corpus.ingestion.commit import commit_ingest
    from mixle.corpus.ingestion.formats import (
        InputFormat,
        format_names,
        input_formats,
        register_format,
    )
    from mixle.corpus.ingestion.inputs import INPUT_FORMATS
    from mixle.corpus.ingestion.merge import merge_corpora
    from mixle.corpus.ingestion.options import CorpusShape, IngestOptions, IngestOutput, IngestRun
    from mixle.corpus.ingestion.pipeline import DEFAULT_UNIT_BYTES, IngestSummary, ingest
    from mixle.corpus.ingestion.plan import IngestPlan, plan_ingest
    from mixle.corpus.ingestion.units import run_unit
    from mixle.corpus.storage.block_offsets_index import add_block_offsets
    from mixle.corpus.storage.cache import ShardCache
    from mixle.corpus.storage.cached_documents import CachedDocuments
    from mixle.corpus.storage.document_offsets_index import add_document_offsets
    from mixle.corpus.storage.inspect import describe_corpus, plot_lengths
    from mixle.corpus.storage.open import open_corpus, register_backend, verify_corpus
    from mixle.corpus.storage.plan_cache import PlanFiles
    from mixle.corpus.storage.publish import (
        convert_corpus,
        publish_corpus,
        stored_bytes,
        upload_corpus,
    )
    from mixle.corpus.storage.range_documents import RangeDocuments
    from mixle.corpus.storage.remote import RemoteStore
    from mixle.corpus.storage.sidecars_index import add_sidecars

# Each public name and the module that defines it; loaded by ``__getattr__`` on first use,
# so ``import mixle.corpus`` loads no ingest, export or remote-storage code.
_HOMES: dict[str, str] = {
    "DEFAULT_CHUNK_BYTES": "mixle.corpus.export",
    "EXPORT_FORMATS": "mixle.corpus.export",
    "ExportSummary": "mixle.corpus.export",
    "export_corpus": "mixle.corpus.export",
    "BLOCK_OFFSETS_NAME": "mixle.corpus.format.block_offsets",
    "DOCUMENT_OFFSETS_NAME": "mixle.corpus.format.document_offsets",
    "DEFAULT_MAX_OPEN_SHARDS": "mixle.corpus.format.documents",
    "ShardedDocuments": "mixle.corpus.format.documents",
    "Manifest": "mixle.corpus.format.manifest",
    "ShardEntry": "mixle.corpus.format.manifest",
    "commit_manifest": "mixle.corpus.format.manifest",
    "ORIGINS_NAME": "mixle.corpus.format.origins",
    "Origin": "mixle.corpus.format.origins",
    "ShardWriter": "mixle.corpus.format.shard",
    "write_shard": "mixle.corpus.format.shard",
    "ShardArrays": "mixle.corpus.format.shard_loader",
    "ShardLoader": "mixle.corpus.format.shard_loader",
    "FORMAT_VERSION": "mixle.corpus.format.spec",
    "MANIFEST_NAME": "mixle.corpus.format.spec",
    "ShardStore": "mixle.corpus.format.store",
    "ShardReport": "mixle.corpus.format.verify",
    "VerifyReport": "mixle.corpus.format.verify",
    "DocumentsView": "mixle.corpus.format.view",
    "DEFAULT_SHARD_MAX_BYTES": "mixle.corpus.format.writer",
    "CorpusWriter": "mixle.corpus.format.writer",
    "commit_ingest": "mixle.corpus.ingestion.commit",
    "InputFormat": "mixle.corpus.ingestion.formats",
    "format_names": "mixle.corpus.ingestion.formats",
    "input_formats": "mixle.corpus.ingestion.formats",
    "register_format": "mixle.corpus.ingestion.formats",
    "INPUT_FORMATS": "mixle.corpus.ingestion.inputs",
    "merge_corpora": "mixle.corpus.ingestion.merge",
    "CorpusShape": "mixle.corpus.ingestion.options",
    "IngestOptions": "mixle.corpus.ingestion.options",
    "IngestOutput": "mixle.corpus.ingestion.options",
    "IngestRun": "mixle.corpus.ingestion.options",
    "DEFAULT_UNIT_BYTES": "mixle.corpus.ingestion.pipeline",
    "IngestSummary": "mixle.corpus.ingestion.pipeline",
    "ingest": "mixle.corpus.ingestion.pipeline",
    "IngestPlan": "mixle.corpus.ingestion.plan",
    "plan_ingest": "mixle.corpus.ingestion.plan",
    "run_unit": "mixle.corpus.ingestion.units",
    "add_block_offsets": "mixle.corpus.storage.block_offsets_index",
    "add_document_offsets": "mixle.corpus.storage.document_offsets_index",
    "ShardCache": "mixle.corpus.storage.cache",
    "CachedDocuments": "mixle.corpus.storage.cached_documents",
    "describe_corpus": "mixle.corpus.storage.inspect",
    "plot_lengths": "mixle.corpus.storage.inspect",
    "open_corpus": "mixle.corpus.storage.open",
    "register_backend": "mixle.corpus.storage.open",
    "verify_corpus": "mixle.corpus.storage.open",
    "PlanFiles": "mixle.corpus.storage.plan_cache",
    "convert_corpus": "mixle.corpus.storage.publish",
    "publish_corpus": "mixle.corpus.storage.publish",
    "stored_bytes": "mixle.corpus.storage.publish",
    "upload_corpus": "mixle.corpus.storage.publish",
    "RangeDocuments": "mixle.corpus.storage.range_documents",
    "add_sidecars": "mixle.corpus.storage.sidecars_index",
    "sidecar_status": "mixle.corpus.format.scale_sidecars",
    "RemoteStore": "mixle.corpus.storage.remote",
}

__all__ = [
    "DEFAULT_MAX_OPEN_SHARDS",
    "DEFAULT_SHARD_MAX_BYTES",
    "DEFAULT_UNIT_BYTES",
    "FORMAT_VERSION",
    "INPUT_FORMATS",
    "MANIFEST_NAME",
    "CachedDocuments",
    "CorpusError",
    "CorpusWriter",
    "DocumentsView",
    "Manifest",
    "PlanFiles",
    "RangeDocuments",
    "RemoteError",
    "RemoteStore",
    "ShardArrays",
    "ShardCache",
    "ShardEntry",
    "ShardLoader",
    "ShardReport",
    "ShardStore",
    "ShardWriter",
    "ShardedDocuments",
    "VerifyReport",
    "commit_manifest",
    "convert_corpus",
    "describe_corpus",
    "open_corpus",
    "plot_lengths",
    "publish_corpus",
    "register_backend",
    "stored_bytes",
    "upload_corpus",
    "verify_corpus",
    "write_shard",
]
__all__ += ["IngestOptions", "IngestSummary", "ingest"]
__all__ += ["CorpusShape", "IngestOutput", "IngestRun"]
__all__ += ["InputFormat", "format_names", "input_formats", "register_format"]
__all__ += ["DEFAULT_CHUNK_BYTES", "EXPORT_FORMATS", "ExportSummary", "export_corpus"]
__all__ += ["IngestPlan", "commit_ingest", "merge_corpora", "plan_ingest", "run_unit"]
__all__ += ["ORIGINS_NAME", "Origin"]
__all__ += ["BLOCK_OFFSETS_NAME", "add_block_offsets"]
__all__ += ["DOCUMENT_OFFSETS_NAME", "add_document_offsets"]
__all__ += ["add_sidecars", "sidecar_status"]


def __getattr__(name: str) -> object:
    """Import the module that defines ``name`` on first use and cache the attribute."""
    return load_attribute(globals(), _HOMES, name)


def __dir__() -> list[str]:
    return attribute_names(globals(), __all__)
