"""write_scale_sidecars: the one rule and the one writer of both scale sidecars.

Its files depend only on the documents' cumulative offsets, never on the shard
layout nor on where the offsets files lie nor on which reading path was taken (one
value per 4096 documents, the document-offsets pass, a writer's recorder).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mixle.corpus import CorpusWriter, open_corpus
from mixle.corpus.format.block_offsets import (
    BLOCK_OFFSETS_KEY,
    BLOCK_OFFSETS_NAME,
    BLOCK_OFFSETS_STRIDE,
    block_offsets_sidecar,
)
from mixle.corpus.format.document_offsets import (
    DOCUMENT_OFFSETS_KEY,
    DOCUMENT_OFFSETS_NAME,
    offsets_pieces,
    write_document_offsets,
)
from mixle.corpus.format.scale_sidecars import (
    LocalOffsetsFiles,
    StoreOffsetsFiles,
    wanted_sidecars,
    write_scale_sidecars,
)
from mixle.corpus.format.spec import HEADER_SIZE
from mixle.corpus.storage.local import LocalStore
from mixle.errors import ArgumentError, CorpusFormatError


def _corpus(path: Path, lengths: list[int], shard_max_bytes: int, **flags: Any) -> Any:
    rng = np.random.default_rng(len(lengths))
    with CorpusWriter(
        path, vocab_size=500, shard_max_bytes=shard_max_bytes, durable=False, **flags
    ) as writer:
        writer.add_flat(rng.integers(0, 500, sum(lengths)), np.array(lengths, dtype=np.int64))
    return open_corpus(path)


def _expected(documents: Any, directory: Path) -> dict[str, bytes]:
    """Both sidecars from the corpus's offsets as a reader sees them (independent path)."""
    block = block_offsets_sidecar(documents._offsets_from_shards, len(documents))
    write_document_offsets(
        directory / DOCUMENT_OFFSETS_NAME,
        offsets_pieces(documents._offsets_from_shards, len(documents), step=1000),
        len(documents),
    )
    return {
        BLOCK_OFFSETS_NAME: block,
        DOCUMENT_OFFSETS_NAME: (directory / DOCUMENT_OFFSETS_NAME).read_bytes(),
    }


def test_default_rule_follows_each_formats_thresholds() -> None:
    assert wanted_sidecars(1, 1 << 24).names == (BLOCK_OFFSETS_NAME,)
    assert wanted_sidecars(1, (1 << 24) - 1).names == ()
    assert wanted_sidecars(1024, 1024 * 4095).names == (DOCUMENT_OFFSETS_NAME,)
    assert wanted_sidecars(1023, 1023).names == ()
    assert wanted_sidecars(1024, 1024 * 4096).names == ()  # large shards: their files suffice
    forced = wanted_sidecars(1, 1, block_offsets=True, document_offsets=True)
    assert forced.names == (BLOCK_OFFSETS_NAME, DOCUMENT_OFFSETS_NAME)
    assert wanted_sidecars(2000, 1 << 24, block_offsets=False, document_offsets=False).names == ()


