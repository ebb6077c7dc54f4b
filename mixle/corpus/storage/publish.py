"""Publish and convert corpora: local or URL destinations, raw or zarr layout.

:func:`publish_corpus` is the one call for "a finished local corpus directory goes
to its destination" (``mixle ingest ... s3://bucket/prefix``, ``--layout zarr``,
``mixle convert``). Whatever the destination, every data file is written first and
the entry point (``manifest.json``, or the zarr group's ``zarr.json`` holding the
manifest) last, so a reader sees the previous corpus, no corpus, or the complete
new one, never a partial one. Uploads retry transient errors and check each
uploaded object's size.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

from mixle._io import bounded_name, swap_directory
from mixle.corpus.format.manifest import Manifest, write_manifest
from mixle.corpus.format.spec import MANIFEST_NAME
from mixle.corpus.storage.local import LocalStore, local_sizes
from mixle.corpus.storage.open import is_url, open_corpus, writable_store
from mixle.corpus.storage.zarr_layout import GROUP_META, write_zarr_group
from mixle.errors import ArgumentError, CorpusExistsError

__all__ = [
    "LAYOUTS",
    "convert_corpus",
    "destination_holds_corpus",
    "publish_corpus",
    "stored_bytes",
    "upload_corpus",
]

LAYOUTS = ("raw", "zarr")


def destination_holds_corpus(
    destination: str, layout: str, storage_options: Mapping[str, Any] | None = None
) -> bool:
    """Whether publishing ``layout`` to ``destination`` would replace an existing corpus.

    A URL holds a corpus when its manifest or zarr group metadata exists; a local
    directory when it exists at all (a raw directory's manifest, or a zarr group).
    """
    if not is_url(destination):
        local = destination[len("file://") :] if destination.startswith("file://") else destination
        entry = os.path.join(local, MANIFEST_NAME) if layout == "raw" else local
        return os.path.exists(entry)
    store = writable_store(destination, storage_options)
    return any(store.exists(name) for name in (MANIFEST_NAME, GROUP_META))


def _upload_tree(
    directory: str, url: str, storage_options: Mapping[str, Any] | None, last: str, overwrite: bool
) -> None:
    """Upload every file under ``directory`` to ``url``; the file ``last`` goes last.

    Through the destination's store (:func:`writable_store`): each file is one
    retried, size-checked write of that store's :class:`RetryPolicy`.
    """
    store = writable_store(url, storage_options)
    if store.exists(last) or store.exists(MANIFEST_NAME):
        if not overwrite:
            raise CorpusExistsError(
                f"{url} already holds a corpus (pass overwrite=True to replace it)."
            )
        for name in (MANIFEST_NAME, last):
            if store.exists(name):
                store.remove(name)  # readers now see no corpus, not a mix
    files = sorted(local_sizes(directory))
    if last not in files:
        raise ArgumentError(f"{directory}: nothing to publish ({last} is missing).")
    files.remove(last)
    for relative in [*files, last]:
        store.put_file(os.path.join(directory, *relative.split("/")), relative)


def convert_corpus(
    source: str | os.PathLike[str],
    destination: str | os.PathLike[str],
    *,
    layout: str = "zarr",
    storage_options: Mapping[str, Any] | None = None,
    source_options: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write the corpus at ``source`` to ``destination`` in ``layout``; return its manifest.

    Parameters
    ----------
    source
        Any corpus :func:`~mixle.corpus.open_corpus` opens (raw or zarr, local or URL).
    destination
        Local directory or fsspec URL; must not hold a corpus unless ``overwrite``.
    layout
        ``"zarr"`` (compressed zarr v3 group) or ``"raw"`` (the mmap-able format).
    storage_options
        fsspec options for a URL ``destination``.
    source_options
        Keyword arguments for opening ``source`` (``storage_options``, ``cache_dir`` ...).

    Guarantees
    ----------
    The manifest (shard checksums, fingerprint) is unchanged by conversion: both
    layouts of a corpus have one fingerprint. Data goes first, the entry point last;
    a local destination appears by one rename.

    Raises
    ------
    ArgumentError
        Unknown ``layout``.
    CorpusExistsError
        ``destination`` exists and ``overwrite`` is false.
    RemoteError
        An upload failed after every retry (names URL, file and attempts).
    """
    if layout not in LAYOUTS:
        raise ArgumentError(f"`layout` must be one of {LAYOUTS}. Got {layout!r} instead.")
    if not isinstance(overwrite, bool):
        raise ArgumentError(f"`overwrite` must be a bool. Got {overwrite!r} instead.")
    documents = open_corpus(source, **dict(source_options or {}))
    target = os.fspath(destination)
    if not is_url(target):
        target = target[len("file://") :] if target.startswith("file://") else target
        write = write_zarr_group if layout == "zarr" else _copy_raw
        return _write_directory(target, lambda directory: write(documents, directory), overwrite)
    with tempfile.TemporaryDirectory(prefix="mixle-publish-") as staging:
        if layout == "zarr":
            manifest = write_zarr_group(documents, staging)
            _upload_tree(staging, target, storage_options, GROUP_META, overwrite)
            return manifest
        if _is_local_raw(documents):
            _upload_tree(documents.location, target, storage_options, MANIFEST_NAME, overwrite)
            return dict(documents.manifest)
        manifest = _copy_raw(documents, staging)
        _upload_tree(staging, target, storage_options, MANIFEST_NAME, overwrite)
        return manifest


def _is_local_raw(documents: Any) -> bool:
    store = documents.store
    if not isinstance(store, LocalStore):
        return False
    manifest: Manifest = documents.parsed_manifest
    expected = {MANIFEST_NAME} | {name for entry in manifest.shards for name in entry.files}
    if manifest.shard_table is not None:
        expected.add(manifest.shard_table.file)
    return set(os.listdir(store.directory)) == expected


def _copy_raw(documents: Any, directory: str) -> dict[str, Any]:
    """Copy every shard file into ``directory`` and commit the same manifest there."""
    store = documents.store
    manifest: Manifest = documents.parsed_manifest
    for entry in manifest.shards:
        for name in entry.files:
            path = store.local_path(name)
            try:
                shutil.copyfile(path, os.path.join(directory, name))
            finally:
                store.release(name)
    write_manifest(directory, manifest)
    return manifest.to_dict()


def _write_directory(
    directory: str, write: Callable[[str], dict[str, Any]], overwrite: bool
) -> dict[str, Any]:
    """Run ``write`` into a temporary sibling of ``directory``, then rename it into place.

    Readers see the old directory or the complete new one, never a partial one.
    """
    target = os.path.abspath(directory)
    if os.path.exists(target) and not overwrite:
        raise CorpusExistsError(f"{target} already exists (pass overwrite=True to replace it).")
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    # ".NAME.tmp-" plus mkdtemp's 8 random characters must still fit NAME_MAX.
    name = bounded_name(os.path.basename(target), len("..tmp-") + 8)
    staging = tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=parent)
    try:
        manifest = write(staging)
        swap_directory(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return manifest


def publish_corpus(
    local_dir: str | os.PathLike[str],
    destination: str | os.PathLike[str],
    *,
    layout: str = "raw",
    storage_options: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Publish the finished corpus in ``local_dir`` to ``destination`` as ``layout``.

    The single entry point for ingest and the CLI: ``destination`` may be a local
    directory or any fsspec URL, ``layout`` ``"raw"`` or ``"zarr"``. Shards are written
    first and the manifest (or zarr group metadata) last. ``local_dir`` is validated
    by opening it (manifest, headers, sizes) before anything is written.

    Raises
    ------
    CorpusNotFoundError, CorpusFormatError
        ``local_dir`` is not a valid corpus.
    CorpusExistsError
        ``destination`` already holds a corpus and ``overwrite`` is false.
    RemoteError
        An upload failed after every retry.
    """
    return convert_corpus(
        local_dir, destination, layout=layout, storage_options=storage_options, overwrite=overwrite
    )


def upload_corpus(
    local_dir: str | os.PathLike[str],
    url: str,
    storage_options: Mapping[str, Any] | None = None,
    *,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Upload the raw corpus in ``local_dir`` to ``url`` (shards first, manifest last)."""
    if not is_url(os.fspath(url)):
        raise ArgumentError(
            f"`url` must be an fsspec URL such as s3://bucket/prefix. Got {url!r} instead."
        )
    return publish_corpus(
        local_dir, url, layout="raw", storage_options=storage_options, overwrite=overwrite
    )


def stored_bytes(
    location: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None
) -> int:
    """Total bytes of every file under ``location`` (a directory or URL prefix)."""
    target = os.fspath(location)
    if not is_url(target):
        target = target[len("file://") :] if target.startswith("file://") else target
        return sum(
            os.path.getsize(os.path.join(root, name))
            for root, _, names in os.walk(target)
            for name in names
        )
    return sum(writable_store(target, storage_options).list_sizes().values())
