"""``export_corpus``: write a corpus as Megatron ``.bin/.idx`` or LitData chunks."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from mixle._checks import positive_int
from mixle.corpus.export import litdata, megatron
from mixle.corpus.export._output import STAGING_TAG, check_output, make_marker, write_marker
from mixle.corpus.export._source import CorpusSource
from mixle.corpus.storage.publish import staged_directory
from mixle.errors import ArgumentError, ArgumentTypeError

__all__ = ["EXPORT_FORMATS", "ExportSummary", "export_corpus"]

#: The formats :func:`export_corpus` writes.
EXPORT_FORMATS = ("megatron", "litdata")


@dataclass(frozen=True, slots=True)
class ExportSummary:
    """What :func:`export_corpus` wrote.

    Attributes
    ----------
    output
        The export directory (absolute).
    format
        ``"megatron"`` or ``"litdata"``.
    files
        File names in ``output``, sorted (``.mixle-export.json`` included).
    prefixes
        Megatron: the absolute ``PREFIX`` of each ``.bin/.idx`` pair, in document
        order (what ``--data-path`` takes); LitData: empty.
    documents, tokens
        Counts exported (all of the corpus).
    dtype
        Token dtype of the export (``int32`` for a ``uint32`` corpus in Megatron).
    linked_bytes
        Token bytes placed by hard link or reflink (no data written).
    copied_bytes
        Token bytes written (copied in the kernel where the corpus is local).
    index_bytes
        Bytes of ``.idx`` files, chunk headers and ``index.json``.
    seconds
        Wall time of the export.
    """

    output: str
    format: str
    files: tuple[str, ...]
    prefixes: tuple[str, ...]
    documents: int
    tokens: int
    dtype: str
    linked_bytes: int
    copied_bytes: int
    index_bytes: int
    seconds: float


def export_corpus(
    corpus: Any,
    output: str | os.PathLike[str],
    format: str = "megatron",
    *,
    single: bool = False,
    overwrite: bool = False,
    block_size: int | None = None,
    chunk_bytes: int = litdata.DEFAULT_CHUNK_BYTES,
    **open_options: Any,
) -> ExportSummary:
    """Write the corpus as a Megatron-LM indexed dataset or a LitData dataset.

    Parameters
    ----------
    corpus
        A corpus path or URL, or an open :class:`mixle.corpus.ShardedDocuments`.
    output
        The directory to create (a local path). It appears complete or not at all.
    format
        ``"megatron"``: one ``shard-NNNNN.bin/.idx`` prefix per shard (shards without
        documents are skipped), or one ``corpus.bin/.idx`` with ``single=True``; token
        files are hard-linked (or reflinked, else copied) as ``.bin`` and only the
        ``.idx`` is written (see :mod:`mixle.corpus.export.megatron`).
        ``"litdata"``: ``chunk-0-K.bin`` files and ``index.json`` for
        ``litdata.StreamingDataset(output, item_loader=TokensLoader(block_size))``
        (see :mod:`mixle.corpus.export.litdata`).
    single
        Megatron only: one prefix for the whole corpus (a copy, unless the corpus
        has one shard).
    overwrite
        Replace ``output`` if it is a previous export (or an empty directory).
    block_size
        LitData only: make every chunk but the last hold a multiple of this many ids,
        so ``TokensLoader(block_size)`` drops no token before the corpus's end.
    chunk_bytes
        LitData only: target token bytes per chunk (default 64 MiB, at most 1 GiB).
    **open_options
        Passed to :func:`mixle.corpus.open_corpus` when ``corpus`` is a path or URL
        (``cache_dir``, ``storage_options``, ...).

    Returns
    -------
    ExportSummary

    Raises
    ------
    ArgumentError
        An option is invalid or does not apply to ``format``, or ``output`` is a URL
        or the corpus directory.
    CorpusExistsError
        ``output`` exists and ``overwrite`` is false, or it is not a previous export.
    ExportError
        The corpus does not fit the format: more than ``2**31 - 1`` documents in one
        Megatron prefix, a document longer than ``2**31 - 1`` tokens, or a ``uint32``
        id ``>= 2**31`` (Megatron's int32). Raised before anything is written.
    CorpusError
        The corpus cannot be opened or read (from :func:`open_corpus`).

    Notes
    -----
    The output is built in a hidden staging directory next to it, every file
    fsynced, and renamed into place last, so a failed or killed export never leaves
    a partial output. The same corpus and options give byte-identical files.
    """
    started = time.perf_counter()
    if format not in EXPORT_FORMATS:
        raise ArgumentError(
            f"`format` must be one of {', '.join(EXPORT_FORMATS)}. Got {format!r} instead."
        )
    for name, value in (("single", single), ("overwrite", overwrite)):
        if not isinstance(value, bool):
            raise ArgumentTypeError(f"`{name}` must be a bool. Got {value!r} instead.")
    if format == "megatron" and block_size is not None:
        raise ArgumentError("`block_size` applies to format='litdata' only.")
    if format == "litdata" and single:
        raise ArgumentError("`single` applies to format='megatron' only.")
    block = None if block_size is None else positive_int("block_size", block_size)
    chunk_bytes = positive_int("chunk_bytes", chunk_bytes)
    if not isinstance(output, str | os.PathLike):
        raise ArgumentTypeError(f"`output` must be a path. Got {type(output).__name__} instead.")

    source = CorpusSource(corpus, **open_options)
    destination = check_output(os.fspath(output), overwrite, source.location)
    prefixes: list[megatron.MegatronPrefix] = []
    tokens_per_chunk = 0
    if format == "megatron":
        prefixes = megatron.plan_megatron(source, single)
        dtype = megatron.megatron_dtype(source.dtype.name)
        options: dict[str, Any] = {"single": single}
    else:
        tokens_per_chunk = litdata.chunk_tokens(source.itemsize, block, chunk_bytes)
        dtype = source.dtype.name
        options = {"block_size": block, "chunk_tokens": tokens_per_chunk}
    marker = make_marker(
        format,
        {
            "location": source.location,
            "fingerprint": source.fingerprint,
            "dtype": source.dtype.name,
            "vocab_size": source.vocab_size,
            "num_documents": source.num_documents,
            "num_tokens": source.num_tokens,
        },
        {**options, "dtype": dtype},
    )
    with staged_directory(destination, tag=STAGING_TAG) as staging:
        if format == "megatron":
            placed = megatron.write_megatron(source, staging, prefixes)
        else:
            placed = litdata.write_litdata(source, staging, tokens_per_chunk)
        write_marker(staging, marker)
    return ExportSummary(
        output=destination,
        format=format,
        files=tuple(sorted(os.listdir(destination))),
        prefixes=tuple(os.path.join(destination, prefix.name) for prefix in prefixes),
        documents=source.num_documents,
        tokens=source.num_tokens,
        dtype=dtype,
        linked_bytes=placed.get("link", 0) + placed.get("reflink", 0),
        copied_bytes=placed.get("copy", 0),
        index_bytes=placed["index"],
        seconds=time.perf_counter() - started,
    )
