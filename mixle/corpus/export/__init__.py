"""Export a corpus to other trainers' formats, proven by their own readers.

Public API
----------
export_corpus
    Write a corpus as Megatron-LM ``.bin/.idx`` prefixes (token files hard-linked,
    only the index written) or as LitData ``TokensLoader`` chunks + ``index.json``.
ExportSummary
    What an export wrote: files, prefixes, linked and copied bytes, time.
EXPORT_FORMATS
    ``("megatron", "litdata")``.

See ``docs/interop.md`` for the commands, the byte layouts and the round trip
(``mixle ingest`` of a Megatron export gives back the same corpus fingerprint).
"""

from __future__ import annotations

from mixle.corpus.export._api import EXPORT_FORMATS, ExportSummary, export_corpus
from mixle.corpus.export.litdata import DEFAULT_CHUNK_BYTES

__all__ = ["DEFAULT_CHUNK_BYTES", "EXPORT_FORMATS", "ExportSummary", "export_corpus"]
