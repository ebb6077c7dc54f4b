"""Corpus statistics for ``mixle inspect``: sizes, shards, document-length percentiles."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from mixle._optional import install_hint
from mixle.corpus.format.documents import ShardedDocuments
from mixle.corpus.format.scale_sidecars import sidecar_status
from mixle.corpus.storage.open import open_corpus
from mixle.errors import ArgumentError

__all__ = ["PERCENTILES", "describe_corpus", "plot_lengths"]

#: Document-length percentiles reported by :func:`describe_corpus`.
PERCENTILES = (0, 1, 10, 25, 50, 75, 90, 99, 100)


def describe_corpus(corpus: str | os.PathLike[str] | ShardedDocuments) -> dict[str, Any]:
    """Return a JSON-able summary of a corpus.

    Keys: ``location``, ``format_version``, ``dtype``, ``vocab_size``,
    ``num_shards``, ``num_documents``, ``num_tokens``, ``empty_documents``,
    ``tokens_bytes``, ``offsets_bytes``, ``total_bytes`` (shard files plus manifest is
    not counted), ``fingerprint``, ``metadata``, ``sidecars`` (each scale sidecar's
    ``file``, whether it is ``present``, whether this shape calls for it, ``recommended``:
    :func:`~mixle.corpus.format.scale_sidecars.sidecar_status`), ``length`` (``mean`` and ``p0`` ... ``p100``, the
    linear-interpolation percentiles of document lengths; ``None`` for an empty
    corpus) and ``shards`` (one dict per shard with its files, counts and bytes).

    Reads the manifest, headers and offsets files only — never token data.
    """
    documents = corpus if isinstance(corpus, ShardedDocuments) else open_corpus(corpus)
    manifest = documents.parsed_manifest
    lengths = documents.lengths
    if lengths.shape[0]:
        values = np.percentile(lengths, PERCENTILES)
        length: dict[str, Any] = {"mean": float(lengths.mean())}
        length.update({f"p{p}": float(v) for p, v in zip(PERCENTILES, values, strict=True)})
    else:
        length = {"mean": None, **{f"p{p}": None for p in PERCENTILES}}
    shards = [
        {
            "index": number,
            "tokens": entry.tokens,
            "offsets": entry.offsets,
            "num_documents": entry.num_documents,
            "num_tokens": entry.num_tokens,
            "bytes": entry.tokens_bytes + entry.offsets_bytes,
        }
        for number, entry in enumerate(manifest.shards)
    ]
    tokens_bytes = sum(entry.tokens_bytes for entry in manifest.shards)
    offsets_bytes = sum(entry.offsets_bytes for entry in manifest.shards)
    return {
        "location": documents.location,
        "format_version": manifest.format_version,
        "dtype": manifest.dtype,
        "vocab_size": manifest.vocab_size,
        "num_shards": len(shards),
        "num_documents": manifest.num_documents,
        "num_tokens": manifest.num_tokens,
        "empty_documents": int((lengths == 0).sum()),
        "tokens_bytes": tokens_bytes,
        "offsets_bytes": offsets_bytes,
        "total_bytes": tokens_bytes + offsets_bytes,
        "fingerprint": manifest.fingerprint,
        "metadata": manifest.metadata,
        "sidecars": sidecar_status(manifest),
        "length": length,
        "shards": shards,
    }


def check_plot_path(output: str | os.PathLike[str]) -> str:
    """Return ``output`` if a plot can be written there: its directory exists.

    Raises
    ------
    ArgumentError
        The directory of ``output`` does not exist or ``output`` is a directory.
    """
    path = os.fspath(output)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ArgumentError(
            f"`output` {path!r}: the directory {directory} does not exist; create it first."
        )
    if os.path.isdir(path):
        raise ArgumentError(f"`output` {path!r} is a directory; name a file such as lengths.png.")
    return path


def plot_lengths(
    corpus: str | os.PathLike[str] | ShardedDocuments,
    output: str | os.PathLike[str],
    *,
    bins: int = 60,
) -> None:
    """Save a histogram of document lengths (log-spaced bins) to ``output`` (PNG, SVG...).

    Raises
    ------
    ArgumentError
        matplotlib is not installed (install ``mixle[plot]``), or ``output``'s
        directory does not exist (checked before anything is read).
    """
    check_plot_path(output)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ArgumentError(
            f"plotting needs matplotlib: install mixle[plot] ({install_hint('plot')})."
        ) from exc
    documents = corpus if isinstance(corpus, ShardedDocuments) else open_corpus(corpus)
    lengths = documents.lengths
    figure, axis = plt.subplots(figsize=(7, 4))
    try:
        positive = lengths[lengths > 0]
        if positive.shape[0]:
            edges = np.unique(np.geomspace(1, int(positive.max()) + 1, bins).round())
            axis.hist(positive, bins=edges.tolist(), color="#3b6ea8")
            axis.set_xscale("log")
        axis.set_xlabel("document length (tokens)")
        axis.set_ylabel("documents")
        empty = int((lengths == 0).sum())
        axis.set_title(
            f"{len(documents):,} documents, {documents.num_tokens:,} tokens"
            + (f" ({empty:,} empty, not shown)" if empty else "")
        )
        figure.tight_layout()
        figure.savefig(os.fspath(output), dpi=100)
    finally:
        plt.close(figure)
