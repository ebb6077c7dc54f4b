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
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mixle.corpus.format.manifest import Manifest, commit_manifest, parse_manifest
from mixle.corpus.format.shard import rewrite_shard_dtype
from mixle.corpus.format.spec import MANIFEST_NAME, normalize_dtype, shard_file_names
from mixle.corpus.ingestion.area import OutputArea, link_or_copy
from mixle.errors import ArgumentError, CorpusExistsError

__all__ = ["merge_corpora"]


def _read_manifest(area: OutputArea) -> Manifest:
    data = area.fs.cat_file(area.path(MANIFEST_NAME))
    return parse_manifest(data, area.describe(MANIFEST_NAME))


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
        Fewer than two inputs, ``output`` among them, dtypes or vocab sizes that differ
        without ``dtype``/``vocab_size``, a ``dtype`` narrower than an input, or
        inputs on another store than ``output``.
    CorpusExistsError
        ``output`` holds a corpus and ``overwrite`` is false.
    CorpusFormatError, CorpusNotFoundError
        An input is not a valid corpus.
    """
    if len(inputs) < 2:
        raise ArgumentError(f"merge needs at least two corpora. Got {len(inputs)} instead.")
    out = OutputArea(os.fspath(output), storage_options)
    areas = [OutputArea(os.fspath(item), storage_options) for item in inputs]
    for area in areas:
        if area.output == out.output:
            raise ArgumentError(f"the output {out.output} cannot also be an input.")
        if area.is_url != out.is_url or (area.is_url and area.fs.protocol != out.fs.protocol):
            raise ArgumentError(
                f"{area.output} and the output {out.output} are on different stores; merge "
                "where the inputs are, then publish_corpus (mixle convert) the result."
            )
    sources = [
        (os.fspath(item), _read_manifest(area)) for item, area in zip(inputs, areas, strict=True)
    ]
    target = _target_dtype(sources, dtype)
    vocab = _target_vocab(sources, vocab_size)
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
            entry = shard.to_dict()
            tokens, offsets = shard_file_names(len(entries))
            renamed = dict(entry, tokens=tokens, offsets=offsets)
            if manifest.dtype == target:
                for key in ("tokens", "offsets"):
                    _copy_between(area, entry[key], out, renamed[key])
            else:
                renamed = _widen(area, entry, out, renamed, manifest.dtype, target)
            entries.append(renamed)
    _remove_stale_shards(out, entries)
    metadata = {
        "merged_from": [
            {"corpus": name, "fingerprint": manifest.fingerprint} for name, manifest in sources
        ]
    }
    if not out.is_url:
        return commit_manifest(
            out.output, entries, dtype=target, vocab_size=vocab, metadata=metadata
        )
    merged = Manifest.build(entries, dtype=target, vocab_size=vocab, metadata=metadata)
    out.write_manifest(merged)
    return merged.to_dict()


def _copy_between(source: OutputArea, name: str, out: OutputArea, target: str) -> None:
    """Link (local) or server-side copy (object store) ``source/name`` to ``out/target``."""
    if out.is_url:
        out.fs.copy(source.path(name), out.path(target))
        return
    link_or_copy(source.path(name), out.path(target))


def _widen(
    source: OutputArea,
    entry: dict[str, Any],
    out: OutputArea,
    renamed: dict[str, Any],
    from_dtype: str,
    to_dtype: str,
) -> dict[str, Any]:
    """Write shard ``entry`` of ``source`` widened to ``to_dtype`` as ``renamed``'s files
    in ``out``; return the new entry (new sizes and digests).

    On local disk the shard is linked, then rewritten under the link's name (by
    rename: the input's files are read, never modified). On an object store it is
    downloaded to a temporary directory, rewritten there and uploaded; memory stays
    O(16 Mi ids) either way.
    """
    if not out.is_url:
        for key in ("tokens", "offsets"):
            link_or_copy(source.path(entry[key]), out.path(renamed[key]))
        return rewrite_shard_dtype(out.output, renamed, from_dtype=from_dtype, to_dtype=to_dtype)
    with tempfile.TemporaryDirectory(prefix="mixle-merge-") as local:
        for key in ("tokens", "offsets"):
            source.fs.get_file(source.path(entry[key]), os.path.join(local, renamed[key]))
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
