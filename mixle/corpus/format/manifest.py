"""The manifest: JSON schema, fingerprint, self-checksum, and the atomic commit.

The manifest is the only entry point of a corpus and is written last, so a reader
never sees shards that are not complete. It is JSON only (never pickle) and carries
its own SHA-256 over a canonical serialization, so any edit or corruption of any
byte that changes its content is detected on open.

:func:`commit_manifest` is the one way to publish a corpus; the streaming
:class:`~mixle.corpus.CorpusWriter` and the parallel ingest both end with it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mixle._safe_json import loads_bounded
from mixle.corpus.format.spec import (
    CHECKSUM_ALGORITHM,
    FORMAT_VERSION,
    MANIFEST_NAME,
    check_file_name,
    dtype_limit,
    normalize_dtype,
    offsets_file_size,
)
from mixle.errors import ArgumentError, CorpusFormatError

__all__ = [
    "MANIFEST_KEYS",
    "SHARD_KEYS",
    "canonical_json",
    "commit_manifest",
    "compute_fingerprint",
    "fsync_directory",
    "parse_manifest",
]

FORMAT_NAME = "mixle-corpus"
MANIFEST_KEYS = frozenset(
    {
        "format",
        "format_version",
        "dtype",
        "vocab_size",
        "num_documents",
        "num_tokens",
        "checksum_algorithm",
        "fingerprint",
        "shards",
        "metadata",
        "manifest_sha256",
    }
)
SHARD_KEYS = frozenset(
    {
        "tokens",
        "offsets",
        "num_documents",
        "num_tokens",
        "tokens_bytes",
        "offsets_bytes",
        "tokens_sha256",
        "offsets_sha256",
    }
)
_HEX64 = re.compile(r"[0-9a-f]{64}")


def canonical_json(value: Any) -> bytes:
    """Serialize ``value`` canonically: sorted keys, no whitespace, ASCII only."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode(
        "ascii"
    )


def compute_fingerprint(dtype: str, shards: Sequence[Mapping[str, Any]]) -> str:
    """Return the corpus fingerprint: SHA-256 over the dtype and every shard's checksums.

    The hashed text is ``"mixle-corpus-v1\\n" + dtype + "\\n"`` followed by one line
    ``"<tokens_sha256> <offsets_sha256>\\n"`` per shard, in manifest order. Offsets
    files embed their document and token counts, so the fingerprint pins every byte of
    every shard and the order of the shards.
    """
    digest = hashlib.sha256(f"mixle-corpus-v1\n{dtype}\n".encode("ascii"))
    for shard in shards:
        digest.update(f"{shard['tokens_sha256']} {shard['offsets_sha256']}\n".encode("ascii"))
    return digest.hexdigest()


def _manifest_sha256(manifest: Mapping[str, Any]) -> str:
    body = {key: value for key, value in manifest.items() if key != "manifest_sha256"}
    return hashlib.sha256(canonical_json(body)).hexdigest()


