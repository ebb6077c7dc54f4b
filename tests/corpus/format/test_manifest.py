"""Typed Manifest / ShardEntry: parsed and validated once, byte-identical round trips."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mixle.corpus import CorpusWriter, Manifest, ShardEntry, open_corpus
from mixle.corpus.format.manifest import (
    MANIFEST_KEYS,
    SHARD_KEYS,
    _manifest_sha256,
    compute_fingerprint,
    parse_manifest,
)
from mixle.corpus.format.spec import offsets_file_size
from mixle.errors import ArgumentError, CorpusFormatError

ITEMSIZE = {"uint16": 2, "uint32": 4, "int64": 8}

hex64 = st.text("0123456789abcdef", min_size=64, max_size=64)
json_scalar = st.none() | st.booleans() | st.integers(-(2**62), 2**62) | st.text(max_size=8)
json_value = st.recursive(
    json_scalar,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def shard_dicts(draw: st.DrawFn, dtype: str, count: int) -> list[dict[str, Any]]:
    shards = []
    for number in range(count):
        documents = draw(st.integers(0, 10**6))
        tokens = draw(st.integers(0, 10**9))
        entry = {
            "tokens": f"shard-{number:05d}.tokens",
            "offsets": f"shard-{number:05d}.offsets",
            "num_documents": documents,
            "num_tokens": tokens,
            "tokens_bytes": tokens * ITEMSIZE[dtype],
            "offsets_bytes": offsets_file_size(documents),
            "tokens_sha256": draw(hex64),
            "offsets_sha256": draw(hex64),
        }
        order = draw(st.permutations(list(entry)))
        shards.append({key: entry[key] for key in order})
    return shards


@st.composite
def manifest_dicts(draw: st.DrawFn) -> dict[str, Any]:
    """A valid manifest dict, keys in any order (as another writer could produce)."""
    dtype = draw(st.sampled_from(sorted(ITEMSIZE)))
    shards = draw(shard_dicts(dtype, draw(st.integers(0, 4))))
    built = Manifest.build(
        shards,
        dtype=dtype,
        vocab_size=draw(st.none() | st.integers(1, 65535)),
        metadata=draw(st.dictionaries(st.text(max_size=6), json_value, max_size=4)),
    ).to_dict()
    order = draw(st.permutations(list(built)))
    return {key: built[key] for key in order}


@settings(max_examples=60, deadline=None)
@given(manifest_dicts())
def test_from_dict_to_dict_round_trip_is_byte_identical(manifest: dict[str, Any]) -> None:
    for dump in (lambda m: json.dumps(m, indent=1), json.dumps):
        data = dump(manifest).encode("utf-8")
        parsed = parse_manifest(data, "m.json")
        assert dump(parsed.to_dict()).encode("utf-8") == data
        assert Manifest.from_dict(parsed.to_dict(), "again") == parsed
    parsed = Manifest.from_dict(manifest, "m.json")
    assert parsed.dtype == manifest["dtype"] and parsed.fingerprint == manifest["fingerprint"]
    assert [entry.to_dict() for entry in parsed.shards] == manifest["shards"]
    assert parsed.num_tokens == sum(entry.num_tokens for entry in parsed.shards)


@settings(max_examples=30, deadline=None)
@given(manifest_dicts())
def test_to_json_is_what_commit_writes(manifest: dict[str, Any]) -> None:
    parsed = Manifest.from_dict(manifest, "m.json")
    assert parse_manifest(parsed.to_json(), "m.json") == parsed
    assert parsed.to_json() == json.dumps(parsed.to_dict(), indent=1).encode("utf-8")


def _reseal(manifest: dict[str, Any]) -> None:
    manifest["manifest_sha256"] = _manifest_sha256(manifest)


# Each edit breaks exactly one rule; the manifest is re-sealed so only that rule fires.
EDITS: dict[str, Callable[[dict[str, Any]], None]] = {
    "missing top-level key": lambda m: m.pop("metadata"),
    "unknown top-level key": lambda m: m.update(extra=1),
    "missing shard key": lambda m: m["shards"][0].pop("tokens_sha256"),
    "unknown shard key": lambda m: m["shards"][0].update(extra=1),
    "negative count": lambda m: m["shards"][0].update(num_tokens=-1),
    "boolean count": lambda m: m["shards"][0].update(num_documents=True),
    "tokens_bytes disagrees": lambda m: m["shards"][0].update(tokens_bytes=1),
    "offsets_bytes disagrees": lambda m: m["shards"][0].update(offsets_bytes=7),
    "uppercase checksum": lambda m: m["shards"][0].update(tokens_sha256="A" * 64),
    "unsafe file name": lambda m: m["shards"][0].update(tokens="../x"),
    "duplicate file name": lambda m: m["shards"][0].update(offsets=m["shards"][0]["tokens"]),
    "wrong total": lambda m: m.update(num_documents=m["num_documents"] + 1),
    "wrong fingerprint": lambda m: m.update(fingerprint="0" * 64),
    "wrong format": lambda m: m.update(format="other"),
    "wrong version": lambda m: m.update(format_version=99),
    "dtype spelling": lambda m: m.update(dtype="u2"),
    "vocab not positive": lambda m: m.update(vocab_size=0),
    "metadata not object": lambda m: m.update(metadata=[]),
    "shards not list": lambda m: m.update(shards={}),
}
SHARD_EDITS = {name for name in EDITS if "shard" in name or "count" in name or "name" in name}
SHARD_EDITS |= {"tokens_bytes disagrees", "offsets_bytes disagrees", "uppercase checksum"}


@settings(max_examples=80, deadline=None)
@given(manifest_dicts(), st.sampled_from(sorted(EDITS)), st.booleans())
def test_every_broken_rule_is_rejected(manifest: dict[str, Any], edit: str, seal: bool) -> None:
    assume(manifest["shards"] or edit not in SHARD_EDITS)
    EDITS[edit](manifest)
    if seal:  # as an attacker would: only the rule itself can catch it
        _reseal(manifest)
    with pytest.raises(CorpusFormatError):
        Manifest.from_dict(manifest, "m.json")
    with pytest.raises(CorpusFormatError):
        parse_manifest(json.dumps(manifest).encode("utf-8"), "m.json")


@settings(max_examples=40, deadline=None)
@given(manifest_dicts(), st.sampled_from(["tokens_bytes", "offsets_bytes", "sha"]))
def test_shard_entry_validation_names_the_field(manifest: dict[str, Any], field: str) -> None:
    if not manifest["shards"]:
        return
    entry = manifest["shards"][-1]
    if field == "sha":
        entry["offsets_sha256"] = entry["offsets_sha256"][:63]
        expected = "offsets_sha256"
    else:
        entry[field] += 1
        expected = field
    with pytest.raises(CorpusFormatError, match=expected):
        Manifest.from_dict(manifest, "m.json")
    with pytest.raises(CorpusFormatError, match=f"where shard {len(manifest['shards']) - 1}"):
        ShardEntry.from_dict(entry, manifest["dtype"], f"where shard {len(manifest['shards']) - 1}")


def test_an_edited_but_unsealed_manifest_is_rejected() -> None:
    manifest = Manifest.build([], dtype="uint16", metadata={"a": 1}).to_dict()
    manifest["metadata"]["a"] = 2
    with pytest.raises(CorpusFormatError, match="manifest_sha256"):
        Manifest.from_dict(manifest, "m.json")


def test_build_validates_its_arguments() -> None:
    with pytest.raises(ArgumentError, match="vocab_size"):
        Manifest.build([], dtype="uint16", vocab_size=70000)
    with pytest.raises(ArgumentError, match="floats"):
        Manifest.build([], dtype="uint16", metadata={"x": 0.5})
    built = Manifest.build([], dtype="uint16", vocab_size=np.int64(7))
    assert built.vocab_size == 7 and type(built.vocab_size) is int


def test_manifest_and_entries_are_frozen_slotted_dataclasses() -> None:
    entry = ShardEntry("a.tokens", "a.offsets", 0, 0, 0, offsets_file_size(0), "0" * 64, "1" * 64)
    manifest = Manifest.build([entry], dtype="uint32")
    for value in (entry, manifest):
        assert dataclasses.is_dataclass(value) and not hasattr(value, "__dict__")
    with pytest.raises(dataclasses.FrozenInstanceError):
        manifest.dtype = "int64"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.num_tokens = 1  # type: ignore[misc]
    assert manifest.shards == (entry,) and entry.files == ("a.tokens", "a.offsets")
    assert (
        entry.file_bytes("offsets") == offsets_file_size(0)
        and entry.file_sha256("tokens") == "0" * 64
    )
    assert manifest.fingerprint == compute_fingerprint("uint32", [entry])
    assert set(manifest.to_dict()) == MANIFEST_KEYS and set(entry.to_dict()) == SHARD_KEYS


def test_a_written_corpus_reads_back_as_the_same_typed_manifest(tmp_path: Path) -> None:
    with CorpusWriter(tmp_path / "c", dtype="uint16", shard_max_bytes=64, metadata={"k": [1]}) as w:
        for length in range(40):
            w.add(np.arange(length) % 1000)
    data = (tmp_path / "c" / "manifest.json").read_bytes()
    documents = open_corpus(tmp_path / "c")
    parsed = documents.parsed_manifest
    assert parsed.to_json() == data
    assert documents.manifest == json.loads(data) == w.manifest
    assert documents[1:].parsed_manifest is parsed
    assert len(parsed.shards) == documents.num_shards > 1
    assert parsed.fingerprint == documents.fingerprint and parsed.num_tokens == documents.num_tokens
    # The dict form is a fresh copy: editing it cannot change what the reader reads.
    copy = documents.manifest
    copy["shards"].clear()
    copy["metadata"]["k"].append(2)
    assert documents.manifest == json.loads(data)
