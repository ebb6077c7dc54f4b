"""Version-2 manifests: the binary shard table beside a small manifest.json."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import struct
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.corpus import CorpusWriter, open_corpus, verify_corpus
from mixle.corpus.format.manifest import canonical_json, write_manifest
from mixle.corpus.format.shard_table import SHARD_TABLE_NAME, TABLE_HEADER, ShardTable
from mixle.corpus.format.writer import SHARD_TABLE_MIN_SHARDS
from mixle.errors import ChecksumError, CorpusError, CorpusFormatError

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "shards" / "sample"


def _write(path: Path, shards: int, *, shard_table: bool | None, docs_per_shard: int = 3) -> None:
    """``shards`` shards of ``docs_per_shard`` documents (lengths 1, 2, 3, ...)."""
    lengths = np.tile(np.arange(1, docs_per_shard + 1, dtype=np.int64), shards)
    tokens = (np.arange(int(lengths.sum())) % 997).astype(np.uint16)
    per_shard = int(lengths[:docs_per_shard].sum()) * 2
    with CorpusWriter(
        path,
        vocab_size=997,
        shard_max_bytes=per_shard,
        durable=False,
        shard_table=shard_table,
        overwrite=True,
    ) as writer:
        writer.add_flat(tokens, lengths)


def _manifest(path: Path) -> dict[str, object]:
    loaded: dict[str, object] = json.loads((path / "manifest.json").read_bytes())
    return loaded


def _reseal(path: Path, table: bytes | None = None, **ref: object) -> None:
    """Rewrite the table (and the manifest's reference and checksum) as given."""
    manifest = _manifest(path)
    reference = dict(manifest["shard_table"])  # type: ignore[call-overload]
    if table is not None:
        (path / reference["file"]).write_bytes(table)
        reference.update(bytes=len(table), sha256=hashlib.sha256(table).hexdigest())
    reference.update(ref)
    manifest["shard_table"] = reference
    body = {key: value for key, value in manifest.items() if key != "manifest_sha256"}
    manifest["manifest_sha256"] = hashlib.sha256(canonical_json(body)).hexdigest()
    (path / "manifest.json").write_bytes(json.dumps(manifest, indent=1).encode())


@pytest.fixture
def tabled(tmp_path: Path) -> Path:
    path = tmp_path / "tabled"
    _write(path, 6, shard_table=True)
    return path


def test_table_and_list_manifests_hold_the_same_corpus(tmp_path: Path) -> None:
    _write(tmp_path / "v1", 6, shard_table=False)
    _write(tmp_path / "v2", 6, shard_table=True)
    old, new = open_corpus(tmp_path / "v1"), open_corpus(tmp_path / "v2")
    assert old.manifest["format_version"] == 1 and new.manifest["format_version"] == 2
    assert set(new.manifest) == set(old.manifest) - {"shards"} | {"shard_table"}
    assert new.fingerprint == old.fingerprint and len(new) == len(old) == 18
    assert list(new.parsed_manifest.shards) == list(old.parsed_manifest.shards)
    assert [d.tolist() for d in new] == [d.tolist() for d in old]
    np.testing.assert_array_equal(new.lengths, old.lengths)
    assert (
        new.read_tokens(0, new.num_tokens).tolist() == old.read_tokens(0, old.num_tokens).tolist()
    )
    for name in os.listdir(tmp_path / "v1"):
        if name != "manifest.json":
            assert (tmp_path / "v1" / name).read_bytes() == (tmp_path / "v2" / name).read_bytes()
    assert verify_corpus(tmp_path / "v2").ok
    assert pickle.loads(pickle.dumps(new))[17].tolist() == new[17].tolist()


def test_table_bytes_follow_the_documented_layout(tabled: Path) -> None:
    data = (tabled / SHARD_TABLE_NAME).read_bytes()
    magic, version, code, shards, documents, tokens, heap, reserved = TABLE_HEADER.unpack(data[:64])
    assert (magic, version, code, shards, documents, tokens) == (b"MIXLESTB", 1, 1, 6, 18, 36)
    assert reserved == bytes(16)
    starts = np.frombuffer(data, "<i8", 7, 64)
    assert starts.tolist() == [0, 3, 6, 9, 12, 15, 18]
    digests = data[64 + 16 * 7 : 64 + 16 * 7 + 64 * 6]
    entry = open_corpus(tabled).parsed_manifest.shards[1]
    assert digests[32:64].hex() == entry.tokens_sha256
    assert digests[6 * 32 + 32 : 6 * 32 + 64].hex() == entry.offsets_sha256
    ends = np.frombuffer(data, "<i8", 12, 64 + 16 * 7 + 64 * 6)
    names = data[64 + 16 * 7 + 64 * 6 + 96 :]
    assert len(names) == heap == int(ends[-1])
    assert names[int(ends[1]) : int(ends[2])] == b"shard-00001.tokens"
    assert len(data) == 80 + 96 * 6 + heap


def test_writer_switches_to_a_table_at_the_threshold(tmp_path: Path) -> None:
    shards = SHARD_TABLE_MIN_SHARDS
    _write(tmp_path / "auto", shards, shard_table=None, docs_per_shard=1)
    _write(tmp_path / "few", shards - 1, shard_table=None, docs_per_shard=1)
    assert _manifest(tmp_path / "auto")["format_version"] == 2
    assert _manifest(tmp_path / "few")["format_version"] == 1
    assert not (tmp_path / "few" / SHARD_TABLE_NAME).exists()
    assert open_corpus(tmp_path / "auto").num_shards == shards


def test_a_list_manifest_of_thousands_of_shards_still_opens(tmp_path: Path) -> None:
    _write(tmp_path / "c", 2000, shard_table=False, docs_per_shard=2)
    documents = open_corpus(tmp_path / "c")
    assert documents.manifest["format_version"] == 1 and documents.num_shards == 2000
    assert documents[3999].tolist() == [(5998 + k) % 997 for k in range(2)]


def test_overwriting_a_tabled_corpus_with_a_list_one_removes_the_table(tabled: Path) -> None:
    _write(tabled, 2, shard_table=False)  # overwrites
    assert _manifest(tabled)["format_version"] == 1
    assert not (tabled / SHARD_TABLE_NAME).exists()


def test_the_committed_sample_stays_version_1_and_converts_losslessly(tmp_path: Path) -> None:
    sample = open_corpus(SAMPLE, verify=True)
    parsed = sample.parsed_manifest
    assert parsed.format_version == 1 and parsed.shard_table is None
    assert parsed.to_json() == (SAMPLE / "manifest.json").read_bytes()
    copy = tmp_path / "sample"
    shutil.copytree(SAMPLE, copy)
    write_manifest(copy, parsed.with_shard_table(True))
    converted = open_corpus(copy, verify=True)
    assert converted.fingerprint == sample.fingerprint
    assert all(np.array_equal(a, b) for a, b in zip(converted, sample, strict=True))


def test_table_digest_mismatch_names_the_file_and_field(tabled: Path) -> None:
    table = tabled / SHARD_TABLE_NAME
    data = bytearray(table.read_bytes())
    data[100] ^= 1
    table.write_bytes(bytes(data))
    with pytest.raises(ChecksumError, match=r"shards\.table: SHA-256 .*`sha256`"):
        open_corpus(tabled)
    report = verify_corpus(tabled, raise_errors=False)
    assert not report.ok and "shards.table" in str(report.errors[0])


def test_table_size_disagreeing_with_the_manifest_is_refused(tabled: Path) -> None:
    _reseal(tabled, bytes=(tabled / SHARD_TABLE_NAME).stat().st_size + 8)
    with pytest.raises(CorpusFormatError, match=r"shards\.table: .*bytes"):
        open_corpus(tabled)


@pytest.mark.parametrize(
    ("field", "offset", "message"),
    [
        ("num_shards", 16, "`num_shards` is 7, the manifest says 6"),
        ("num_documents", 24, "`num_documents` is 19, the manifest says 18"),
        ("num_tokens", 32, "`num_tokens` is 37, the manifest says 36"),
    ],
)
def test_table_counts_disagreeing_with_the_manifest_name_the_field(
    tabled: Path, field: str, offset: int, message: str
) -> None:
    data = bytearray((tabled / SHARD_TABLE_NAME).read_bytes())
    (value,) = struct.unpack_from("<Q", data, offset)
    struct.pack_into("<Q", data, offset, value + 1)
    _reseal(tabled, bytes(data))
    with pytest.raises(CorpusFormatError, match=rf"shards\.table: header {message}"):
        open_corpus(tabled)


def test_a_decreasing_count_column_names_the_shard(tabled: Path) -> None:
    data = bytearray((tabled / SHARD_TABLE_NAME).read_bytes())
    struct.pack_into("<q", data, 64 + 8 * 2, 99)  # document_starts[2]
    _reseal(tabled, bytes(data))
    with pytest.raises(CorpusFormatError, match="`document_starts` decreases at shard 2"):
        open_corpus(tabled)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (b"shard-00003.tokens", b"shard/00003.tokens", "not a plain file name"),
        (b"shard-00003.tokens", b".hard-00003.tokens", "not a plain file name"),
        (b"shard-00003.tokens", b"shard-..003.tokens", "not a plain file name"),
        (b"shard-00003.tokens", b"shard-00002.tokens", "must be unique"),
    ],
)
def test_unsafe_or_repeated_names_in_the_table_are_refused(
    tabled: Path, old: bytes, new: bytes, message: str
) -> None:
    data = (tabled / SHARD_TABLE_NAME).read_bytes()
    assert data.count(old) == 1
    _reseal(tabled, data.replace(old, new))
    with pytest.raises(CorpusError, match=message):
        open_corpus(tabled)