def _check_json_value(value: Any, where: str) -> None:
    """Allow only JSON values that serialize canonically (no floats, string keys)."""
    if value is None or isinstance(value, bool | str):
        return
    if isinstance(value, int):
        return
    if isinstance(value, list | tuple):
        for position, item in enumerate(value):
            _check_json_value(item, f"{where}[{position}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ArgumentError(f"{where} keys must be strings. Got {key!r} instead.")
            _check_json_value(item, f"{where}[{key!r}]")
        return
    raise ArgumentError(
        f"{where} must hold only strings, integers, booleans, null, lists and objects "
        f"(floats are not allowed: the manifest checksum is over canonical JSON). "
        f"Got {value!r} ({type(value).__name__}) instead."
    )


def _count(entry: Mapping[str, Any], key: str, where: str) -> int:
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise CorpusFormatError(
            f"{where}: `{key}` must be a nonnegative 64-bit integer. Got {value!r} instead."
        )
    return value


def _check_keys(entry: Any, expected: frozenset[str], where: str) -> None:
    if not isinstance(entry, dict):
        raise CorpusFormatError(f"{where} must be a JSON object. Got {type(entry).__name__}.")
    keys = set(entry)
    if keys != expected:
        missing = sorted(expected - keys)
        unknown = sorted(keys - expected)
        raise CorpusFormatError(f"{where}: missing keys {missing}, unknown keys {unknown}.")


def validate_shard_entry(entry: Any, dtype: str, where: str) -> dict[str, Any]:
    """Check one shard entry against the schema and the dtype; return it.

    Raises
    ------
    CorpusFormatError
        A key is missing or unknown, a count is not a nonnegative integer, a byte size
        disagrees with its count, or a checksum is not 64 lowercase hex digits.
    UnsafePathError
        A file name could resolve outside the corpus directory.
    """
    _check_keys(entry, SHARD_KEYS, where)
    check_file_name(entry["tokens"], f"{where} `tokens`")
    check_file_name(entry["offsets"], f"{where} `offsets`")
    num_documents = _count(entry, "num_documents", where)
    num_tokens = _count(entry, "num_tokens", where)
    itemsize = np.dtype(dtype).itemsize
    if _count(entry, "tokens_bytes", where) != num_tokens * itemsize:
        raise CorpusFormatError(
            f"{where}: `tokens_bytes` is {entry['tokens_bytes']}, expected "
            f"{num_tokens * itemsize} ({num_tokens} {dtype} tokens)."
        )
    if _count(entry, "offsets_bytes", where) != offsets_file_size(num_documents):
        raise CorpusFormatError(
            f"{where}: `offsets_bytes` is {entry['offsets_bytes']}, expected "
            f"{offsets_file_size(num_documents)} ({num_documents} documents)."
        )
    for key in ("tokens_sha256", "offsets_sha256"):
        if not isinstance(entry[key], str) or not _HEX64.fullmatch(entry[key]):
            raise CorpusFormatError(
                f"{where}: `{key}` must be 64 lowercase hex digits. Got {entry[key]!r} instead."
            )
    return dict(entry)


def parse_manifest(data: bytes, where: str) -> dict[str, Any]:
    """Parse and fully validate manifest bytes read from ``where``; return the manifest.

    Checks, in order: strict JSON (UTF-8, no NaN, no duplicate keys), the exact key set,
    format name and version, dtype, vocab size, every shard entry (see
    :func:`validate_shard_entry`), unique file names, totals, the fingerprint and the
    manifest's own ``manifest_sha256``. O(shards); touches no shard file.

    Raises
    ------
    CorpusFormatError
        Anything above is wrong; the message names ``where`` and the field.
    """
    manifest = loads_bounded(data, where, CorpusFormatError)
    if isinstance(manifest, dict) and manifest.get("format") == FORMAT_NAME:
        version = manifest.get("format_version")
        if version != FORMAT_VERSION:
            raise CorpusFormatError(
                f"{where}: unsupported format version {version!r} "
                f"(this reader knows {FORMAT_VERSION})."
            )
    _check_keys(manifest, MANIFEST_KEYS, where)
    if manifest["format"] != FORMAT_NAME:
        raise CorpusFormatError(
            f"{where}: `format` must be {FORMAT_NAME!r}. Got {manifest['format']!r} instead."
        )
    if manifest["checksum_algorithm"] != CHECKSUM_ALGORITHM:
        raise CorpusFormatError(
            f"{where}: unsupported `checksum_algorithm` {manifest['checksum_algorithm']!r}."
        )
    try:
        dtype = normalize_dtype(manifest["dtype"], f"{where}: `dtype`")
    except ArgumentError as exc:
        raise CorpusFormatError(str(exc)) from exc
    if manifest["dtype"] != dtype:
        raise CorpusFormatError(f"{where}: `dtype` must be spelled {dtype!r}.")
    vocab_size = manifest["vocab_size"]
    if vocab_size is not None and (
        isinstance(vocab_size, bool)
        or not isinstance(vocab_size, int)
        or not 0 < vocab_size <= dtype_limit(dtype)
    ):
        raise CorpusFormatError(
            f"{where}: `vocab_size` must be null or a positive integer that {dtype} holds. "
            f"Got {vocab_size!r} instead."
        )
    if not isinstance(manifest["metadata"], dict):
        raise CorpusFormatError(f"{where}: `metadata` must be a JSON object.")
    if not isinstance(manifest["shards"], list):
        raise CorpusFormatError(f"{where}: `shards` must be a JSON list.")
    shards = [
        validate_shard_entry(entry, dtype, f"{where} shard {index}")
        for index, entry in enumerate(manifest["shards"])
    ]
    names = [name for shard in shards for name in (shard["tokens"], shard["offsets"])]
    if len(set(names)) != len(names) or MANIFEST_NAME in names:
        raise CorpusFormatError(
            f"{where}: shard file names must be unique and not {MANIFEST_NAME}."
        )
    for key in ("num_documents", "num_tokens"):
        total = sum(shard[key] for shard in shards)
        if _count(manifest, key, where) != total:
            raise CorpusFormatError(
                f"{where}: `{key}` is {manifest[key]}, but the shards add up to {total}."
            )
    if manifest["fingerprint"] != compute_fingerprint(dtype, shards):
        raise CorpusFormatError(
            f"{where}: `fingerprint` does not match the shard checksums (manifest edited or corrupt)."
        )
    if manifest["manifest_sha256"] != _manifest_sha256(manifest):
        raise CorpusFormatError(
            f"{where}: `manifest_sha256` does not match the manifest content (edited or corrupt)."
        )
    return manifest


def fsync_directory(directory: str) -> None:
    """Flush a directory entry (renames) to disk; a no-op where unsupported."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def build_manifest(
    shards: Sequence[Mapping[str, Any]],
    *,
    dtype: Any,
    vocab_size: int | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Return a complete, validated manifest dict for ``shards`` (no I/O)."""
    name = normalize_dtype(dtype)
    metadata_dict = dict(metadata or {})
    _check_json_value(metadata_dict, "`metadata`")
    entries = [
        validate_shard_entry(dict(entry), name, f"shard entry {index}")
        for index, entry in enumerate(shards)
    ]
    manifest: dict[str, Any] = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "dtype": name,
        "vocab_size": vocab_size,
        "num_documents": sum(entry["num_documents"] for entry in entries),
        "num_tokens": sum(entry["num_tokens"] for entry in entries),
        "checksum_algorithm": CHECKSUM_ALGORITHM,
        "fingerprint": compute_fingerprint(name, entries),
        "shards": entries,
        "metadata": json.loads(json.dumps(metadata_dict)),
    }
    manifest["manifest_sha256"] = _manifest_sha256(manifest)
    return manifest


