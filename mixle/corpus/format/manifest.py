"""The manifest: JSON schema, fingerprint, self-checksum, and the atomic commit.

The manifest is the only entry point of a corpus and is written last, so a reader
never sees shards that are not complete. It is JSON only (never pickle) and carries
its own SHA-256 over a canonical serialization, so any edit or corruption of any
byte that changes its content is detected on open.

:func:`commit_manifest` is the one way to publish a corpus; the streaming
:class:`~mixle.corpus.CorpusWriter` and the parallel ingest both end with it (or with
its two halves, :meth:`Manifest.build` and :func:`write_manifest`).

:func:`parse_manifest` validates a manifest once into the typed, frozen
:class:`Manifest` / :class:`ShardEntry`; everything downstream reads attributes.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from mixle._io import atomic_write_bytes
from mixle._safe_json import loads_bounded
from mixle.corpus.format.shard_entry import (
    SHA256_HEX,
    SHARD_FILES,
    SHARD_KEYS,
    ShardEntry,
    check_keys,
    count_field,
)
from mixle.corpus.format.shard_table import SHARD_TABLE_NAME, ShardTable, pack_shard_table
from mixle.corpus.format.spec import (
    CHECKSUM_ALGORITHM,
    FORMAT_VERSION,
    MANIFEST_NAME,
    check_file_name,
    dtype_limit,
    normalize_dtype,
)
from mixle.errors import ArgumentError, ChecksumError, CorpusFormatError

__all__ = [
    "MANIFEST_KEYS",
    "SHARD_KEYS",
    "Manifest",
    "ShardEntry",
    "canonical_json",
    "commit_manifest",
    "compute_fingerprint",
    "parse_manifest",
    "write_manifest",
]

FORMAT_NAME = "mixle-corpus"
# The key orders the writer uses (json.dumps keeps insertion order).
MANIFEST_KEY_ORDER = (
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
)
MANIFEST_KEYS = frozenset(MANIFEST_KEY_ORDER)
#: Manifest version 2 names a binary shard table (``docs/format.md`` section 14)
#: instead of listing the shards; everything else is as in version 1.
TABLE_FORMAT_VERSION = 2
MANIFEST_VERSIONS = (FORMAT_VERSION, TABLE_FORMAT_VERSION)
TABLE_MANIFEST_KEY_ORDER = tuple(
    "shard_table" if key == "shards" else key for key in MANIFEST_KEY_ORDER
)
TABLE_MANIFEST_KEYS = frozenset(TABLE_MANIFEST_KEY_ORDER)
TABLE_REF_KEY_ORDER = ("file", "num_shards", "bytes", "sha256")
TABLE_REF_KEYS = frozenset(TABLE_REF_KEY_ORDER)
#: Reads ``(file name, exact byte size)`` of a corpus file whole: bytes or a mapping.
TableReader = Callable[[str, int], Any]


def canonical_json(value: Any) -> bytes:
    """Serialize ``value`` canonically: sorted keys, no whitespace, ASCII only."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode(
        "ascii"
    )


def compute_fingerprint(dtype: str, shards: Iterable[ShardEntry]) -> str:
    """Return the corpus fingerprint: SHA-256 over the dtype and every shard's checksums.

    The hashed text is ``"mixle-corpus-v1\\n" + dtype + "\\n"`` followed by one line
    ``"<tokens_sha256> <offsets_sha256>\\n"`` per shard, in manifest order. Offsets
    files embed their document and token counts, so the fingerprint pins every byte of
    every shard and the order of the shards.
    """
    digest = hashlib.sha256(f"mixle-corpus-v1\n{dtype}\n".encode("ascii"))
    for shard in shards:
        digest.update(f"{shard.tokens_sha256} {shard.offsets_sha256}\n".encode("ascii"))
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


@dataclass(frozen=True, slots=True)
class ShardTableRef:
    """The ``shard_table`` object of a version-2 manifest: the table file, its shard
    count, byte size and SHA-256."""

    file: str
    num_shards: int
    bytes: int
    sha256: str

    @classmethod
    def from_dict(cls, value: Any, where: str) -> ShardTableRef:
        """Check the ``shard_table`` object read from ``where``; return it typed."""
        where = f"{where} `shard_table`"
        check_keys(value, TABLE_REF_KEYS, where)
        check_file_name(value["file"], f"{where} `file`")
        if value["file"] == MANIFEST_NAME:
            raise CorpusFormatError(f"{where}: `file` must not be {MANIFEST_NAME}.")
        if not isinstance(value["sha256"], str) or not SHA256_HEX.fullmatch(value["sha256"]):
            raise CorpusFormatError(
                f"{where}: `sha256` must be 64 lowercase hex digits. Got {value['sha256']!r} instead."
            )
        return cls(
            value["file"],
            count_field(value, "num_shards", where),
            count_field(value, "bytes", where),
            value["sha256"],
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "num_shards": self.num_shards,
            "bytes": self.bytes,
            "sha256": self.sha256,
        }