def test_a_fingerprint_that_disagrees_with_the_table_is_refused(tabled: Path) -> None:
    manifest = _manifest(tabled)
    manifest["fingerprint"] = "0" * 64
    body = {key: value for key, value in manifest.items() if key != "manifest_sha256"}
    manifest["manifest_sha256"] = hashlib.sha256(canonical_json(body)).hexdigest()
    (tabled / "manifest.json").write_bytes(json.dumps(manifest).encode())
    with pytest.raises(CorpusFormatError, match="`fingerprint` does not match"):
        open_corpus(tabled)


def test_a_fifo_or_a_link_to_dev_zero_in_place_of_the_table_never_hangs(tabled: Path) -> None:
    table = tabled / SHARD_TABLE_NAME
    table.unlink()
    os.mkfifo(table)
    with pytest.raises(CorpusFormatError, match="FIFO"):
        open_corpus(tabled)
    table.unlink()
    table.symlink_to("/dev/zero")
    with pytest.raises(CorpusError):
        open_corpus(tabled)
    assert not verify_corpus(tabled, raise_errors=False).ok


def test_a_missing_shard_file_of_a_table_is_found_when_the_shard_is_touched(
    tabled: Path,
) -> None:
    (tabled / "shard-00004.offsets").unlink()
    documents = open_corpus(tabled)  # per-shard files are checked on first touch
    assert documents[2].size == 3
    with pytest.raises(CorpusFormatError, match=r"shard-00004\.offsets"):
        documents[13]
    with pytest.raises(CorpusFormatError, match=r"shard-00004\.offsets"):
        _ = open_corpus(tabled).lengths
    report = verify_corpus(tabled, raise_errors=False)
    assert [shard.ok for shard in report.shards] == [True] * 4 + [False, True]