def commit_manifest(
    directory: str | os.PathLike[str],
    shards: Sequence[Mapping[str, Any]],
    *,
    dtype: Any,
    vocab_size: int | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Publish a corpus: write ``manifest.json`` for ``shards`` atomically, last.

    Parameters
    ----------
    directory
        The corpus directory; every shard file must already be there, complete.
    shards
        Shard entries as returned by :meth:`ShardWriter.commit` /
        :func:`write_shard`, in document order.
    dtype, vocab_size
        The corpus token dtype (every shard must use it) and optional vocabulary size.
    metadata
        Free-form JSON object stored under ``"metadata"`` (e.g. ingest provenance under
        ``"source"``); strings, integers, booleans, null, lists and objects only.

    Returns
    -------
    dict
        The manifest as written (totals, fingerprint and checksum computed here).

    Raises
    ------
    ArgumentError
        ``vocab_size`` is not a positive integer the dtype holds, or ``metadata`` is not
        canonical JSON.
    CorpusFormatError
        A shard entry is malformed or a shard file is missing or has the wrong size.

    Notes
    -----
    The manifest is written to a temporary name, fsynced, renamed over
    ``manifest.json`` and the directory fsynced, so readers see the old manifest or
    the new one, never a partial one.
    """
    path = os.fspath(directory)
    name = normalize_dtype(dtype)
    if vocab_size is not None and (
        isinstance(vocab_size, bool)
        or not isinstance(vocab_size, int | np.integer)
        or not 0 < int(vocab_size) <= dtype_limit(name)
    ):
        raise ArgumentError(
            f"`vocab_size` must be a positive integer that {name} holds. Got {vocab_size!r} instead."
        )
    manifest = build_manifest(
        shards,
        dtype=name,
        vocab_size=None if vocab_size is None else int(vocab_size),
        metadata=metadata,
    )
    for entry in manifest["shards"]:
        for key in ("tokens", "offsets"):
            file_path = os.path.join(path, entry[key])
            try:
                size = os.stat(file_path).st_size
            except OSError as exc:
                raise CorpusFormatError(f"{file_path}: shard file missing ({exc}).") from exc
            if size != entry[f"{key}_bytes"]:
                raise CorpusFormatError(
                    f"{file_path}: {size} bytes on disk, entry says {entry[f'{key}_bytes']}."
                )
    data = json.dumps(manifest, indent=1).encode("utf-8")
    final = os.path.join(path, MANIFEST_NAME)
    temporary = os.path.join(path, f".{MANIFEST_NAME}.tmp-{os.getpid()}")
    try:
        with open(temporary, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, final)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    fsync_directory(path)
    return manifest
