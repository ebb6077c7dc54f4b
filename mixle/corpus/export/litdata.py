"""LitData optimized datasets for ``TokensLoader`` from a corpus.

LitData's ``StreamingDataset(dir, item_loader=TokensLoader(block_size))`` reads a
directory holding ``index.json`` and chunk files. A chunk file (all little-endian)::

    offset      size        field
    0           4   u32     N, the number of items in the chunk
    4           4*(N+1) u32 item byte offsets from the start of the file
                            (offsets[0] = 4 * (N + 2), offsets[N] = file size)
    4*(N+2)     ...         the items' token ids, back to back

``TokensLoader`` ignores the item boundaries: it maps the chunk past the header and
reads block ``i`` of the chunk as ids ``i * block_size .. (i + 1) * block_size - 1``,
non-overlapping, and drops the ``dim % block_size`` ids at the end of each chunk. So
an export cuts the corpus's token stream into chunks of ``chunk_tokens`` ids (a
multiple of ``block_size`` when one is given, so no chunk but the last loses a
token); the items of a chunk are the pieces of the documents it holds (an empty
document has no piece), which keeps document boundaries visible in the header.

``index.json`` is ``{"chunks": [...], "config": {...}, "updated_at": ID}`` with one
``{"chunk_bytes", "chunk_size" (= N), "dim" (= ids in the chunk), "filename"}`` per
chunk and the config LitData's writer produces for 1-D NumPy items under
``TokensLoader`` (data format ``no_header_numpy:<code>``; the corpus dtype is kept:
``uint16``, ``uint32`` or ``int64``). ``updated_at``, which LitData uses only to name
its cache directory for a remote dataset, is derived from the corpus fingerprint and
the chunking, so an export is bitwise deterministic.

A corpus with an origins sidecar also gets ``origins.bin`` (``docs/format.md`` section
15): the corpus's documents in order, document ``d`` being the ``d``-th document of the
token stream (LitData items are pieces of documents; ``TokensLoader`` ignores them).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import numpy as np

from mixle.corpus.export._output import write_file
from mixle.corpus.export._source import ORIGINS_NAME, CorpusSource, new_file, write_all
from mixle.errors import ArgumentError

__all__ = ["DEFAULT_CHUNK_BYTES", "MAX_CHUNK_BYTES", "chunk_tokens", "write_litdata"]

#: Default target of token bytes per chunk (LitData's usual 64 MB order).
DEFAULT_CHUNK_BYTES = 64 * 1024 * 1024
#: Chunk offsets are uint32: with the header (at most 4 bytes per id) a chunk of this
#: many token bytes stays below 4 GiB.
MAX_CHUNK_BYTES = 1 << 30
INDEX_NAME = "index.json"
# LitData's NumPy dtype codes (its _NUMPY_DTYPES_MAPPING) for the corpus dtypes.
_NUMPY_CODES = {"uint16": 5, "uint32": 6, "int64": 3}
# The pytree spec LitData's writer records for an item that is a single array leaf.
_LEAF_SPEC = '[1, {"type": null, "context": null, "children_spec": []}]'


def chunk_tokens(itemsize: int, block_size: int | None, chunk_bytes: int) -> int:
    """Ids per chunk: ``chunk_bytes // itemsize``, rounded down to a multiple of
    ``block_size`` (at least one block)."""
    if not 0 < chunk_bytes <= MAX_CHUNK_BYTES:
        raise ArgumentError(
            f"`chunk_bytes` must be in [1, {MAX_CHUNK_BYTES}] (chunk offsets are uint32). "
            f"Got {chunk_bytes} instead."
        )
    count = max(chunk_bytes // itemsize, 1)
    if block_size is not None:
        count = max(count // block_size, 1) * block_size
        if count * itemsize > MAX_CHUNK_BYTES:
            raise ArgumentError(
                f"`block_size` {block_size} needs chunks of {count * itemsize} bytes, above "
                f"{MAX_CHUNK_BYTES} (chunk offsets are uint32)."
            )
    return count


def write_litdata(source: CorpusSource, directory: str, tokens_per_chunk: int) -> dict[str, int]:
    """Write the chunks and ``index.json`` of ``source`` into ``directory``.

    Returns the bytes written: ``{"copy": token bytes, "index": headers and index}``.
    """
    ends = np.cumsum(source.lengths(0, source.num_documents), dtype=np.int64)
    itemsize = source.itemsize
    chunks: list[dict[str, Any]] = []
    written = {"copy": 0, "index": 0}
    for number, start in enumerate(range(0, source.num_tokens, tokens_per_chunk)):
        stop = min(start + tokens_per_chunk, source.num_tokens)
        # Item boundaries: the chunk's ends plus every document end strictly inside it.
        inside = ends[np.searchsorted(ends, start, "right") : np.searchsorted(ends, stop, "left")]
        bounds = np.concatenate(([start], np.unique(inside), [stop]))
        count = bounds.shape[0] - 1
        header_bytes = 4 * (count + 2)
        header = np.empty(count + 2, dtype="<u4")
        header[0] = count
        header[1:] = header_bytes + (bounds - start) * itemsize
        name = f"chunk-0-{number}.bin"
        with new_file(os.path.join(directory, name)) as fd:
            write_all(fd, header)
            source.copy_tokens(fd, start, stop)
        chunks.append(
            {
                "chunk_bytes": int(header[-1]),
                "chunk_size": count,
                "dim": stop - start,
                "filename": name,
            }
        )
        written["copy"] += (stop - start) * itemsize
        written["index"] += header_bytes
    content_id = hashlib.sha256(
        f"{source.fingerprint}:{tokens_per_chunk}".encode("ascii")
    ).hexdigest()[:32]
    index = {
        "chunks": chunks,
        "config": {
            "chunk_bytes": None,
            "chunk_size": tokens_per_chunk,
            "compression": None,
            "data_format": [f"no_header_numpy:{_NUMPY_CODES[source.dtype.name]}"],
            "data_spec": _LEAF_SPEC,
            "encryption": None,
            "item_loader": "TokensLoader",
        },
        "updated_at": content_id,
    }
    data = json.dumps(index, sort_keys=True).encode("utf-8")
    write_file(os.path.join(directory, INDEX_NAME), data)
    written["index"] += len(data)
    origins = source.origins(0, source.num_documents)
    if origins is not None:
        write_file(os.path.join(directory, ORIGINS_NAME), origins)
        written["index"] += len(origins)
    return written