def test_a_tampered_offsets_header_of_a_table_corpus_is_refused_on_first_read(
    tabled: Path,
) -> None:
    path = tabled / "shard-00001.offsets"
    data = bytearray(path.read_bytes())
    data[0] ^= 1
    path.write_bytes(bytes(data))
    documents = open_corpus(tabled)
    with pytest.raises(CorpusFormatError, match=r"shard-00001\.offsets: not a mixle offsets"):
        _ = documents.lengths
    with pytest.raises(CorpusFormatError, match=r"shard-00001\.offsets: not a mixle offsets"):
        open_corpus(tabled)[4]


def test_version_1_manifests_keep_their_exact_key_set(tabled: Path, tmp_path: Path) -> None:
    _write(tmp_path / "v1", 2, shard_table=False)
    manifest = _manifest(tmp_path / "v1")
    manifest["shard_table"] = _manifest(tabled)["shard_table"]
    (tmp_path / "v1" / "manifest.json").write_bytes(json.dumps(manifest).encode())
    with pytest.raises(CorpusFormatError, match=r"unknown keys \['shard_table'\]"):
        open_corpus(tmp_path / "v1")
    both = _manifest(tabled)
    both["shards"] = []
    (tabled / "manifest.json").write_bytes(json.dumps(both).encode())
    with pytest.raises(CorpusFormatError, match=r"unknown keys \['shards'\]"):
        open_corpus(tabled)