@pytest.mark.parametrize("value", [1, "yes", 0.0])
def test_a_flag_other_than_true_false_none_is_refused_naming_it(value: Any) -> None:
    with pytest.raises(ArgumentError, match="`document_offsets` must be True, False or None"):
        wanted_sidecars(1, 1, document_offsets=value)
    with pytest.raises(ArgumentError, match="`block_offsets` must be True, False or None"):
        CorpusWriter("/nonexistent-never-created", block_offsets=value)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    counts=st.lists(st.integers(0, 3 * BLOCK_OFFSETS_STRIDE), min_size=1, max_size=4),
    extra=st.sampled_from([0, 1, BLOCK_OFFSETS_STRIDE - 1]),
    shard_max_bytes=st.sampled_from([64, 2000, 1 << 20]),
)
def test_every_reading_path_writes_the_same_bytes(
    tmp_path_factory: pytest.TempPathFactory, counts: list[int], extra: int, shard_max_bytes: int
) -> None:
    root = tmp_path_factory.mktemp("sc")
    rng = np.random.default_rng(sum(counts))
    total = sum(counts) + extra
    lengths = rng.integers(0, 4, total).tolist()  # empty documents and empty shards too
    written = _corpus(
        root / "c", lengths, shard_max_bytes, block_offsets=True, document_offsets=True
    )
    expected = _expected(written, root)
    for name, data in expected.items():
        assert (root / "c" / name).read_bytes() == data  # CorpusWriter: the recorder
    shards = written.parsed_manifest.shards
    store = LocalStore(str(root / "c"))
    readers = {
        "local": LocalOffsetsFiles(str(root / "c"), shards),
        "store": StoreOffsetsFiles(store, [entry.offsets for entry in shards], shards),
    }
    for kind, files in readers.items():
        for flags in ((True, False), (True, True)):  # block values read alone, or on the pass
            out = root / f"{kind}-{flags[1]}"
            out.mkdir()
            metadata: dict[str, Any] = {"keep": 1}
            names = write_scale_sidecars(
                str(out), files, metadata, block_offsets=flags[0], document_offsets=flags[1]
            )
            assert names == [BLOCK_OFFSETS_NAME, DOCUMENT_OFFSETS_NAME][: 1 + flags[1]]
            assert metadata["keep"] == 1 and BLOCK_OFFSETS_KEY in metadata
            assert (DOCUMENT_OFFSETS_KEY in metadata) is flags[1]
            for name in names:
                assert (out / name).read_bytes() == expected[name], (kind, flags, name)
    shutil.rmtree(root)


def _damage(directory: Path, shards: Any, document: int) -> Path:
    """Set the offset before global ``document`` (inside a shard) past every token."""
    start = 0
    for entry in shards:
        if start < document < start + entry.num_documents:
            victim = directory / entry.offsets
            data = bytearray(victim.read_bytes())
            at = HEADER_SIZE + 8 * (document - start)
            data[at : at + 8] = (10**9).to_bytes(8, "little")
            victim.write_bytes(bytes(data))
            return victim
        start += entry.num_documents
    raise AssertionError(document)


def test_a_damaged_offsets_file_is_refused_and_nothing_is_named_in_metadata(
    tmp_path: Path,
) -> None:
    documents = _corpus(tmp_path / "c", [3] * 9000, 4000)
    shards = documents.parsed_manifest.shards
    victim = _damage(tmp_path / "c", shards, 100)  # not a block boundary
    files = LocalOffsetsFiles(str(tmp_path / "c"), shards)
    metadata: dict[str, Any] = {}
    with pytest.raises(CorpusFormatError, match=victim.name):  # the full pass checks each file
        write_scale_sidecars(str(tmp_path), files, metadata, document_offsets=True)
    assert metadata == {}
    _damage(tmp_path / "c", shards, BLOCK_OFFSETS_STRIDE)  # a block boundary
    with pytest.raises(CorpusFormatError, match=f"{BLOCK_OFFSETS_NAME}: its offsets do not run"):
        write_scale_sidecars(str(tmp_path), files, metadata, block_offsets=True)
    assert metadata == {}
    assert not (tmp_path / BLOCK_OFFSETS_NAME).exists()


def test_a_missing_offsets_file_in_a_store_is_named(tmp_path: Path) -> None:
    documents = _corpus(tmp_path / "c", [2] * 5000, 3000)
    shards = documents.parsed_manifest.shards
    (tmp_path / "c" / shards[0].offsets).unlink()
    files = StoreOffsetsFiles(LocalStore(str(tmp_path / "c")), [e.offsets for e in shards], shards)
    with pytest.raises(Exception, match=shards[0].offsets):
        write_scale_sidecars(str(tmp_path), files, {}, document_offsets=True)
