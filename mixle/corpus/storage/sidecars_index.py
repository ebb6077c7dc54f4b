"""Give an existing corpus the scale sidecars it lacks (``mixle sidecars PATH``).

A corpus written before the writers added ``block_offsets.bin`` /
``document_offsets.bin`` by default, or copied without them (a zarr round trip, a
hand copy of the shards), opens and streams as before, only slower at scale.
:func:`add_sidecars` writes what the one rule
(:func:`~mixle.corpus.format.scale_sidecars.wanted_sidecars`) or the caller asks for,
from the corpus's own offsets files, then republishes the same manifest with the
``metadata`` entries naming them, written last and atomically. Shards and fingerprint
are unchanged, so every stream identity, state and plan of the corpus stays valid, and
readers that opened the corpus before keep reading it as before.

:func:`~mixle.corpus.format.scale_sidecars.sidecar_status` says which sidecars a
corpus names and which its shape calls for (``mixle inspect``, ``mixle verify`` and
``mixle sidecars --check`` print it).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from typing import Any

from mixle.corpus.format.block_offsets import BLOCK_OFFSETS_KEY
from mixle.corpus.format.document_offsets import DOCUMENT_OFFSETS_KEY
from mixle.corpus.format.manifest import Manifest, write_manifest
from mixle.corpus.format.scale_sidecars import (
    SCALE_SIDECARS,
    LocalOffsetsFiles,
    StoreOffsetsFiles,
    sidecar_flag,
    sidecar_status,
    write_scale_sidecars,
)
from mixle.corpus.format.spec import MANIFEST_NAME
from mixle.corpus.format.store import ShardStore
from mixle.corpus.storage.open import is_url, open_corpus, writable_store

__all__ = ["add_sidecars", "republish_metadata"]


def republish_metadata(
    store: ShardStore, manifest: Manifest, metadata: Mapping[str, Any]
) -> Manifest:
    """Write ``manifest`` with ``metadata`` instead of its own to ``store`` (last,
    atomically: a local file by rename, an object by one put); return it. The shards
    (and a shard table's bytes) and the fingerprint are unchanged."""
    updated = Manifest.build(
        manifest.shards,
        dtype=manifest.dtype,
        vocab_size=manifest.vocab_size,
        metadata=dict(metadata),
        shard_table=manifest.shard_table is not None,
    )
    directory = store.local_directory
    if directory is not None:
        write_manifest(directory, updated)
    else:  # the table (same entries, same bytes) is already there
        store.write_bytes(MANIFEST_NAME, updated.to_json())
    return updated


def add_sidecars(
    path: str | os.PathLike[str],
    *,
    block_offsets: bool | None = None,
    document_offsets: bool | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Give the corpus at ``path`` (a local directory or a URL of a store that writes)
    the scale sidecars it should have; return the new manifest's entries for them.

    Parameters
    ----------
    path
        The corpus.
    block_offsets, document_offsets
        ``None`` (default): written when the corpus's shape calls for it (the rule
        every writer follows: block offsets from 2^24 documents, document offsets for
        1,024 shards or more of fewer than 4,096 documents on average) and not named
        already; one already named is kept. ``True``: written (replacing one already
        there). ``False``: removed (the manifest stops naming it, then the file goes).
    storage_options
        fsspec options for a URL ``path``.

    Returns
    -------
    dict
        ``{"block_offsets": entry or None, "document_offsets": entry or None,
        "written": [files], "removed": [files]}`` where an entry is the manifest's
        ``metadata`` reference (file, version, sizes, SHA-256).

    Raises
    ------
    ArgumentError
        A flag is not ``True``, ``False`` or ``None``, or the URL's store does not write.
    CorpusError
        The corpus does not open, or an offsets file is damaged (names it); the
        manifest is unchanged then.
    """
    block = sidecar_flag("block_offsets", block_offsets)
    document = sidecar_flag("document_offsets", document_offsets)
    location = os.fspath(path)
    remote = is_url(location)
    documents = (
        open_corpus(location, storage_options=storage_options) if remote else open_corpus(location)
    )
    store = writable_store(location, storage_options) if remote else documents.store
    manifest: Manifest = documents.parsed_manifest
    shards = manifest.shards
    status = sidecar_status(manifest)
    asked = {BLOCK_OFFSETS_KEY: block, DOCUMENT_OFFSETS_KEY: document}
    # Each key: write it (True), drop it (False), or keep what the manifest says (None).
    todo: dict[str, bool | None] = {}
    for key, flag in asked.items():
        if flag is None:
            present, recommended = status[key]["present"], status[key]["recommended"]
            todo[key] = True if recommended and not present else None
        else:
            todo[key] = flag
    metadata = dict(manifest.metadata)
    kept = {
        key: metadata[key] for key, action in todo.items() if action is None and key in metadata
    }
    written: list[str] = []
    if any(action is True for action in todo.values()):
        flags = {key: bool(action) for key, action in todo.items()}
        directory = store.local_directory
        if directory is not None:
            written = write_scale_sidecars(
                directory,
                LocalOffsetsFiles(directory, shards),
                metadata,
                block_offsets=flags[BLOCK_OFFSETS_KEY],
                document_offsets=flags[DOCUMENT_OFFSETS_KEY],
            )
        else:
            with tempfile.TemporaryDirectory(prefix="mixle-sidecars-") as local:
                written = write_scale_sidecars(
                    local,
                    StoreOffsetsFiles(store, [entry.offsets for entry in shards], shards),
                    metadata,
                    block_offsets=flags[BLOCK_OFFSETS_KEY],
                    document_offsets=flags[DOCUMENT_OFFSETS_KEY],
                )
                for name in written:
                    store.put_file(os.path.join(local, name), name)
    for key, action in todo.items():
        if action is False:
            metadata.pop(key, None)
    metadata.update(kept)
    removed = [
        name
        for key, name in SCALE_SIDECARS.items()
        if todo[key] is False and key in manifest.metadata
    ]
    if metadata != manifest.metadata:
        republish_metadata(store, manifest, metadata)
    for name in removed:  # no manifest names it any more
        store.remove(name)
    return {
        BLOCK_OFFSETS_KEY: metadata.get(BLOCK_OFFSETS_KEY),
        DOCUMENT_OFFSETS_KEY: metadata.get(DOCUMENT_OFFSETS_KEY),
        "written": written,
        "removed": removed,
    }