@pytest.mark.slow
def test_a_table_of_100000_shards_opens_fast_in_little_memory(tmp_path: Path) -> None:
    _write(tmp_path / "c", 100_000, shard_table=True, docs_per_shard=2)
    start = time.perf_counter()
    documents = open_corpus(tmp_path / "c")
    elapsed = time.perf_counter() - start
    assert documents.num_shards == 100_000 and documents[199_999].size == 2
    assert elapsed < 2.0  # ~0.3 s measured; generous for a loaded machine


@pytest.mark.parametrize("shard_table", [False, True])
@pytest.mark.parametrize(
    ("position", "value", "message"),
    [
        (2, 0, "offsets decrease at document 1"),
        (0, 5, "offsets must start at 0"),
        (3, 5, "last offset is 5, expected the token count 6"),
    ],
)
def test_lengths_of_many_shards_name_the_one_bad_offsets_file(
    tmp_path: Path, shard_table: bool, position: int, value: int, message: str
) -> None:
    _write(tmp_path / "c", 40, shard_table=shard_table)
    good = open_corpus(tmp_path / "c").lengths
    assert good.tolist() == [1, 2, 3] * 40
    path = tmp_path / "c" / "shard-00031.offsets"
    data = bytearray(path.read_bytes())
    struct.pack_into("<q", data, 32 + 8 * position, value)
    path.write_bytes(bytes(data))  # same size; only the checksum (verify) would see it
    with pytest.raises(CorpusFormatError, match=rf"shard-00031\.offsets: {message}"):
        _ = open_corpus(tmp_path / "c").lengths


def _spec_table_entries(directory: Path) -> list[dict[str, object]]:
    """The version-1 shard entries of a version-2 corpus, from docs/format.md section 14
    alone (no mixle imports)."""
    manifest = json.loads((directory / "manifest.json").read_bytes())
    assert manifest["format_version"] == 2
    ref = manifest["shard_table"]
    data = (directory / ref["file"]).read_bytes()
    assert len(data) == ref["bytes"] and hashlib.sha256(data).hexdigest() == ref["sha256"]
    magic, version, code, count, n, t, heap_size, reserved = struct.unpack(
        "<8sIIQQQQ16s", data[:64]
    )
    assert (magic, version, reserved) == (b"MIXLESTB", 1, bytes(16))
    assert (count, n, t) == (ref["num_shards"], manifest["num_documents"], manifest["num_tokens"])
    assert len(data) == 80 + 96 * count + heap_size
    itemsize = {1: 2, 2: 4, 3: 8}[code]
    a = 64 + 8 * (count + 1)
    b = a + 8 * (count + 1)
    c = b + 32 * count
    d = c + 32 * count
    e = d + 16 * count
    documents = struct.unpack(f"<{count + 1}q", data[64:a])
    tokens = struct.unpack(f"<{count + 1}q", data[a:b])
    ends = (0, *struct.unpack(f"<{2 * count}q", data[d:e]))
    names = [data[e + ends[j] : e + ends[j + 1]].decode("ascii") for j in range(2 * count)]
    entries = []
    for k in range(count):
        docs, toks = documents[k + 1] - documents[k], tokens[k + 1] - tokens[k]
        entries.append(
            {
                "tokens": names[2 * k],
                "offsets": names[2 * k + 1],
                "num_documents": docs,
                "num_tokens": toks,
                "tokens_bytes": toks * itemsize,
                "offsets_bytes": 32 + 8 * (docs + 1),
                "tokens_sha256": data[b + 32 * k : b + 32 * k + 32].hex(),
                "offsets_sha256": data[c + 32 * k : c + 32 * k + 32].hex(),
            }
        )
    lines = ["mixle-corpus-v1", manifest["dtype"]]
    lines += [f"{s['tokens_sha256']} {s['offsets_sha256']}" for s in entries]
    text = "".join(line + "\n" for line in lines)
    assert hashlib.sha256(text.encode("ascii")).hexdigest() == manifest["fingerprint"]
    return entries


def test_a_reader_written_from_section_14_recovers_the_version_1_entries(tmp_path: Path) -> None:
    _write(tmp_path / "v1", 9, shard_table=False)
    _write(tmp_path / "v2", 9, shard_table=True)
    assert _spec_table_entries(tmp_path / "v2") == _manifest(tmp_path / "v1")["shards"]


