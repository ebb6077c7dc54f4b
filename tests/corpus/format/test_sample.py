"""The committed sample corpus is the format's regression fixture; docs/format.md is exact."""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from mixle.corpus import CorpusWriter, open_corpus, verify_corpus

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "shards" / "sample"
SOURCE = ROOT / "shards" / "sample-src"
# Pinned: changing the format, the writer or tools/make_sample.py must not change it.
SAMPLE_FINGERPRINT = "fde4c2d99a4274262b317b99ee55b9a9bcfccaea9ae85a63ad856021e7b658bf"


def test_sample_fingerprint_is_pinned_and_verifies() -> None:
    documents = open_corpus(SAMPLE, verify=True)
    assert documents.fingerprint == SAMPLE_FINGERPRINT
    assert documents.num_shards >= 3
    assert documents.num_tokens >= 1_000_000
    assert documents.dtype == np.uint16 and documents.vocab_size == 256


def test_sample_documents_concatenate_back_to_the_source_files() -> None:
    documents = open_corpus(SAMPLE)
    files = documents.manifest["metadata"]["sample"]["files"]
    text = b"".join((SOURCE / f"{name}.txt").read_bytes() for name in files)
    assert documents.num_tokens == len(text)
    joined = np.concatenate(list(documents)).astype(np.uint8).tobytes()
    assert joined == text
    assert (SOURCE / "LICENSE.txt").read_text().startswith("A. HISTORY OF THE SOFTWARE")


def test_make_sample_is_deterministic(tmp_path: Path) -> None:
    output = tmp_path / "sample"
    subprocess.run(
        [sys.executable, str(ROOT / "tools" / "make_sample.py"), "--output", str(output)],
        check=True,
        capture_output=True,
    )
    for path in sorted(SAMPLE.iterdir()):
        assert (output / path.name).read_bytes() == path.read_bytes(), path.name


def _spec_reader(directory: Path) -> Iterator[np.ndarray]:
    """A reader written from docs/format.md alone (no mixle imports)."""
    manifest = json.loads((directory / "manifest.json").read_bytes().decode("utf-8"))
    assert manifest["format"] == "mixle-corpus" and manifest["format_version"] == 1
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    assert hashlib.sha256(canonical.encode("ascii")).hexdigest() == manifest["manifest_sha256"]
    lines = ["mixle-corpus-v1", manifest["dtype"]]
    lines += [f"{s['tokens_sha256']} {s['offsets_sha256']}" for s in manifest["shards"]]
    text = "".join(line + "\n" for line in lines)
    assert hashlib.sha256(text.encode("ascii")).hexdigest() == manifest["fingerprint"]
    codes = {"uint16": 1, "uint32": 2, "int64": 3}
    dtype = np.dtype(manifest["dtype"]).newbyteorder("<")
    for shard in manifest["shards"]:
        raw = (directory / shard["offsets"]).read_bytes()
        magic, version, code, n, t = struct.unpack("<8sIIQQ", raw[:32])
        assert (magic, version, code) == (b"MIXLEOFS", 1, codes[manifest["dtype"]])
        assert len(raw) == 32 + 8 * (n + 1) == shard["offsets_bytes"]
        offsets = np.frombuffer(raw, "<i8", offset=32)
        data = (directory / shard["tokens"]).read_bytes()
        assert len(data) == t * dtype.itemsize
        assert hashlib.sha256(data).hexdigest() == shard["tokens_sha256"]
        tokens = np.frombuffer(data, dtype)
        for j in range(n):
            yield tokens[offsets[j] : offsets[j + 1]]


def test_a_reader_written_from_the_spec_reads_the_sample() -> None:
    documents = open_corpus(SAMPLE)
    spec = list(_spec_reader(SAMPLE))
    assert len(spec) == len(documents)
    for ours, theirs in zip(documents, spec, strict=True):
        np.testing.assert_array_equal(ours, theirs)


def test_bytes_match_the_worked_example_in_format_md(tmp_path: Path) -> None:
    with CorpusWriter(tmp_path / "c", dtype="uint16") as writer:
        writer.add_many([[5, 6], [], [7]])
    assert (tmp_path / "c" / "shard-00000.tokens").read_bytes() == bytes.fromhex("050006000700")
    doc = (ROOT / "docs" / "format.md").read_text()
    block = doc.split("has a 6-byte tokens")[1].split("```")[1]
    hexdump = "".join(line.split("   ")[0] for line in block.strip().splitlines())
    assert (tmp_path / "c" / "shard-00000.offsets").read_bytes() == bytes.fromhex(hexdump)


@pytest.mark.parametrize("metadata", [{"name": "café ☕ 𝄞", "n": 2**62, "ok": [True, None]}])
def test_canonical_json_rule_covers_non_ascii_metadata(
    tmp_path: Path, metadata: dict[str, object]
) -> None:
    with CorpusWriter(tmp_path / "c", metadata=metadata) as writer:
        writer.add([1])
    assert [doc.tolist() for doc in _spec_reader(tmp_path / "c")] == [[1]]
    assert verify_corpus(tmp_path / "c").ok
