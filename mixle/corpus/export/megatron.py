"""Megatron-LM indexed datasets (``PREFIX.bin`` + ``PREFIX.idx``) from a corpus.

The ``.idx`` layout read by megatron-core's ``indexed_dataset.py`` (all
little-endian)::

    offset  size        field
    0       9           magic b"MMIDIDX\\x00\\x00"
    9       8   u64     version, 1
    17      1   u8      dtype code (8 uint16, 4 int32, 5 int64, ...)
    18      8   u64     sequence count S
    26      8   u64     document-index count D = documents + 1
    34      4*S int32   sequence lengths, in tokens
    ..      8*S int64   sequence pointers: byte offset of each sequence in .bin
    ..      8*D int64   document indices: document d is sequences [idx[d], idx[d+1])

mixle writes one sequence per document, so the document indices are ``0..S``, the
pointers are the exclusive prefix sums of the lengths times the id size, and the
``.bin`` is the documents' ids back to back: exactly a mixle ``.tokens`` file.
So a shard's ``.bin`` is its tokens file, hard-linked (or reflinked, or copied
where neither is possible), and only the small ``.idx`` is written. A corpus with an
origins sidecar also gets ``PREFIX.origins``: the sidecar of the prefix's documents
(``docs/format.md`` section 15, documents counted from the prefix's first), which
``mixle ingest`` of the pair picks up, so the documents keep their origins.

Dtypes: ``uint16`` stays ``uint16`` (code 8) and ``int64`` stays ``int64`` (code 5).
Megatron has no uint32 code, so a ``uint32`` corpus becomes ``int32`` (code 4, what
megatron-core itself uses for vocabularies above 65,536) after a check that every id
is below ``2**31``; for those ids the little-endian bytes of uint32 and int32 are the
same, so the tokens file is still linked, not rewritten.

Limits (checked before anything is written): at most ``2**31 - 1`` documents per
prefix (GPTDataset indexes documents with int32) and at most ``2**31 - 1`` tokens
per document (int32 sequence lengths).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

import numpy as np

from mixle.corpus.export._output import write_file
from mixle.corpus.export._source import (
    MEGATRON_DTYPES,
    MEGATRON_MAGIC,
    ORIGINS_SUFFIX,
    CorpusSource,
    Shard,
    new_file,
    write_all,
)
from mixle.errors import ExportError

__all__ = ["INT32_MAX", "MegatronPrefix", "megatron_dtype", "plan_megatron", "write_megatron"]

INT32_MAX = 2**31 - 1
#: Name of the one prefix of a ``single=True`` export.
SINGLE_PREFIX = "corpus"
_HEADER = struct.Struct("<9sQBQQ")
_CODES = {name: code for code, name in MEGATRON_DTYPES.items()}
# mixle dtype -> Megatron dtype of the same bytes (uint32 ids are checked to fit int32).
_TARGET = {"uint16": "uint16", "uint32": "int32", "int64": "int64"}
# Lengths are turned into index sections this many documents at a time (bounded memory).
_DOCS_PER_BLOCK = 1 << 20


@dataclass(frozen=True, slots=True)
class MegatronPrefix:
    """One ``PREFIX.bin`` / ``PREFIX.idx`` pair to write: its name and its shards."""

    name: str
    shards: tuple[Shard, ...]

    @property
    def num_documents(self) -> int:
        return sum(shard.num_documents for shard in self.shards)


def megatron_dtype(dtype: str) -> str:
    """The Megatron dtype an export of a ``dtype`` corpus uses (``uint32`` -> ``int32``)."""
    return _TARGET[dtype]


def plan_megatron(source: CorpusSource, single: bool) -> list[MegatronPrefix]:
    """Choose the prefixes and check every Megatron limit; write nothing.

    One prefix per shard (shards without documents are skipped: Megatron cannot map
    an empty dataset and they hold nothing), or one prefix ``corpus`` for all.

    Raises
    ------
    ExportError
        A prefix would hold more than ``2**31 - 1`` documents, a document is longer
        than ``2**31 - 1`` tokens, or (``uint32`` corpora) an id is ``>= 2**31``; the
        message names the prefix or shard, document and position.
    """
    if single:
        prefixes = [MegatronPrefix(SINGLE_PREFIX, source.shards)]
    else:
        width = max(5, len(str(len(source.shards) - 1)))  # names sort in shard order
        prefixes = [
            MegatronPrefix(f"shard-{shard.number:0{width}d}", (shard,))
            for shard in source.shards
            if shard.num_documents
        ]
    for prefix in prefixes:  # counts first: the manifest knows them, nothing is read
        if prefix.num_documents > INT32_MAX:
            raise ExportError(
                f"prefix {prefix.name} would hold {prefix.num_documents:,} documents; Megatron "
                f"indexes at most {INT32_MAX:,} (2**31 - 1) per prefix. "
                + ("Export one prefix per shard (without --single)." if single else "")
            )
    lengths = source.lengths(0, source.num_documents)
    if lengths.shape[0] and int(lengths.max()) > INT32_MAX:
        document = int(np.argmax(lengths > INT32_MAX))
        raise ExportError(
            f"document {document} of {source.location} has {int(lengths[document]):,} tokens; "
            f"Megatron sequence lengths are int32 (at most {INT32_MAX:,})."
        )
    if source.dtype.name == "uint32" and (
        source.vocab_size is None or source.vocab_size > INT32_MAX + 1
    ):
        found = source.find_id_at_least(INT32_MAX + 1)
        if found is not None:
            shard, document, position, value = found
            raise ExportError(
                f"{source.location}/{shard.name}: token id {value} (document {document}, "
                f"position {position}) does not fit Megatron's int32 token dtype (ids must be "
                f"below 2**31 = {INT32_MAX + 1:,}; Megatron has no uint32)."
            )
    return prefixes


def write_megatron(
    source: CorpusSource, directory: str, prefixes: list[MegatronPrefix]
) -> dict[str, int]:
    """Write every prefix's ``.bin`` and ``.idx`` into ``directory``.

    Returns the bytes placed by each method: ``{"link", "reflink", "copy", "index"}``.
    """
    placed = {"link": 0, "reflink": 0, "copy": 0, "index": 0}
    dtype = megatron_dtype(source.dtype.name)
    for prefix in prefixes:
        bin_path = os.path.join(directory, prefix.name + ".bin")
        nbytes = sum(shard.num_tokens for shard in prefix.shards) * source.itemsize
        if len(prefix.shards) == 1:
            placed[source.place_shard(prefix.shards[0], bin_path)] += nbytes
        else:
            _concatenate(source, prefix.shards, bin_path)
            placed["copy"] += nbytes
        first = prefix.shards[0].first_document if prefix.shards else 0
        index_path = os.path.join(directory, prefix.name + ".idx")
        placed["index"] += _write_index(
            source, index_path, first, first + prefix.num_documents, dtype
        )
        origins = source.origins(first, first + prefix.num_documents)
        if origins is not None:
            write_file(os.path.join(directory, prefix.name + ORIGINS_SUFFIX), origins)
            placed["index"] += len(origins)
    return placed


def _concatenate(source: CorpusSource, shards: tuple[Shard, ...], path: str) -> None:
    with new_file(path) as fd:
        if shards:
            last = shards[-1]
            source.copy_tokens(fd, shards[0].first_token, last.first_token + last.num_tokens)


def _write_index(source: CorpusSource, path: str, first: int, stop: int, dtype: str) -> int:
    """Write the ``.idx`` of documents ``first .. stop - 1`` (one sequence each) to ``path``.

    Each section is streamed in blocks of :data:`_DOCS_PER_BLOCK` documents, so memory
    stays bounded whatever the document count. Returns the file size.
    """
    count = stop - first
    itemsize = np.dtype(dtype).itemsize
    blocks = [
        (start, min(start + _DOCS_PER_BLOCK, stop)) for start in range(first, stop, _DOCS_PER_BLOCK)
    ]
    with new_file(path) as fd:
        write_all(fd, _HEADER.pack(MEGATRON_MAGIC, 1, _CODES[dtype], count, count + 1))
        for start, end in blocks:  # int32 lengths (checked by plan_megatron)
            write_all(fd, source.lengths(start, end).astype("<i4"))
        pointer = 0  # byte offset in .bin of the block's first document
        for start, end in blocks:
            lengths = source.lengths(start, end)
            ends = pointer + np.cumsum(lengths, dtype=np.int64) * itemsize
            write_all(fd, (ends - lengths * itemsize).astype("<i8"))
            pointer = int(ends[-1])
        for start in range(0, count + 1, _DOCS_PER_BLOCK):  # document indices 0..count
            write_all(fd, np.arange(start, min(start + _DOCS_PER_BLOCK, count + 1), dtype="<i8"))
    return os.path.getsize(path)
