"""Every corruption is a CorpusError on open, read or verify — never a crash or garbage."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from mixle.corpus import open_corpus, verify_corpus
from mixle.errors import ChecksumError, CorpusError, CorpusFormatError
from tests.corpus.conftest import random_documents

MUTATIONS_PER_FILE = 12  # short form; the slow form mutates every byte


def _mutations(size: int, every_byte: bool) -> Iterator[tuple[str, int, int]]:
    """Yield (kind, position, argument): truncations, extensions and byte flips."""
    for cut in sorted({0, 1, size // 2, max(size - 1, 0)}):
        if cut < size:
            yield "truncate", cut, 0
    for extra in (1, 8):
        yield "extend", size, extra
    if every_byte:
        positions = list(range(size))
    else:
        rng = np.random.default_rng(size)
        positions = sorted({0, size - 1, *rng.integers(0, size, MUTATIONS_PER_FILE).tolist()})
    for position in positions:
        for mask in (0x01, 0x20, 0x80):
            yield "flip", position, mask


def _apply(path: Path, kind: str, position: int, argument: int) -> None:
    data = bytearray(path.read_bytes())
    if kind == "truncate":
        del data[position:]
    elif kind == "extend":
        data.extend(b"\x00" * argument)
    else:
        data[position] ^= argument
    path.write_bytes(bytes(data))


def _read_everything(path: Path) -> None:
    documents = open_corpus(path)
    for document in documents:
        assert document.dtype == documents.dtype
    _ = documents.lengths
    verify_corpus(path)


def _fuzz(source: Path, scratch: Path, every_byte: bool) -> int:
    cases = 0
    for target in sorted(p.name for p in source.iterdir()):
        size = (source / target).stat().st_size
        for kind, position, argument in _mutations(size, every_byte):
            work = scratch / "work"
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(source, work)
            _apply(work / target, kind, position, argument)
            with pytest.raises(CorpusError):
                _read_everything(work)
                print("undetected:", target, kind, position, argument)
            report = verify_corpus(work, raise_errors=False)
            assert not report.ok, (target, kind, position, argument)
            cases += 1
    return cases


@pytest.fixture
def small_corpus(make_corpus: Callable[..., Path]) -> Path:
    return make_corpus(random_documents(11, 12, max_len=9), vocab_size=70000, shard_max_bytes=40)


def test_fuzzed_files_always_raise_corpus_errors(small_corpus: Path, tmp_path: Path) -> None:
    assert len(list(small_corpus.iterdir())) >= 7  # manifest + at least 3 shard pairs
    assert _fuzz(small_corpus, tmp_path, every_byte=False) > 100


@pytest.mark.slow
def test_fuzzed_files_always_raise_corpus_errors_every_byte(
    small_corpus: Path, tmp_path: Path
) -> None:
    assert _fuzz(small_corpus, tmp_path, every_byte=True) > 1000


def test_flipped_token_byte_is_a_checksum_error_naming_the_file(small_corpus: Path) -> None:
    tokens = small_corpus / "shard-00001.tokens"
    _apply(tokens, "flip", 0, 0x01)
    open_corpus(small_corpus)  # cheap checks cannot see token content
    with pytest.raises(ChecksumError, match=r"shard-00001\.tokens"):
        verify_corpus(small_corpus)
    with pytest.raises(ChecksumError):
        open_corpus(small_corpus, verify=True)
    report = verify_corpus(small_corpus, raise_errors=False)
    assert [shard.ok for shard in report.shards].count(False) == 1
    assert not report.shards[1].ok


def test_non_monotone_offsets_raise_when_the_shard_is_read(small_corpus: Path) -> None:
    path = small_corpus / "shard-00000.offsets"
    data = bytearray(path.read_bytes())
    offsets = np.frombuffer(bytes(data[32:]), dtype="<i8").copy()
    offsets[1], offsets[2] = offsets[2] + 1, offsets[1]
    data[32:] = offsets.tobytes()
    path.write_bytes(bytes(data))
    documents = open_corpus(small_corpus)
    with pytest.raises(CorpusFormatError, match=r"shard-00000\.offsets.*(decrease|offset)"):
        documents[0]
    with pytest.raises(CorpusFormatError):
        _ = documents.lengths


def test_deleted_shard_file_is_named(small_corpus: Path) -> None:
    (small_corpus / "shard-00002.tokens").unlink()
    with pytest.raises(CorpusFormatError, match=r"shard-00002\.tokens"):
        open_corpus(small_corpus)


def test_swapped_shards_are_detected(small_corpus: Path) -> None:
    for suffix in ("tokens", "offsets"):
        a, b = small_corpus / f"shard-00000.{suffix}", small_corpus / f"shard-00001.{suffix}"
        data_a, data_b = a.read_bytes(), b.read_bytes()
        a.write_bytes(data_b)
        b.write_bytes(data_a)
    report = verify_corpus(small_corpus, raise_errors=False)
    assert not report.ok