def _read_table(
    ref: ShardTableRef,
    read_table: TableReader | None,
    where: str,
    dtype: str,
    num_documents: int,
    num_tokens: int,
) -> ShardTable:
    """Read the table ``ref`` names, check its SHA-256 and parse it against the manifest."""
    directory = where[: -len(MANIFEST_NAME)] if where.endswith(MANIFEST_NAME) else where + "/"
    table_where = f"{directory}{ref.file}"
    if read_table is None:
        raise CorpusFormatError(
            f"{where}: a version-{TABLE_FORMAT_VERSION} manifest lists its shards in "
            f"{ref.file}, which this caller cannot read (open the corpus with open_corpus)."
        )
    buffer = read_table(ref.file, ref.bytes)
    actual = hashlib.sha256(buffer).hexdigest()
    if actual != ref.sha256:
        raise ChecksumError(
            f"{table_where}: SHA-256 is {actual}, the manifest's `shard_table` `sha256` "
            f"says {ref.sha256}."
        )
    return ShardTable.parse(
        buffer,
        where=table_where,
        dtype=dtype,
        num_shards=ref.num_shards,
        num_documents=num_documents,
        num_tokens=num_tokens,
        own_name=ref.file,
    )


@dataclass(frozen=True, slots=True)
class Manifest:
    """A corpus manifest, parsed and validated once (see :func:`parse_manifest`).

    ``format`` and ``checksum_algorithm`` are fixed by the format and not stored.
    ``metadata`` is the free-form JSON object; treat it as read-only (:meth:`to_dict`
    returns a copy). :meth:`to_dict` keeps the key order the manifest was read or
    written with, so ``json.dumps(Manifest.from_dict(d).to_dict())`` equals
    ``json.dumps(d)`` byte for byte.
    """

    format_version: int
    dtype: str
    vocab_size: int | None
    num_documents: int
    num_tokens: int
    fingerprint: str
    shards: Sequence[ShardEntry]
    metadata: dict[str, Any]
    manifest_sha256: str
    key_order: tuple[str, ...] = field(default=MANIFEST_KEY_ORDER, compare=False, repr=False)
    #: Version 2 only: the table file's reference, and (for a manifest being written)
    #: the table's bytes.
    shard_table: ShardTableRef | None = None
    table_bytes: bytes | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_dict(
        cls, manifest: Any, where: str, read_table: TableReader | None = None
    ) -> Manifest:
        """Fully validate a decoded manifest JSON object read from ``where``.

        Checks the exact key set, format name and version, dtype, vocab size, every
        shard entry (see :meth:`ShardEntry.from_dict`), unique file names, totals, the
        fingerprint and the manifest's own ``manifest_sha256``. O(shards). A version-2
        manifest's shard table is read with ``read_table(name, size)``, its SHA-256
        checked against the manifest and its columns checked whole (vectorised); its
        entries are then built one at a time when asked for.

        Raises
        ------
        CorpusFormatError
            Anything above is wrong; the message names ``where`` (or the table file)
            and the field.
        ChecksumError
            The shard table's SHA-256 differs from the manifest's.
        """
        version = None
        if isinstance(manifest, dict) and manifest.get("format") == FORMAT_NAME:
            version = manifest.get("format_version")
            if version not in MANIFEST_VERSIONS:
                raise CorpusFormatError(
                    f"{where}: unsupported format version {version!r} "
                    f"(this reader knows {', '.join(map(str, MANIFEST_VERSIONS))})."
                )
        tabled = version == TABLE_FORMAT_VERSION
        check_keys(manifest, TABLE_MANIFEST_KEYS if tabled else MANIFEST_KEYS, where)
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
                f"{where}: `vocab_size` must be null or a positive integer that {dtype} "
                f"holds. Got {vocab_size!r} instead."
            )
        if not isinstance(manifest["metadata"], dict):
            raise CorpusFormatError(f"{where}: `metadata` must be a JSON object.")
        ref: ShardTableRef | None = None
        shards: Sequence[ShardEntry]
        if tabled:
            ref = ShardTableRef.from_dict(manifest["shard_table"], where)
            totals = {
                key: count_field(manifest, key, where) for key in ("num_documents", "num_tokens")
            }
            if manifest["manifest_sha256"] != _manifest_sha256(manifest):
                raise CorpusFormatError(
                    f"{where}: `manifest_sha256` does not match the manifest content "
                    f"(edited or corrupt)."
                )
            table = _read_table(
                ref, read_table, where, dtype, totals["num_documents"], totals["num_tokens"]
            )
            shards, fingerprint = table, table.fingerprint()
        else:
            shards = _parse_shard_list(manifest, dtype, where)
            totals = {
                "num_documents": sum(shard.num_documents for shard in shards),
                "num_tokens": sum(shard.num_tokens for shard in shards),
            }
            for key, total in totals.items():
                if count_field(manifest, key, where) != total:
                    raise CorpusFormatError(
                        f"{where}: `{key}` is {manifest[key]}, but the shards add up to {total}."
                    )
            fingerprint = compute_fingerprint(dtype, shards)
        if manifest["fingerprint"] != fingerprint:
            raise CorpusFormatError(
                f"{where}: `fingerprint` does not match the shard checksums "
                f"(manifest edited or corrupt)."
            )
        if manifest["manifest_sha256"] != _manifest_sha256(manifest):
            raise CorpusFormatError(
                f"{where}: `manifest_sha256` does not match the manifest content "
                f"(edited or corrupt)."
            )
        return cls(
            format_version=manifest["format_version"],
            dtype=dtype,
            vocab_size=vocab_size,
            num_documents=totals["num_documents"],
            num_tokens=totals["num_tokens"],
            fingerprint=manifest["fingerprint"],
            shards=shards,
            metadata=manifest["metadata"],
            manifest_sha256=manifest["manifest_sha256"],
            key_order=tuple(manifest),
            shard_table=ref,
        )

    @classmethod
    def build(
        cls,
        shards: Sequence[Mapping[str, Any] | ShardEntry],
        *,
        dtype: Any,
        vocab_size: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        shard_table: bool = False,
    ) -> Manifest:
        """Return a complete, validated manifest for ``shards`` (no I/O).

        Totals, fingerprint and ``manifest_sha256`` are computed here; ``shards`` are
        entry dicts (as :meth:`ShardWriter.commit` returns) or :class:`ShardEntry`.
        With ``shard_table`` the manifest is version 2: the shards go to a binary
        table (its bytes in ``table_bytes``, written by :func:`write_manifest`)
        that the manifest names with its size and SHA-256.

        Raises
        ------
        ArgumentError
            ``vocab_size`` is not a positive integer the dtype holds, or ``metadata``
            is not canonical JSON.
        CorpusFormatError
            A shard entry is malformed.
        """
        name = normalize_dtype(dtype)
        if vocab_size is not None and (
            isinstance(vocab_size, bool)
            or not isinstance(vocab_size, int | np.integer)
            or not 0 < int(vocab_size) <= dtype_limit(name)
        ):
            raise ArgumentError(
                f"`vocab_size` must be a positive integer that {name} holds. "
                f"Got {vocab_size!r} instead."
            )
        metadata_dict = dict(metadata or {})
        _check_json_value(metadata_dict, "`metadata`")
        entries = tuple(
            ShardEntry.from_dict(
                entry.to_dict() if isinstance(entry, ShardEntry) else dict(entry),
                name,
                f"shard entry {index}",
            )
            for index, entry in enumerate(shards)
        )
        ref = table = None
        if shard_table:
            table = pack_shard_table(entries, name)
            ref = ShardTableRef(
                SHARD_TABLE_NAME, len(entries), len(table), hashlib.sha256(table).hexdigest()
            )
            if SHARD_TABLE_NAME in {file for entry in entries for file in entry.files}:
                raise CorpusFormatError(f"no shard file may be named {SHARD_TABLE_NAME}.")
        body = cls(
            format_version=FORMAT_VERSION if ref is None else TABLE_FORMAT_VERSION,
            dtype=name,
            vocab_size=None if vocab_size is None else int(vocab_size),
            num_documents=sum(entry.num_documents for entry in entries),
            num_tokens=sum(entry.num_tokens for entry in entries),
            fingerprint=compute_fingerprint(name, entries),
            shards=entries,
            metadata=json.loads(json.dumps(metadata_dict)),
            manifest_sha256="",
            key_order=MANIFEST_KEY_ORDER if ref is None else TABLE_MANIFEST_KEY_ORDER,
            shard_table=ref,
            table_bytes=table,
        )
        return replace(body, manifest_sha256=_manifest_sha256(body.to_dict()))

    def with_shard_table(self, shard_table: bool) -> Manifest:
        """The same corpus (same shards, fingerprint and metadata) as a version-2
        manifest with a shard table (``True``) or a version-1 list (``False``), ready for
        :func:`write_manifest`. O(shards)."""
        return Manifest.build(
            self.shards,
            dtype=self.dtype,
            vocab_size=self.vocab_size,
            metadata=self.metadata,
            shard_table=shard_table,
        )

    def to_dict(self) -> dict[str, Any]:
        """The manifest as a fresh JSON object, keys in the order read or written."""
        values = {
            "format": FORMAT_NAME,
            "format_version": self.format_version,
            "dtype": self.dtype,
            "vocab_size": self.vocab_size,
            "num_documents": self.num_documents,
            "num_tokens": self.num_tokens,
            "checksum_algorithm": CHECKSUM_ALGORITHM,
            "fingerprint": self.fingerprint,
            "metadata": json.loads(json.dumps(self.metadata)),
            "manifest_sha256": self.manifest_sha256,
        }
        if self.shard_table is None:
            values["shards"] = [entry.to_dict() for entry in self.shards]
        else:
            values["shard_table"] = self.shard_table.to_dict()
        return {key: values[key] for key in self.key_order}

    def to_json(self) -> bytes:
        """The bytes :func:`commit_manifest` writes to ``manifest.json``."""
        return json.dumps(self.to_dict(), indent=1).encode("utf-8")


