"""Publishing: the one way a corpus (or an export) becomes visible at its destination.

Whatever is published and wherever it goes, every data file is written first and the
entry point (``manifest.json``, a zarr group's ``zarr.json``, an export's marker)
last, so a reader sees the previous corpus, no corpus, or the complete new one, never
a partial one. There is one path per kind of destination:

* **a local directory built whole** (:func:`publish_corpus`, :func:`convert_corpus`,
  an export): built in a hidden sibling staging directory that
  :func:`staged_directory` swaps into place (:func:`mixle._io.swap_directory`);
* **a store** (an object-store URL, a registered backend; :func:`writable_store`):
  each data file is one retried, size-checked write of the store's
  :class:`~mixle.corpus.storage.fs.RetryPolicy` (:func:`upload_files`), and the
  manifest is committed last (:func:`commit_manifest_to`);
* **the shards of an ingest** (a publish plan, :func:`build_publish_plan`):
  :func:`publish_units` moves them to their final names, renamed on local disk,
  copied server-side on a store, removes the stale shards of a replaced corpus
  (:func:`remove_stale_shards`) and commits the manifest last.

The ingest's local publish is idempotent so a ``--resume`` after a crash at any
instruction finishes it:

1. The plan (final shard names and entries, dtype, metadata, and which unit file
   becomes which shard) is written once to ``<work>/publish.json``; from then on the
   plan, not the unit directories, is the source of truth.
2. An old manifest (``--overwrite``) is removed, so readers see no corpus while old
   shard names are being reused.
3. Each unit shard is *renamed* to its final name (``shard-NNNNN``): no token byte is
   copied. A source that no longer exists was renamed by an earlier attempt.
4. Shard files of an old corpus that the new one does not use are deleted.
5. :func:`mixle.corpus.commit_manifest` writes ``manifest.json`` last, atomically.
6. The work directory is renamed away and removed (its unit directories by several
   threads at once: see :func:`remove_tree`).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from mixle._io import (
    bounded_name,
    fsync_directory,
    rename_atomically,
    swap_directory,
    write_json_atomic,
)
from mixle.corpus.format.block_offsets import BLOCK_OFFSETS_KEY, BLOCK_OFFSETS_NAME
from mixle.corpus.format.block_offsets import sidecar_reference as block_offsets_reference_of
from mixle.corpus.format.document_offsets import DOCUMENT_OFFSETS_KEY, DOCUMENT_OFFSETS_NAME
from mixle.corpus.format.manifest import (
    Manifest,
    ShardEntry,
    commit_manifest,
    compute_fingerprint,
    write_manifest,
)
from mixle.corpus.format.origins import ORIGINS_NAME, sidecar_reference
from mixle.corpus.format.scale_sidecars import (
    SCALE_SIDECARS,
    LocalOffsetsFiles,
    sidecar_status,
    write_scale_sidecars,
)
from mixle.corpus.format.spec import MANIFEST_NAME, shard_file_names
from mixle.corpus.format.store import ShardStore
from mixle.corpus.storage.local import LocalStore, local_sizes
from mixle.corpus.storage.open import is_url, open_corpus, writable_store
from mixle.corpus.storage.zarr_layout import GROUP_META, write_zarr_group
from mixle.errors import ArgumentError, CorpusExistsError

__all__ = [
    "LAYOUTS",
    "PUBLISH_NAME",
    "build_publish_plan",
    "commit_manifest_to",
    "convert_corpus",
    "destination_holds_corpus",
    "discard_work_dir",
    "publish_corpus",
    "publish_units",
    "read_publish_plan",
    "remove_stale_shards",
    "remove_tree",
    "staged_directory",
    "stored_bytes",
    "upload_corpus",
    "upload_files",
    "write_publish_plan",
]

LAYOUTS = ("raw", "zarr")
PUBLISH_NAME = "publish.json"
#: Threads that remove the directories of a work directory at once (see remove_tree).
_REMOVERS = 16
#: Requests a store is sent at once by a publish (uploads, server-side copies): an
#: object store serves them concurrently, and one after the other each costs its round
#: trips (a put and the size check: 60 shards took 10.9 s one by one on moto, 2 cores).
_REQUESTS = 8

_T = TypeVar("_T")


def _concurrently(call: Callable[[_T], None], items: Sequence[_T]) -> None:
    """``call(item)`` for every item, :data:`_REQUESTS` at a time; the first error (in
    ``items`` order) is raised once the calls under way end, and no new call starts."""
    if len(items) <= 1:
        for item in items:
            call(item)
        return
    pool = ThreadPoolExecutor(min(_REQUESTS, len(items)), thread_name_prefix="mixle-publish")
    try:
        for _ in pool.map(call, items):
            pass
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


# -- the two paths: a local directory swapped in whole, files written to a store --------
@contextlib.contextmanager
def staged_directory(target: str, *, tag: str = "tmp") -> Iterator[str]:
    """Yield an empty staging directory next to ``target``; swap it into place on success.

    The one local staging-and-swap of mixle (:func:`convert_corpus`, exports). The
    directory is ``.NAME.TAG-<pid>-<hex>`` beside ``target`` (one filesystem, so the
    swap is a rename). On normal exit it is fsynced and :func:`~mixle._io.swap_directory`
    puts it in place of ``target`` (replacing a previous one: the caller decided that
    was allowed). On an exception it is removed and ``target`` is untouched.
    """
    parent, name = os.path.split(os.path.abspath(target))
    os.makedirs(parent, exist_ok=True)
    suffix = f"{os.getpid()}-{secrets.token_hex(4)}"
    # ".NAME.TAG-" plus the suffix must still fit NAME_MAX.
    short = bounded_name(name, len(f"..{tag}-{suffix}"))
    staging = os.path.join(parent, f".{short}.{tag}-{suffix}")
    os.mkdir(staging)
    try:
        yield staging
        fsync_directory(staging)
        swap_directory(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def upload_files(store: ShardStore, directory: str, last: str, prefix: str = "") -> None:
    """Write every file under the local ``directory`` to ``store``; the file ``last`` last.

    Each file is one retried, size-checked :meth:`~ShardStore.put_file` of the store,
    stored as ``prefix/relative path`` (``relative path`` without a prefix); several
    are sent at once, and ``last`` only once every other one is stored.

    Raises
    ------
    ArgumentError
        ``last`` is not in ``directory``.
    RemoteError
        An upload failed after every retry (names URL, file and attempts).
    """
    files = sorted(local_sizes(directory))
    if last not in files:
        raise ArgumentError(f"{directory}: nothing to publish ({last} is missing).")
    files.remove(last)

    def put(relative: str) -> None:
        store.put_file(
            os.path.join(directory, *relative.split("/")),
            f"{prefix}/{relative}" if prefix else relative,
        )

    _concurrently(put, files)
    put(last)


def commit_manifest_to(
    store: ShardStore,
    entries: Sequence[Mapping[str, Any]],
    *,
    dtype: str,
    vocab_size: int | None,
    metadata: Mapping[str, Any],
) -> dict[str, Any]:
    """Write the manifest of ``entries`` to ``store`` last, atomically; return it.

    A local directory gets :func:`~mixle.corpus.commit_manifest` (which checks every
    shard file's size first); any other store one write of the same bytes, so a
    corpus published to an object store is file-for-file the local one.
    """
    directory = store.local_directory
    if directory is not None:
        return commit_manifest(
            directory, entries, dtype=dtype, vocab_size=vocab_size, metadata=metadata
        )
    manifest = Manifest.build(entries, dtype=dtype, vocab_size=vocab_size, metadata=metadata)
    store.write_bytes(MANIFEST_NAME, manifest.to_json())
    return manifest.to_dict()


def remove_stale_shards(store: ShardStore, keep: set[str]) -> None:
    """Delete the shard files (``shard-*`` at the top of ``store``) not in ``keep``:
    those of a replaced corpus that the new one does not use (one listing)."""
    for name in store.list_sizes():
        if "/" not in name and name.startswith("shard-") and name not in keep:
            store.remove(name)


# -- publish_corpus / convert_corpus: a finished corpus to any destination --------------
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
    """Publish the local ``directory`` to ``url`` through its store, ``last`` last.

    An existing corpus there is refused unless ``overwrite``; then its entry points
    are removed first, so readers see no corpus rather than a mix.
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
    upload_files(store, directory, last)


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
    expected.update(_sidecars(manifest))
    return set(os.listdir(store.directory)) == expected


def _sidecars(manifest: Manifest) -> list[str]:
    """The optional files the manifest names beside the shards (the origins, the
    block-offsets and the document-offsets sidecars)."""
    names = [ORIGINS_NAME] if sidecar_reference(manifest.metadata) is not None else []
    if block_offsets_reference_of(manifest.metadata) is not None:
        names.append(BLOCK_OFFSETS_NAME)
    if DOCUMENT_OFFSETS_KEY in manifest.metadata:
        names.append(DOCUMENT_OFFSETS_NAME)
    return names


def _copy_raw(documents: Any, directory: str) -> dict[str, Any]:
    """Copy every shard file and sidecar into ``directory`` and commit the same
    manifest there."""
    store = documents.store
    manifest: Manifest = documents.parsed_manifest
    names = [name for entry in manifest.shards for name in entry.files]
    if block_offsets_reference_of(manifest.metadata) is not None:  # raw stores only
        names.append(BLOCK_OFFSETS_NAME)
    if DOCUMENT_OFFSETS_KEY in manifest.metadata and store.exists(DOCUMENT_OFFSETS_NAME):
        # Raw stores only; a copy without it (missing) reads the offsets files instead.
        names.append(DOCUMENT_OFFSETS_NAME)
    for name in names:
        path = store.local_path(name)
        try:
            shutil.copyfile(path, os.path.join(directory, name))
        finally:
            store.release(name)
    reference = sidecar_reference(manifest.metadata)
    if reference is not None:  # a file of any store (a zarr corpus keeps it as an array)
        with open(os.path.join(directory, ORIGINS_NAME), "wb") as handle:
            handle.write(store.read_file(ORIGINS_NAME, reference["bytes"]))
    manifest = _with_missing_sidecars(directory, manifest)
    write_manifest(directory, manifest)
    return manifest.to_dict()


def _with_missing_sidecars(directory: str, manifest: Manifest) -> Manifest:
    """``manifest``, or, when the corpus lacks a scale sidecar its shape calls for (a
    zarr group keeps none), the same manifest naming it, written into ``directory``
    from the copied offsets files (the rule every writer follows); those it names
    were copied and stay."""
    status = sidecar_status(manifest)
    todo = {key: item["recommended"] and not item["present"] for key, item in status.items()}
    if not any(todo.values()):
        return manifest
    metadata = dict(manifest.metadata)
    kept = {key: metadata[key] for key in SCALE_SIDECARS if key in metadata}
    write_scale_sidecars(
        directory,
        LocalOffsetsFiles(directory, manifest.shards),
        metadata,
        block_offsets=todo[BLOCK_OFFSETS_KEY],
        document_offsets=todo[DOCUMENT_OFFSETS_KEY],
    )
    metadata.update(kept)
    return Manifest.build(
        manifest.shards,
        dtype=manifest.dtype,
        vocab_size=manifest.vocab_size,
        metadata=metadata,
        shard_table=manifest.shard_table is not None,
    )


def _write_directory(
    directory: str, write: Callable[[str], dict[str, Any]], overwrite: bool
) -> dict[str, Any]:
    """Run ``write`` into a :func:`staged_directory` that replaces ``directory``.

    Readers see the old directory or the complete new one, never a partial one.
    """
    target = os.path.abspath(directory)
    if os.path.exists(target) and not overwrite:
        raise CorpusExistsError(f"{target} already exists (pass overwrite=True to replace it).")
    with staged_directory(target) as staging:
        return write(staging)


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


# -- an ingest's units: the publish plan, carried out on local disk or on a store -------
def build_publish_plan(
    shards: Sequence[tuple[str, Mapping[str, Any]]],
    *,
    dtype: str,
    vocab_size: int | None,
    metadata: Mapping[str, Any],
    summary: Mapping[str, Any],
    files: Sequence[str] = (),
) -> dict[str, Any]:
    """Return the publish plan for ``shards`` (``(unit dir name, entry)`` pairs in corpus
    order); shard ``g`` of the corpus is named ``shard-{g:05d}``. ``files`` lie at the
    top of the work directory and keep their names (the origins sidecar). No I/O.

    The fingerprint comes from the entries' recorded digests. The plan is returned as a
    resumed run would read it back (sorted keys), so the manifest bytes are the same
    whether or not a publish was interrupted, and wherever it is published.
    """
    entries = []
    moves = []
    for index, (unit_name, entry) in enumerate(shards):
        tokens, offsets = shard_file_names(index)
        moves.append([unit_name, entry["tokens"], tokens])
        moves.append([unit_name, entry["offsets"], offsets])
        entries.append(dict(entry, tokens=tokens, offsets=offsets))
    moves.extend(["", name, name] for name in files)
    plan = {
        "entries": entries,
        "moves": moves,
        "dtype": dtype,
        "vocab_size": vocab_size,
        "metadata": dict(metadata),
        "summary": dict(summary),
        "fingerprint": compute_fingerprint(
            dtype, [ShardEntry.from_dict(entry, dtype, "publish plan") for entry in entries]
        ),
    }
    result: dict[str, Any] = json.loads(json.dumps(plan, sort_keys=True))
    return result


def write_publish_plan(work_dir: str, plan: Mapping[str, Any]) -> None:
    """Save a plan of :func:`build_publish_plan` in ``work_dir`` (from then on it, not
    the unit directories, is the source of truth for a resumed publish)."""
    write_json_atomic(os.path.join(work_dir, PUBLISH_NAME), plan)


def read_publish_plan(work_dir: str) -> dict[str, Any] | None:
    """Return the publish plan an interrupted run left in ``work_dir``, or ``None``."""
    try:
        with open(os.path.join(work_dir, PUBLISH_NAME), encoding="utf-8") as handle:
            plan: dict[str, Any] = json.load(handle)
    except FileNotFoundError:
        return None
    return plan


def discard_work_dir(work_dir: str) -> None:
    """Remove ``work_dir``: renamed away first (atomic), then deleted, so a kill while
    deleting never leaves a half-removed work directory that looks resumable."""
    trash = f"{work_dir}-done"
    remove_tree(trash)
    with contextlib.suppress(FileNotFoundError):
        rename_atomically(work_dir, trash)  # renamed away to be deleted: no fsync
    remove_tree(trash)


def remove_tree(path: str) -> None:
    """Delete the directory ``path`` and everything under it, if it exists.

    Its subdirectories (one per work unit) are removed by several threads at once.
    Deleting a file that has reached the disk waits on the device (blocks are freed,
    and on a file system mounted with ``discard`` trimmed; on NFS or Lustre every
    unlink is a server round trip): one after the other, the 3,000 files and
    directories of a 1,000-unit ingest took 10.5 s on the benchmark machine once
    fsynced, 16 at a time 0.46 s (docs/benchmarks.md, "Commit of ingest units").
    """
    try:
        entries = list(os.scandir(path))
    except FileNotFoundError:
        return
    directories = [entry.path for entry in entries if entry.is_dir(follow_symlinks=False)]
    if len(directories) > 1:
        with ThreadPoolExecutor(min(_REMOVERS, len(directories))) as pool:
            for _ in pool.map(_remove_directory, directories):
                pass
    shutil.rmtree(path, ignore_errors=True)


def _remove_directory(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _already_published(store: ShardStore, plan: Mapping[str, Any]) -> bool:
    try:
        return bool(json.loads(store.read_manifest()).get("fingerprint") == plan["fingerprint"])
    except (OSError, ValueError, AttributeError):
        return False


def publish_units(
    store: ShardStore, work: str, plan: Mapping[str, Any], records: Sequence[str] = ()
) -> None:
    """Carry out ``plan``: move the unit shards under ``work`` into ``store``, manifest last.

    ``work`` is the work directory's path on local disk, else its name in the store.
    On local disk the shards are renamed (safe to call again after a crash at any
    point, see the module docstring; each unit's ``records`` are deleted while the
    shards move), stale shards of a replaced corpus are removed and the work directory
    is discarded. On any other store the shards are copied server-side (several at once) and the
    manifest written unless the store already holds this corpus; then the work tree is
    removed.
    """
    directory = store.local_directory
    if directory is None:
        if not _already_published(store, plan):
            _concurrently(
                lambda move: store.copy("/".join(filter(None, (work, *move[:2]))), move[2]),
                plan["moves"],
            )
            _remove_stale_sidecars(store, plan)
            _commit_plan(store, plan)
        store.remove(work)
        return
    if _already_published(store, plan):
        discard_work_dir(work)
        return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(directory, MANIFEST_NAME))
    fsync_directory(directory)
    units = sorted({unit_name for unit_name, _, _ in plan["moves"]})
    with ThreadPoolExecutor(_REMOVERS) as pool:
        # The saved plan, not the units' records, is the source of truth from now on:
        # delete the records while the shards move (deleting waits on the disk, see
        # remove_tree), so little is left to remove after the manifest.
        removals = pool.map(
            _remove_files, [os.path.join(work, u) for u in units], [records] * len(units)
        )
        for unit_name, source, target in plan["moves"]:
            # A source that is gone was moved by an earlier, interrupted attempt.
            with contextlib.suppress(FileNotFoundError):
                rename_atomically(  # ``directory`` is fsynced once after every move
                    os.path.join(work, unit_name, source), os.path.join(directory, target)
                )
        for _ in removals:
            pass
    fsync_directory(directory)
    remove_stale_shards(store, {entry[key] for entry in plan["entries"] for key in _SHARD_KEYS})
    _remove_stale_sidecars(store, plan)
    _commit_plan(store, plan)
    discard_work_dir(work)


_SHARD_KEYS = ("tokens", "offsets")
#: The optional files a manifest may name beside the shards.
_SIDECARS = (ORIGINS_NAME, BLOCK_OFFSETS_NAME, DOCUMENT_OFFSETS_NAME)


def _remove_stale_sidecars(store: ShardStore, plan: Mapping[str, Any]) -> None:
    """Delete the sidecars of a replaced corpus that ``plan`` does not publish (no
    manifest names them any more: a reader would never look, but a copy of the
    directory would carry them)."""
    published = {target for _, _, target in plan["moves"]}
    for name in _SIDECARS:
        if name not in published and store.exists(name):
            store.remove(name)


def _remove_files(directory: str, names: Sequence[str]) -> None:
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(directory, name))


def _commit_plan(store: ShardStore, plan: Mapping[str, Any]) -> None:
    commit_manifest_to(
        store,
        plan["entries"],
        dtype=plan["dtype"],
        vocab_size=plan["vocab_size"],
        metadata=plan["metadata"],
    )
