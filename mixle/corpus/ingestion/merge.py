"""``merge_corpora``: combine existing corpora into one without copying token bytes.

The merged corpus holds the documents of the inputs in argument order: the shards of
the first corpus, then those of the second, and so on, renamed ``shard-NNNNN``. Shard
files are hard-linked on local disk (copied only where the file system cannot link)
and copied server-side on an object store; their entries, digests included, are
reused from the inputs' manifests, so no token byte is read or hashed. The manifest is
written last: until then the output is not a corpus.

Corpora of different dtypes or vocabulary sizes are refused unless the caller says how
to reconcile them: ``dtype`` (at least as wide as every input) rewrites only the
shards of narrower corpora (on an object store: downloaded, widened locally and
uploaded; the others are still copied server-side); ``vocab_size`` (at least every input's) records the new
vocabulary size.

Nothing is read outside the inputs and nothing the merge must keep is changed: the
output is compared with the inputs by real path (it may not be, contain or lie
inside one), and every input shard is checked to be a regular file of its recorded
size inside its corpus directory before the output is touched.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mixle._file_checks import check_replaceable, contained_shard
from mixle._io import link_or_copy, naming_file
from mixle.corpus.format.manifest import Manifest, ShardEntry, parse_manifest
from mixle.corpus.format.origins import (
    METADATA_KEY,
    ORIGINS_NAME,
    concatenate_origins,
    origins_reference,
    read_origins,
)
from mixle.corpus.format.scale_sidecars import (
    SCALE_SIDECARS,
    LocalOffsetsFiles,
    StoreOffsetsFiles,
    write_scale_sidecars,
)
from mixle.corpus.format.shard import rewrite_shard_dtype
from mixle.corpus.format.spec import MANIFEST_NAME, normalize_dtype, shard_file_names
from mixle.corpus.format.store import ShardStore
from mixle.corpus.storage.open import is_url, store_at, writable_store
from mixle.corpus.storage.publish import commit_manifest_to, remove_stale_shards
from mixle.errors import (
    ArgumentError,
    ArgumentTypeError,
    CorpusExistsError,
    CorpusFormatError,
    redact_userinfo,
)

__all__ = ["merge_corpora"]


def _read_manifest(store: ShardStore) -> Manifest:
    """The validated manifest of the input corpus in ``store``, read as every corpus's
    manifest is (:meth:`ShardStore.read_manifest`: locally a regular file inside the
    corpus directory, opened without blocking; remotely retried; both bounded).

    Raises
    ------
    CorpusNotFoundError
        No manifest there.
    CorpusFormatError
        The manifest is not a regular file or not a valid manifest.
    """
    return parse_manifest(store.read_manifest(), f"{store.location}/{MANIFEST_NAME}")


def _check_shard_files(store: ShardStore, manifest: Manifest) -> None:
    """Every shard file of the local input ``store`` is a regular file of its recorded
    size inside the corpus directory (checked before the output is touched)."""
    directory = store.local_directory
    if directory is None:
        return  # object-store keys are not links, and copies are server-side
    for shard in manifest.shards:
        contained_shard(directory, shard.tokens, shard.tokens_bytes, CorpusFormatError)
        contained_shard(directory, shard.offsets, shard.offsets_bytes, CorpusFormatError)


def _scheme(store: ShardStore) -> str:
    """The URL scheme of ``store`` (``""`` for a local directory)."""
    return store.location.split("://", 1)[0].lower() if is_url(store.location) else ""


def _common(what: str, found: dict[str, Any], hint: str) -> Any:
    """The one value of ``what`` all inputs share, or an error listing each input's."""
    if len(set(found.values())) > 1:
        listed = ", ".join(f"{name}: {value}" for name, value in found.items())
        raise ArgumentError(f"cannot merge corpora of different {what} ({listed}); {hint}")
    return next(iter(found.values()))


def _target_dtype(sources: Sequence[tuple[str, Manifest]], dtype: Any) -> str:
    found = {name: manifest.dtype for name, manifest in sources}
    if dtype is None:
        hint = "pass --dtype with the widest of them (dtype=...) to rewrite the narrower shards."
        return str(_common("dtypes", found, hint))
    target = normalize_dtype(dtype, "`dtype`")
    for name, value in found.items():
        if np.dtype(value).itemsize > np.dtype(target).itemsize:
            raise ArgumentError(
                f"`dtype` {target} is narrower than {name}'s {value}; merging never narrows."
            )
    return target