def parse_manifest(data: bytes, where: str, read_table: TableReader | None = None) -> Manifest:
    """Parse and fully validate manifest bytes read from ``where``; return the manifest.

    Strict JSON (UTF-8, no NaN, no duplicate keys), then :meth:`Manifest.from_dict`
    (which reads a version-2 manifest's shard table through ``read_table``).
    O(shards); touches no shard file.

    Raises
    ------
    CorpusFormatError
        Anything is wrong; the message names ``where`` and the field.
    """
    manifest = loads_bounded(data, where, CorpusFormatError)
    return Manifest.from_dict(manifest, where, read_table)


def _parse_shard_list(manifest: dict[str, Any], dtype: str, where: str) -> tuple[ShardEntry, ...]:
    """The ``shards`` list of a version-1 manifest, every entry checked, names distinct."""
    if not isinstance(manifest["shards"], list):
        raise CorpusFormatError(f"{where}: `shards` must be a JSON list.")
    shards = tuple(
        ShardEntry.from_dict(entry, dtype, f"{where} shard {index}")
        for index, entry in enumerate(manifest["shards"])
    )
    names = [name for shard in shards for name in shard.files]
    if len(set(names)) != len(names) or MANIFEST_NAME in names:
        raise CorpusFormatError(
            f"{where}: shard file names must be unique and not {MANIFEST_NAME}."
        )
    return shards


