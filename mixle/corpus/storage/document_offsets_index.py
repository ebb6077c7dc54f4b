"""Give an existing local corpus the document-offsets sidecar (``docs/format.md``,
"Document-offsets sidecar").

:class:`~mixle.corpus.CorpusWriter` writes the sidecar itself for corpora of many small
shards; :func:`add_document_offsets` adds it to a corpus written before (or without)
it: the sidecar from the corpus's own offsets files (checked as they are read), then
the same manifest with one more ``metadata`` entry naming it, written atomically. Shards
and fingerprint are unchanged, so every stream identity, state and plan of the corpus
stays valid.
"""

from __future__ import annotations

import os
from typing import Any

from mixle._checks import positive_int
from mixle.corpus.format.document_offsets import (
    DOCUMENT_OFFSETS_CHUNK,
    DOCUMENT_OFFSETS_KEY,
    DOCUMENT_OFFSETS_NAME,
    offsets_pieces,
    write_document_offsets,
)
from mixle.corpus.storage.open import open_corpus
from mixle.corpus.storage.sidecars_index import republish_metadata
from mixle.errors import ArgumentError

__all__ = ["add_document_offsets"]


def add_document_offsets(
    path: str | os.PathLike[str], *, chunk: int = DOCUMENT_OFFSETS_CHUNK
) -> dict[str, Any]:
    """Write the document-offsets sidecar of the local corpus at ``path`` (every
    document's cumulative token offset, 8 bytes a document, checked in chunks of
    ``chunk`` values) and republish its manifest naming it; return the manifest's new
    ``metadata["document_offsets"]`` entry.
    Replaces a sidecar already there (its values are read from the offsets files, never
    from the old sidecar).

    O(documents) time; O(2^20) values in memory at a time. Readers that opened the
    corpus before keep reading it as before.

    Raises
    ------
    ArgumentError
        ``chunk`` is not a power of two, or ``path`` is not a local directory.
    CorpusError
        The corpus does not open, or an offsets file is damaged (names it).
    """
    chunk = positive_int("chunk", chunk)
    if chunk & (chunk - 1):
        raise ArgumentError(f"`chunk` must be a power of two. Got {chunk} instead.")
    documents = open_corpus(path)
    directory = documents.store.local_directory
    if directory is None:
        raise ArgumentError(f"`path` must be a local corpus directory. Got {path!r} instead.")
    manifest = documents.parsed_manifest
    reference = write_document_offsets(
        os.path.join(directory, DOCUMENT_OFFSETS_NAME),
        offsets_pieces(documents._offsets_from_shards, len(documents)),
        len(documents),
        chunk=chunk,
    )
    republish_metadata(
        documents.store, manifest, {**manifest.metadata, DOCUMENT_OFFSETS_KEY: reference}
    )
    return reference