def _target_vocab(sources: Sequence[tuple[str, Manifest]], vocab_size: int | None) -> int | None:
    found = {name: manifest.vocab_size for name, manifest in sources}
    if vocab_size is None:
        hint = "pass --vocab-size at least as large as every one of them (vocab_size=...)."
        vocab: int | None = _common("vocab sizes", found, hint)
        return vocab
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        raise ArgumentTypeError(f"`vocab_size` must be an integer. Got {vocab_size!r} instead.")
    for name, value in found.items():
        if value is None or value > vocab_size:
            raise ArgumentError(
                f"`vocab_size` {vocab_size} does not cover {name}'s vocab size {value}."
            )
    return vocab_size


def merge_corpora(
    inputs: Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    *,
    dtype: Any = None,
    vocab_size: int | None = None,
    overwrite: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the concatenation of the corpora ``inputs`` (in order) as ``output``.

    Parameters
    ----------
    inputs
        Two or more corpus directories or URLs (raw layout).
    output
        The merged corpus: a local directory or a URL on the same object store as the
        inputs (then shards are copied server-side).
    dtype
        Widen every shard to this dtype (only shards of narrower corpora are
        rewritten); required when the inputs' dtypes differ.
    vocab_size
        The merged vocabulary size; required when the inputs' differ.
    overwrite
        Replace a corpus already at ``output`` (its manifest is removed first).
    storage_options
        fsspec options for URLs.

    Returns
    -------
    dict
        The merged manifest.

    Raises
    ------
    ArgumentError
        Fewer than two inputs; ``output`` is, contains or lies inside an input (real
        paths: a symlink to an input is that input); dtypes or vocab sizes that differ
        without ``dtype``/``vocab_size``; a ``dtype`` narrower than an input or one that
        cannot hold ``vocab_size``; inputs on another store than ``output``.
    CorpusExistsError
        ``output`` holds a corpus and ``overwrite`` is false.
    CorpusNotFoundError
        An input has no manifest.
    CorpusFormatError, UnsafePathError
        An input is not a valid corpus: a malformed manifest, or a shard file that is
        missing, not a regular file, of another size than its entry, or a symlink out
        of its corpus directory.
    OSError
        A write failed (a full disk); the message names the file.

    Every one of these refusals comes before anything at ``output`` is removed or
    written; a failure while shards are placed leaves no temporary file behind.
    """
    if len(inputs) < 2:
        raise ArgumentError(f"merge needs at least two corpora. Got {len(inputs)} instead.")
    out = writable_store(os.fspath(output), storage_options)
    stores = [store_at(os.fspath(item), storage_options) for item in inputs]
    for store in stores:
        if _scheme(store) != _scheme(out):
            raise ArgumentError(
                f"{store.location} and the output {out.location} are on different stores; merge "
                "where the inputs are, then publish_corpus (mixle convert) the result."
            )
    check_replaceable(out.location, [store.location for store in stores], what="the output")
    sources = [
        (os.fspath(item), _read_manifest(store)) for item, store in zip(inputs, stores, strict=True)
    ]
    target = _target_dtype(sources, dtype)
    vocab = _target_vocab(sources, vocab_size)
    metadata: dict[str, Any] = {  # a URL's userinfo (a password) is never written into the manifest
        "merged_from": [
            {"corpus": redact_userinfo(name), "fingerprint": manifest.fingerprint}
            for name, manifest in sources
        ]
    }
    # Every check that can refuse an argument or an input runs before anything of the
    # output is removed: the manifest arguments (an empty manifest is built with them)
    # and every input shard file.
    Manifest.build([], dtype=target, vocab_size=vocab, metadata=metadata)
    for store, (_, manifest) in zip(stores, sources, strict=True):
        _check_shard_files(store, manifest)
    origins = _merged_origins(stores, [manifest for _, manifest in sources])
    if out.exists(MANIFEST_NAME):
        if not overwrite:
            raise CorpusExistsError(
                f"{out.location} already holds a corpus; pass --overwrite to replace it."
            )
        out.remove(MANIFEST_NAME)  # readers see no corpus until the merged one is complete
    if out.local_directory is not None:
        os.makedirs(out.local_directory, exist_ok=True)
    entries: list[dict[str, Any]] = []
    for store, (_, manifest) in zip(stores, sources, strict=True):
        for shard in manifest.shards:
            tokens, offsets = shard_file_names(len(entries))
            renamed = dict(shard.to_dict(), tokens=tokens, offsets=offsets)
            with naming_file(f"{out.location}/{tokens}"):
                if manifest.dtype == target:
                    _copy_shard(store, shard, out, renamed)
                else:
                    renamed = _widen(store, shard, out, renamed, manifest.dtype, target)
            entries.append(renamed)
    remove_stale_shards(out, {entry[key] for entry in entries for key in ("tokens", "offsets")})
    if origins is not None:
        with naming_file(f"{out.location}/{ORIGINS_NAME}"):
            out.write_bytes(ORIGINS_NAME, origins)
        metadata[METADATA_KEY] = origins_reference(origins)
    _sidecars(out, entries, target, metadata)
    for key, name in SCALE_SIDECARS.items():
        if key not in metadata and out.exists(
            name
        ):  # a replaced corpus's, which no manifest names any more
            out.remove(name)
    return commit_manifest_to(out, entries, dtype=target, vocab_size=vocab, metadata=metadata)


def _sidecars(
    out: ShardStore, entries: list[dict[str, Any]], dtype: str, metadata: dict[str, Any]
) -> None:
    """Give the merged corpus the scale sidecars its shape calls for (as every writer
    decides: :func:`~mixle.corpus.format.scale_sidecars.write_scale_sidecars`), from
    its own offsets files: written in place on local disk, else in a temporary
    directory and stored beside the shards; the manifest written next names them."""
    shards = [
        ShardEntry.from_dict(entry, dtype, f"shard entry {number}")
        for number, entry in enumerate(entries)
    ]
    directory = out.local_directory
    if directory is not None:
        write_scale_sidecars(directory, LocalOffsetsFiles(directory, shards), metadata)
        return
    with tempfile.TemporaryDirectory(prefix="mixle-merge-") as local:
        files = StoreOffsetsFiles(out, [entry.offsets for entry in shards], shards)
        for name in write_scale_sidecars(local, files, metadata):
            out.put_file(os.path.join(local, name), name)


def _merged_origins(stores: Sequence[ShardStore], manifests: Sequence[Manifest]) -> bytes | None:
    """The merged corpus's origins sidecar when every input has one, else ``None``.

    Raises
    ------
    CorpusFormatError
        An input's sidecar is missing, truncated or forged (names it).
    """
    tables = []
    for store, manifest in zip(stores, manifests, strict=True):
        table = read_origins(store, manifest.metadata, manifest.num_documents)
        if table is None:
            return None
        tables.append(table)
    return concatenate_origins(tables)


def _copy_shard(
    source: ShardStore, shard: ShardEntry, out: ShardStore, renamed: Mapping[str, Any]
) -> None:
    """Link (local) or server-side copy (object store) both files of ``shard`` to
    ``renamed``'s names in ``out``; a local file must be a regular file of its size."""
    directory, into = source.local_directory, out.local_directory
    for name, size, key in (
        (shard.tokens, shard.tokens_bytes, "tokens"),
        (shard.offsets, shard.offsets_bytes, "offsets"),
    ):
        if directory is None or into is None:
            out.copy(name, renamed[key], origin=source)
        else:
            link_or_copy(
                contained_shard(directory, name, size, CorpusFormatError),
                os.path.join(into, renamed[key]),
                size=size,
            )


def _widen(
    source: ShardStore,
    shard: ShardEntry,
    out: ShardStore,
    renamed: dict[str, Any],
    from_dtype: str,
    to_dtype: str,
) -> dict[str, Any]:
    """Write ``shard`` of ``source`` widened to ``to_dtype`` as ``renamed``'s files in
    ``out``; return the new entry (new sizes and digests).

    On local disk the shard is linked, then rewritten under the link's name (by
    rename: the input's files are read, never modified). On an object store it is
    fetched through the input's store (its shard cache: size and SHA-256 checked),
    rewritten in a temporary directory and uploaded through the output's store;
    memory stays O(16 Mi ids) either way.
    """
    if out.local_directory is not None:
        _copy_shard(source, shard, out, renamed)
        return rewrite_shard_dtype(
            out.local_directory, renamed, from_dtype=from_dtype, to_dtype=to_dtype
        )
    with tempfile.TemporaryDirectory(prefix="mixle-merge-") as local:
        for name, key in ((shard.tokens, "tokens"), (shard.offsets, "offsets")):
            path = source.local_path(name)
            try:
                shutil.copyfile(path, os.path.join(local, renamed[key]))
            finally:
                source.release(name)
        widened = rewrite_shard_dtype(
            local, renamed, from_dtype=from_dtype, to_dtype=to_dtype, durable=False
        )
        for key in ("tokens", "offsets"):
            out.put_file(os.path.join(local, widened[key]), widened[key])
    return widened