def test_bytes_match_the_worked_example_of_section_14(tmp_path: Path) -> None:
    with CorpusWriter(tmp_path / "c", dtype="uint16", shard_table=True) as writer:
        writer.add_many([[5, 6], [], [7]])
    data = (tmp_path / "c" / SHARD_TABLE_NAME).read_bytes()
    assert len(data) == 213
    assert data[:16] == bytes.fromhex("4d49584c455354420100000001000000")
    assert struct.unpack("<QQQQ", data[16:48]) == (1, 3, 3, 37)
    assert struct.unpack("<4q", data[64:96]) == (0, 3, 0, 3)
    assert struct.unpack("<2q", data[160:176]) == (18, 37)
    assert data[176:] == b"shard-00000.tokensshard-00000.offsets"


def test_lengths_of_a_table_corpus_follow_links_only_inside_and_never_hang(tabled: Path) -> None:
    expected = open_corpus(tabled).lengths.tolist()
    inside = tabled / "shard-00002.offsets"
    (tabled / "moved.bin").write_bytes(inside.read_bytes())
    inside.unlink()
    inside.symlink_to("moved.bin")  # a link resolving inside the corpus is allowed
    assert open_corpus(tabled).lengths.tolist() == expected
    outside = tabled.parent / "outside.offsets"
    outside.write_bytes((tabled / "moved.bin").read_bytes())
    inside.unlink()
    inside.symlink_to(outside)
    with pytest.raises(CorpusError, match="outside the corpus directory"):
        _ = open_corpus(tabled).lengths
    inside.unlink()
    os.mkfifo(inside)
    with pytest.raises(CorpusFormatError, match="FIFO"):
        _ = open_corpus(tabled).lengths
    inside.unlink()
    inside.write_bytes((tabled / "moved.bin").read_bytes() + bytes(8))
    with pytest.raises(CorpusFormatError, match=r"shard-00002\.offsets: .*bytes"):
        _ = open_corpus(tabled).lengths


@settings(max_examples=30, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 6), max_size=40),
    shard_max_bytes=st.integers(1, 24),
    shard_table=st.booleans(),
    picks=st.lists(st.integers(0, 10**6), max_size=12),
)
def test_token_offsets_are_the_prefix_sums_of_the_lengths(
    tmp_path_factory: pytest.TempPathFactory,
    lengths: list[int],
    shard_max_bytes: int,
    shard_table: bool,
    picks: list[int],
) -> None:
    path = tmp_path_factory.mktemp("offsets") / "c"
    sizes = np.asarray(lengths, dtype=np.int64)
    with CorpusWriter(
        path, dtype="uint16", shard_max_bytes=shard_max_bytes, shard_table=shard_table
    ) as writer:
        writer.add_flat(np.arange(int(sizes.sum())) % 7, sizes)
    documents = open_corpus(path)
    prefix = np.concatenate([[0], np.cumsum(sizes)])
    indices = np.asarray([pick % (sizes.size + 1) for pick in picks], dtype=np.int64)
    assert documents.token_offsets(indices).tolist() == prefix[indices].tolist()
    assert documents.token_offsets(np.arange(sizes.size + 1)).tolist() == prefix.tolist()
    with pytest.raises(IndexError, match=r"`indices\[1\]` is -1"):
        documents.token_offsets([0, -1])
    with pytest.raises(IndexError, match="outside"):
        documents.token_offsets([sizes.size + 1])


def test_token_offsets_at_shard_boundaries_read_no_offsets_file(tabled: Path) -> None:
    for number in range(6):
        (tabled / f"shard-{number:05d}.offsets").unlink()
    documents = open_corpus(tabled)
    assert documents.token_offsets([0, 3, 9, 18]).tolist() == [0, 6, 18, 36]
    with pytest.raises(CorpusFormatError, match=r"shard-00001\.offsets"):
        documents.token_offsets([4])


def test_a_table_locates_file_names_and_nothing_else(tabled: Path) -> None:
    table = open_corpus(tabled).parsed_manifest.shards
    assert isinstance(table, ShardTable)
    assert table.locate("shard-00004.offsets") == (4, "offsets")
    assert table.locate("shard-00000.tokens") == (0, "tokens")
    assert table.locate("manifest.json") is None and table.locate("shard-00006.tokens") is None
