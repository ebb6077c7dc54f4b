"""64-bit offsets: a shard whose token file is larger than 4 GiB (sparse on disk)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

from mixle.corpus import commit_manifest, open_corpus
from mixle.corpus.format.spec import OffsetsHeader, shard_file_names

# 2**31 uint16 tokens = exactly 4 GiB: the second document starts at byte 2**32, past
# every 32-bit byte offset and every int32 token offset.
BIG = 2**31
TAIL = np.arange(1, 101, dtype="<u2")


def _sparse_shard(directory: Path) -> dict[str, object]:
    tokens_name, offsets_name = shard_file_names(0)
    num_tokens = BIG + TAIL.shape[0] + 3
    with open(directory / tokens_name, "wb") as handle:
        handle.truncate(num_tokens * 2)  # a hole: no disk blocks for the zeros
        handle.seek(BIG * 2)
        handle.write(TAIL.tobytes())
        handle.write(np.array([7, 8, 9], dtype="<u2").tobytes())
    offsets = np.array([0, BIG, BIG + TAIL.shape[0], num_tokens], dtype="<i8")
    data = OffsetsHeader("uint16", 3, num_tokens).pack() + offsets.tobytes()
    (directory / offsets_name).write_bytes(data)
    return {
        "tokens": tokens_name,
        "offsets": offsets_name,
        "num_documents": 3,
        "num_tokens": num_tokens,
        "tokens_bytes": num_tokens * 2,
        "offsets_bytes": len(data),
        # Hashing 4 GiB of zeros would dominate the test; open() does not hash.
        "tokens_sha256": "0" * 64,
        "offsets_sha256": hashlib.sha256(data).hexdigest(),
    }


def test_document_past_the_4_gib_mark_reads_correctly(tmp_path: Path) -> None:
    try:
        entry = _sparse_shard(tmp_path)
    except OSError as exc:  # pragma: no cover - filesystems without sparse files
        pytest.skip(f"cannot create a sparse 4 GiB file here: {exc}")
    assert os.stat(tmp_path / "shard-00000.tokens").st_size > 2**32
    commit_manifest(tmp_path, [entry], dtype="uint16", vocab_size=65536)
    documents = open_corpus(tmp_path)
    np.testing.assert_array_equal(documents[1], TAIL)
    np.testing.assert_array_equal(documents[-1], [7, 8, 9])
    assert documents[0].shape == (BIG,)
    np.testing.assert_array_equal(documents.lengths, [BIG, 100, 3])
    assert documents.lengths.dtype == np.int64
    assert documents.num_tokens == BIG + 103
    np.testing.assert_array_equal(documents.take([2, 1])[1], TAIL)
    documents.prefetch([1, 2])
