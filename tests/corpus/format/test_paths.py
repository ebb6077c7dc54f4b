"""Manifests naming files outside the corpus directory are rejected before any access."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mixle.corpus import ShardEntry, commit_manifest, open_corpus, verify_corpus, write_shard
from mixle.corpus.format.manifest import _manifest_sha256, compute_fingerprint
from mixle.errors import CorpusFormatError, UnsafePathError

UNSAFE_NAMES = [
    "../outside.tokens",
    "..",
    "a/../../b",
    "/etc/passwd",
    "sub/shard.tokens",
    "sub\\shard.tokens",
    "C:shard.tokens",
    ".hidden",
    "~root",
    "",
    "nul\x00byte",
    "x..y",
]


def _rewrite(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Edit the manifest and re-seal it (fingerprint and self-checksum), as an attacker would."""
    manifest = json.loads((path / "manifest.json").read_text())
    edit(manifest)
    shards = [ShardEntry(**entry) for entry in manifest["shards"]]  # unvalidated, on purpose
    manifest["fingerprint"] = compute_fingerprint(manifest["dtype"], shards)
    manifest["manifest_sha256"] = _manifest_sha256(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))


@pytest.fixture
def corpus(make_corpus: Callable[..., Path]) -> Path:
    return make_corpus([[1, 2], [3]], shard_max_bytes=4)


@pytest.mark.parametrize("name", UNSAFE_NAMES)
@pytest.mark.parametrize("key", ["tokens", "offsets"])
def test_unsafe_shard_names_are_rejected_on_open(corpus: Path, name: str, key: str) -> None:
    def edit(manifest: dict[str, Any]) -> None:
        manifest["shards"][1][key] = name

    _rewrite(corpus, edit)
    with pytest.raises(UnsafePathError, match="plain file name"):
        open_corpus(corpus)
    with pytest.raises(UnsafePathError):
        verify_corpus(corpus)
    assert isinstance(verify_corpus(corpus, raise_errors=False).errors[0], UnsafePathError)


def test_non_string_name_is_rejected(corpus: Path) -> None:
    def edit(manifest: dict[str, Any]) -> None:
        manifest["shards"][0]["tokens"] = ["shard-00000.tokens"]

    _rewrite(corpus, edit)
    with pytest.raises(UnsafePathError):
        open_corpus(corpus)


def test_a_shard_cannot_name_the_manifest_or_reuse_a_file(corpus: Path) -> None:
    def edit(manifest: dict[str, Any]) -> None:
        manifest["shards"][1]["tokens"] = manifest["shards"][0]["tokens"]

    _rewrite(corpus, edit)
    with pytest.raises(CorpusFormatError, match="unique"):
        open_corpus(corpus)


def test_commit_manifest_rejects_unsafe_entries(tmp_path: Path) -> None:
    entry = write_shard(tmp_path, 0, [[1]], dtype="uint16")
    with pytest.raises(UnsafePathError):
        commit_manifest(tmp_path, [{**entry, "tokens": "../x"}], dtype="uint16")
    assert not (tmp_path / "manifest.json").exists()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.update(format_version=3), "unsupported format version 3"),
        (lambda m: m.update(format_version=2), r"missing keys \[.shard_table.\]"),
        (lambda m: m.update(dtype="float32"), "dtype"),
        (lambda m: m.update(dtype="<u2"), "spelled"),
        (lambda m: m.update(vocab_size=70000), "vocab_size"),
        (lambda m: m.update(extra=1), r"unknown keys \['extra'\]"),
        (lambda m: m.pop("metadata"), r"missing keys \['metadata'\]"),
        (lambda m: m.update(num_documents=99), "add up to"),
        (lambda m: m["shards"][0].update(num_tokens=-1), "nonnegative"),
        (lambda m: m["shards"][0].update(num_tokens=True), "nonnegative"),
        (lambda m: m["shards"][0].update(tokens_sha256="AB" * 32), "lowercase hex"),
        (lambda m: m.update(shards={}), "list"),
    ],
)
def test_schema_violations_are_format_errors(
    corpus: Path, edit: Callable[[dict[str, Any]], None], message: str
) -> None:
    def apply(manifest: dict[str, Any]) -> None:
        edit(manifest)

    try:
        _rewrite(corpus, apply)
    except (TypeError, KeyError, AttributeError):
        # The edit broke the shape so much that re-sealing failed; write it unsealed.
        manifest = json.loads((corpus / "manifest.json").read_text())
        edit(manifest)
        (corpus / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorpusFormatError, match=message):
        open_corpus(corpus)


def test_hand_edited_manifest_fails_its_self_checksum(corpus: Path) -> None:
    manifest = json.loads((corpus / "manifest.json").read_text())
    manifest["metadata"] = {"note": "edited"}
    (corpus / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorpusFormatError, match="manifest_sha256"):
        open_corpus(corpus)


def test_pickle_protocol_data_is_not_a_manifest(corpus: Path) -> None:
    import pickle

    (corpus / "manifest.json").write_bytes(pickle.dumps({"format": "mixle-corpus"}))
    with pytest.raises(CorpusFormatError, match="JSON"):
        open_corpus(corpus)
