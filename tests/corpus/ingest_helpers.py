"""Input writers shared by the ingest tests (written from the public specs)."""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mixle.corpus import open_corpus

# Megatron-LM indexed dataset dtype codes, from its public `DType` enum.
MEGATRON_CODES = {np.dtype(np.uint8): 1, np.dtype(np.int32): 4, np.dtype(np.uint16): 8}


def write_jsonl(path: Path, documents: Sequence[np.ndarray], key: str = "input_ids") -> Path:
    with open(path, "w", encoding="utf-8") as handle:
        for doc in documents:
            handle.write(json.dumps({key: [int(x) for x in doc], "meta": "x"}) + "\n")
    return path


def write_megatron(
    prefix: Path, documents: Sequence[Sequence[np.ndarray]], dtype: np.dtype[np.generic]
) -> Path:
    """Write ``PREFIX.bin``/``PREFIX.idx``: each document is a list of sequences.

    Layout (Megatron-LM ``_IndexWriter``): magic b"MMIDIDX\\x00\\x00", u64 version 1,
    u8 dtype code, u64 sequence count, u64 document-index count, int32 sequence
    lengths, int64 byte pointers, int64 document indices (leading 0, one per doc).
    """
    dtype = np.dtype(dtype)
    sizes: list[int] = []
    doc_idx = [0]
    with open(f"{prefix}.bin", "wb") as data:
        for document in documents:
            for sequence in document:
                data.write(np.asarray(sequence, dtype=dtype).tobytes())
                sizes.append(len(sequence))
            doc_idx.append(len(sizes))
    pointers = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64) * dtype.itemsize
    with open(f"{prefix}.idx", "wb") as index:
        index.write(b"MMIDIDX\x00\x00")
        index.write(struct.pack("<Q", 1))
        index.write(struct.pack("<B", MEGATRON_CODES[dtype]))
        index.write(struct.pack("<Q", len(sizes)))
        index.write(struct.pack("<Q", len(doc_idx)))
        index.write(np.asarray(sizes, dtype="<i4").tobytes())
        index.write(pointers[: len(sizes)].astype("<i8").tobytes())
        index.write(np.asarray(doc_idx, dtype="<i8").tobytes())
    return prefix


def read_all(path: Path) -> list[list[int]]:
    corpus = open_corpus(path)
    return [corpus[i].tolist() for i in range(len(corpus))]


def tree_bytes(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` (relative name -> content)."""
    result = {}
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            result[os.path.relpath(full, path)] = Path(full).read_bytes()
    return result


def random_docs(seed: int, count: int, vocab: int = 1000, max_len: int = 40) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, size=int(n)) for n in rng.integers(0, max_len, size=count)]
