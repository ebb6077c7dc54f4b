"""Give an existing local corpus the block-offsets sidecar (``docs/format.md``,
"Block-offsets sidecar").

:class:`~mixle.corpus.CorpusWriter` writes the sidecar itself for corpora of
``BLOCK_OFFSETS_MIN_DOCUMENTS`` documents or more; :func:`add_block_offsets` adds it to
a corpus written before (or without) it: the sidecar from the corpus's own offsets
files, then the same manifest with one more ``metadata`` entry naming it, written
atomically. Shards and fingerprint are unchanged, so every stream identity, state and
plan of the corpus stays valid.
"""

from __future__ import annotations

import os
from typing import Any

from mixle._checks import positive_int
from mixle._io import atomic_write_bytes
from mixle.corpus.format.block_offsets import (
    BLOCK_OFFSETS_KEY,
    BLOCK_OFFSETS_NAME,
    BLOCK_OFFSETS_STRIDE,
    block_offsets_reference,
    block_offsets_sidecar,
)
from mixle.corpus.storage.open import open_corpus
from mixle.corpus.storage.sidecars_index import republish_metadata
from mixle.errors import ArgumentError

__all__ = ["add_block_offsets"]


def add_block_offsets(
    path: str | os.PathLike[str], *, stride: int = BLOCK_OFFSETS_STRIDE
) -> dict[str, Any]:
    """Write the block-offsets sidecar of the local corpus at ``path`` (one int64 per
    ``stride`` documents) and republish its manifest naming it; return the manifest's
    new ``metadata["block_offsets"]`` entry. Replaces a sidecar already there.

    O(documents / stride) offsets read (one page of offsets per value); readers that
    opened the corpus before keep reading it as before.

    Raises
    ------
    ArgumentError
        ``stride`` is not a positive integer, or ``path`` is not a local directory.
    CorpusError
        The corpus does not open (see :func:`~mixle.corpus.open_corpus`).
    """
    stride = positive_int("stride", stride)
    documents = open_corpus(path)
    directory = documents.store.local_directory
    if directory is None:
        raise ArgumentError(f"`path` must be a local corpus directory. Got {path!r} instead.")
    manifest = documents.parsed_manifest
    data = block_offsets_sidecar(documents.token_offsets, len(documents), stride)
    reference = block_offsets_reference(data)
    atomic_write_bytes(os.path.join(directory, BLOCK_OFFSETS_NAME), data)
    republish_metadata(
        documents.store, manifest, {**manifest.metadata, BLOCK_OFFSETS_KEY: reference}
    )
    return reference
