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
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mixle._file_checks import check_replaceable, contained_shard
from mixle._io import link_or_copy, naming_file
from mixle.corpus.format.manifest import Manifest, ShardEntry, commit_manifest, parse_manifest
from mixle.corpus.format.shard import rewrite_shard_dtype
from mixle.corpus.format.spec import MANIFEST_NAME, normalize_dtype, shard_file_names
from mixle.corpus.ingestion.area import OutputArea
from mixle.corpus.storage.local import LocalStore
from mixle.errors import (
    ArgumentError,
    ArgumentTypeError,
    CorpusExistsError,
    CorpusFormatError,
    CorpusNotFoundError,
    redact_userinfo,
)

__all__ = ["merge_corpora"]


def _read_manifest(area: OutputArea) -> Manifest:
    """The validated manifest of the input corpus ``area``.

    A local one is read as every local corpus is (:class:`LocalStore`: a regular
    file, opened without blocking, inside the corpus directory).

    Raises
    ------
    CorpusNotFoundError
        No manifest there.
    CorpusFormatError
        The manifest is not a regular file or not a valid manifest.
    """
    if area.is_url:
        try:
            data = area.fs.cat_file(area.path(MANIFEST_NAME))
        except FileNotFoundError as exc:
            raise CorpusNotFoundError(
                f"no corpus at {area.output}: {MANIFEST_NAME} is missing."
            ) from exc
    else:
        data = LocalStore(area.output).read_manifest()
    return parse_manifest(data, area.describe(MANIFEST_NAME))


def _check_shard_files(area: OutputArea, manifest: Manifest) -> None:
    """Every shard file of the local input ``area`` is a regular file of its recorded
    size inside the corpus directory (checked before the output is touched)."""
    if area.is_url:
        return  # object-store keys are not links, and copies are server-side
    for shard in manifest.shards:
        contained_shard(area.output, shard.tokens, shard.tokens_bytes, CorpusFormatError)
        contained_shard(area.output, shard.offsets, shard.offsets_bytes, CorpusFormatError)


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
    out = OutputArea(os.fspath(output), storage_options)
    areas = [OutputArea(os.fspath(item), storage_options) for item in inputs]
    for area in areas:
        if area.is_url != out.is_url or (area.is_url and area.fs.protocol != out.fs.protocol):
            raise ArgumentError(
                f"{area.output} and the output {out.output} are on different stores; merge "
                "where the inputs are, then publish_corpus (mixle convert) the result."
            )
    check_replaceable(out.output, [area.output for area in areas], what="the output")
    sources = [
        (os.fspath(item), _read_manifest(area)) for item, area in zip(inputs, areas, strict=True)
    ]
    target = _target_dtype(sources, dtype)
    vocab = _target_vocab(sources, vocab_size)
    metadata = {  # a URL's userinfo (a password) is never written into the manifest
        "merged_from": [
            {"corpus": redact_userinfo(name), "fingerprint": manifest.fingerprint}
            for name, manifest in sources
        ]
    }
    # Every check that can refuse an argument or an input runs before anything of the
    # output is removed: the manifest arguments (an empty manifest is built with them)
    # and every input shard file.
    Manifest.build([], dtype=target, vocab_size=vocab, metadata=metadata)
    for area, (_, manifest) in zip(areas, sources, strict=True):
        _check_shard_files(area, manifest)
    if out.exists(MANIFEST_NAME):
        if not overwrite:
            raise CorpusExistsError(
                f"{out.output} already holds a corpus; pass --overwrite to replace it."
            )
        out.remove(MANIFEST_NAME)  # readers see no corpus until the merged one is complete
    if not out.is_url:
        os.makedirs(out.output, exist_ok=True)
    entries: list[dict[str, Any]] = []
    for area, (_, manifest) in zip(areas, sources, strict=True):
        for shard in manifest.shards:
            tokens, offsets = shard_file_names(len(entries))
            renamed = dict(shard.to_dict(), tokens=tokens, offsets=offsets)
            with naming_file(out.describe(tokens)):
                if manifest.dtype == target:
                    _copy_shard(area, shard, out, renamed)
                else:
                    renamed = _widen(area, shard, out, renamed, manifest.dtype, target)
            entries.append(renamed)
    _remove_stale_shards(out, entries)
    if not out.is_url:
        return commit_manifest(
            out.output, entries, dtype=target, vocab_size=vocab, metadata=metadata
        )
    merged = Manifest.build(entries, dtype=target, vocab_size=vocab, metadata=metadata)
    out.write_manifest(merged)
    return merged.to_dict()


def _copy_shard(
    source: OutputArea, shard: ShardEntry, out: OutputArea, renamed: Mapping[str, Any]
) -> None:
    """Link (local) or server-side copy (object store) both files of ``shard`` to
    ``renamed``'s names in ``out``; a local file must be a regular file of its size."""
    for name, size, key in (
        (shard.tokens, shard.tokens_bytes, "tokens"),
        (shard.offsets, shard.offsets_bytes, "offsets"),
    ):
        if out.is_url:
            out.fs.copy(source.path(name), out.path(renamed[key]))
        else:
            link_or_copy(
                contained_shard(source.output, name, size, CorpusFormatError),
                out.path(renamed[key]),
                size=size,
            )


def _widen(
    source: OutputArea,
    shard: ShardEntry,
    out: OutputArea,
    renamed: dict[str, Any],
    from_dtype: str,
    to_dtype: str,
) -> dict[str, Any]:
    """Write ``shard`` of ``source`` widened to ``to_dtype`` as ``renamed``'s files in
    ``out``; return the new entry (new sizes and digests).

    On local disk the shard is linked, then rewritten under the link's name (by
    rename: the input's files are read, never modified). On an object store it is
    downloaded to a temporary directory, rewritten there and uploaded; memory stays
    O(16 Mi ids) either way.
    """
    if not out.is_url:
        _copy_shard(source, shard, out, renamed)
        return rewrite_shard_dtype(out.output, renamed, from_dtype=from_dtype, to_dtype=to_dtype)
    with tempfile.TemporaryDirectory(prefix="mixle-merge-") as local:
        for name, key in ((shard.tokens, "tokens"), (shard.offsets, "offsets")):
            source.fs.get_file(source.path(name), os.path.join(local, renamed[key]))
        widened = rewrite_shard_dtype(
            local, renamed, from_dtype=from_dtype, to_dtype=to_dtype, durable=False
        )
        for key in ("tokens", "offsets"):
            out.fs.put_file(os.path.join(local, widened[key]), out.path(widened[key]))
    return widened


def _remove_stale_shards(out: OutputArea, entries: Sequence[Mapping[str, Any]]) -> None:
    """Delete shard files of a replaced corpus that the merged one does not use."""
    keep = {entry[key] for entry in entries for key in ("tokens", "offsets")}
    for name in out.sizes(""):
        if "/" not in name and name.startswith("shard-") and name not in keep:
            out.remove(name)