def write_manifest(directory: str | os.PathLike[str], manifest: Manifest) -> None:
    """Check every shard file of ``manifest`` is in ``directory`` with its size, then
    write a version-2 manifest's shard table and last ``manifest.json``, each atomically
    (temp, fsync, rename, directory fsync).

    Raises
    ------
    CorpusFormatError
        A shard file is missing or has the wrong size, or the table of a parsed
        manifest cannot be reproduced from its entries.
    """
    path = os.fspath(directory)
    for entry in manifest.shards:
        for kind in SHARD_FILES:
            file_path = os.path.join(path, entry.file_name(kind))
            try:
                size = os.stat(file_path).st_size
            except OSError as exc:
                raise CorpusFormatError(f"{file_path}: shard file missing ({exc}).") from exc
            if size != entry.file_bytes(kind):
                raise CorpusFormatError(
                    f"{file_path}: {size} bytes on disk, entry says {entry.file_bytes(kind)}."
                )
    if manifest.shard_table is not None:
        table = manifest.table_bytes
        if table is None:  # a parsed manifest (e.g. copied): the same entries, re-packed
            table = pack_shard_table(manifest.shards, manifest.dtype)
            if hashlib.sha256(table).hexdigest() != manifest.shard_table.sha256:
                raise CorpusFormatError(
                    f"{manifest.shard_table.file}: re-packing the shard table does not "
                    "reproduce the manifest's `sha256` (not a table this writer made)."
                )
        atomic_write_bytes(os.path.join(path, manifest.shard_table.file), table)
    atomic_write_bytes(os.path.join(path, MANIFEST_NAME), manifest.to_json())


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
    manifest = Manifest.build(shards, dtype=dtype, vocab_size=vocab_size, metadata=metadata)
    write_manifest(directory, manifest)
    return manifest.to_dict()
