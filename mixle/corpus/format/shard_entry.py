"""One shard's manifest entry: its two file names, counts, byte sizes and checksums.

:class:`ShardEntry` is what a version-1 manifest lists per shard and what a version-2
shard table (:mod:`mixle.corpus.format.shard_table`) yields per shard on demand; the
manifest (:mod:`mixle.corpus.format.manifest`) is built from them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from mixle.corpus.format.spec import check_file_name, offsets_file_size
from mixle.errors import CorpusFormatError

__all__ = [
    "SHA256_HEX",
    "SHARD_FILES",
    "SHARD_KEYS",
    "SHARD_KEY_ORDER",
    "ShardEntry",
    "ShardFile",
    "check_keys",
    "count_field",
]

SHARD_KEY_ORDER = (
    "tokens",
    "offsets",
    "num_documents",
    "num_tokens",
    "tokens_bytes",
    "offsets_bytes",
    "tokens_sha256",
    "offsets_sha256",
)
SHARD_KEYS = frozenset(SHARD_KEY_ORDER)
ShardFile = Literal["tokens", "offsets"]
SHARD_FILES: tuple[ShardFile, ShardFile] = ("tokens", "offsets")
SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def count_field(entry: Mapping[str, Any], key: str, where: str) -> int:
    """``entry[key]`` if it is a nonnegative 64-bit JSON integer (not a bool), else a
    :class:`CorpusFormatError` naming ``where`` and ``key``."""
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise CorpusFormatError(
            f"{where}: `{key}` must be a nonnegative 64-bit integer. Got {value!r} instead."
        )
    return value


def check_keys(entry: Any, expected: frozenset[str], where: str) -> None:
    """Check ``entry`` is a JSON object with exactly the keys ``expected``; the error
    names ``where`` and the missing and unknown keys."""
    if not isinstance(entry, dict):
        raise CorpusFormatError(f"{where} must be a JSON object. Got {type(entry).__name__}.")
    keys = set(entry)
    if keys != expected:
        missing = sorted(expected - keys)
        unknown = sorted(keys - expected)
        raise CorpusFormatError(f"{where}: missing keys {missing}, unknown keys {unknown}.")


@dataclass(frozen=True, slots=True)
class ShardEntry:
    """One shard of a manifest: its two file names, counts, byte sizes and checksums.

    :meth:`from_dict` validates; the plain constructor does not (it is for values
    already checked). :meth:`to_dict` returns the JSON object in the key order it was
    read or written with, so re-serializing a manifest is byte-identical.
    """

    tokens: str
    offsets: str
    num_documents: int
    num_tokens: int
    tokens_bytes: int
    offsets_bytes: int
    tokens_sha256: str
    offsets_sha256: str
    key_order: tuple[str, ...] = field(default=SHARD_KEY_ORDER, compare=False, repr=False)

    @classmethod
    def from_dict(cls, entry: Any, dtype: str, where: str) -> ShardEntry:
        """Check one shard entry against the schema and the dtype; return it typed.

        Raises
        ------
        CorpusFormatError
            A key is missing or unknown, a count is not a nonnegative integer, a byte
            size disagrees with its count, or a checksum is not 64 lowercase hex digits.
        UnsafePathError
            A file name could resolve outside the corpus directory.
        """
        check_keys(entry, SHARD_KEYS, where)
        check_file_name(entry["tokens"], f"{where} `tokens`")
        check_file_name(entry["offsets"], f"{where} `offsets`")
        num_documents = count_field(entry, "num_documents", where)
        num_tokens = count_field(entry, "num_tokens", where)
        itemsize = np.dtype(dtype).itemsize
        if count_field(entry, "tokens_bytes", where) != num_tokens * itemsize:
            raise CorpusFormatError(
                f"{where}: `tokens_bytes` is {entry['tokens_bytes']}, expected "
                f"{num_tokens * itemsize} ({num_tokens} {dtype} tokens)."
            )
        if count_field(entry, "offsets_bytes", where) != offsets_file_size(num_documents):
            raise CorpusFormatError(
                f"{where}: `offsets_bytes` is {entry['offsets_bytes']}, expected "
                f"{offsets_file_size(num_documents)} ({num_documents} documents)."
            )
        for key in ("tokens_sha256", "offsets_sha256"):
            if not isinstance(entry[key], str) or not SHA256_HEX.fullmatch(entry[key]):
                raise CorpusFormatError(
                    f"{where}: `{key}` must be 64 lowercase hex digits. Got {entry[key]!r} instead."
                )
        # Every value is checked above; the key set is exactly the field names.
        return cls(**{key: entry[key] for key in SHARD_KEY_ORDER}, key_order=tuple(entry))

    def to_dict(self) -> dict[str, Any]:
        """The entry as a JSON object, keys in the order it was read or written with."""
        values = {
            "tokens": self.tokens,
            "offsets": self.offsets,
            "num_documents": self.num_documents,
            "num_tokens": self.num_tokens,
            "tokens_bytes": self.tokens_bytes,
            "offsets_bytes": self.offsets_bytes,
            "tokens_sha256": self.tokens_sha256,
            "offsets_sha256": self.offsets_sha256,
        }
        return {key: values[key] for key in self.key_order}

    @property
    def files(self) -> tuple[str, str]:
        """The shard's file names, ``(tokens, offsets)``."""
        return (self.tokens, self.offsets)

    def file_bytes(self, kind: ShardFile) -> int:
        """Byte size of the ``"tokens"`` or ``"offsets"`` file."""
        return self.tokens_bytes if kind == "tokens" else self.offsets_bytes

    def file_sha256(self, kind: ShardFile) -> str:
        """SHA-256 (hex) of the ``"tokens"`` or ``"offsets"`` file."""
        return self.tokens_sha256 if kind == "tokens" else self.offsets_sha256

    def file_name(self, kind: ShardFile) -> str:
        """Name of the ``"tokens"`` or ``"offsets"`` file."""
        return self.tokens if kind == "tokens" else self.offsets
