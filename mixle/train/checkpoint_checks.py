"""Validation of a checkpoint's contents before anything is restored from it.

Checksums only say that files are as ``meta.json`` lists them; whoever can edit a
checkpoint can also re-seal it. So, beyond the digests, every value the trainer
restores is checked for shape and type here, and each failure is a
:class:`~mixle.errors.CheckpointError` naming the file and the field (the CLI
exits 2 with one line), never a ``TypeError`` or ``AttributeError`` from deep in
the resume code. ``meta.json`` itself is covered by ``meta_sha256``, a SHA-256
over its canonical JSON without that key, and is parsed with bounded depth and
number size (:mod:`mixle._safe_json`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from mixle._file_checks import read_regular
from mixle._safe_json import loads_bounded
from mixle.errors import CheckpointError

__all__ = [
    "META_DIGEST_KEY",
    "meta_sha256",
    "read_json",
    "require_integer",
    "validate_meta",
    "validate_tensors",
]

#: The key of ``meta.json`` holding the SHA-256 of the rest of the document.
META_DIGEST_KEY = "meta_sha256"
#: Largest JSON file of a checkpoint that is read (metadata and rank states are small).
_MAX_JSON_BYTES = 64 << 20
_HEX64 = re.compile(r"[0-9a-f]{64}")


def meta_sha256(document: Mapping[str, Any]) -> str:
    """The SHA-256 of ``document`` without :data:`META_DIGEST_KEY`, over canonical JSON."""
    body = {key: value for key, value in document.items() if key != META_DIGEST_KEY}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_json(path: str) -> Any:
    """Read a checkpoint JSON file: a regular file, bounded size, depth and numbers.

    Raises
    ------
    CheckpointError
        The file is missing, not a regular file, too large or not bounded JSON.
    """
    return loads_bounded(
        read_regular(path, CheckpointError, _MAX_JSON_BYTES), path, CheckpointError
    )


def require_integer(meta: Any, key: str, where: str, minimum: int) -> int:
    """Return the integer ``meta[key]`` (``key`` may be dotted: ``config.batch_size``).

    Raises
    ------
    CheckpointError
        A level is not an object, the field is missing, not an integer, or below
        ``minimum``; the message names ``where`` and the field.
    """
    value = meta
    for part in key.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, int):
        raise CheckpointError(f"{where} has no integer `{key}`.")
    if value < minimum:
        raise CheckpointError(f"{where}: `{key}` must be at least {minimum}. Got {value}.")
    return value


def validate_meta(meta: dict[str, Any], where: str) -> None:
    """Check the fields of a parsed ``meta.json`` (format and version already checked).

    Raises
    ------
    CheckpointError
        ``step``/``world_size`` are not integers in range, ``files`` is not a map of
        names to SHA-256 digests, ``meta_sha256`` is missing or does not match (the
        metadata was edited), or ``progress``/``identity``/``config`` are not objects.
    """
    require_integer(meta, "step", where, 0)
    require_integer(meta, "world_size", where, 1)
    files = meta.get("files")
    if not isinstance(files, dict):
        raise CheckpointError(f"{where} lists no files.")
    for name, digest in files.items():
        if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
            raise CheckpointError(f"{where}: the digest of {name!r} is not a SHA-256 hex string.")
    recorded = meta.get(META_DIGEST_KEY)
    if recorded != meta_sha256(meta):
        raise CheckpointError(
            f"{where}: `{META_DIGEST_KEY}` does not match its content "
            f"({'missing' if recorded is None else 'edited or corrupt'})."
        )
    for key in ("identity", "config", "progress"):
        if key in meta and not isinstance(meta[key], dict):
            raise CheckpointError(
                f"{where}: `{key}` must be a JSON object. Got {type(meta[key]).__name__}."
            )
    progress = meta.get("progress", {})
    if "total_tokens" in progress:
        require_integer(progress, "total_tokens", f"{where} `progress`", 0)


def validate_tensors(tensors: Any, where: str) -> dict[str, Any]:
    """Check a weights-only loaded ``model.pt``: ``model`` maps names to tensors and
    ``optimizer`` is a state dict (or ``None``); return it.

    Raises
    ------
    CheckpointError
        Anything else (a bare tensor, a list, a non-tensor weight).
    """
    if not isinstance(tensors, dict) or not {"model", "optimizer"} <= set(tensors):
        raise CheckpointError(f"{where} must hold 'model' and 'optimizer' state dicts.")
    import torch  # here, not at the top: reading metadata (``mixle show``) needs no torch

    model = tensors["model"]
    if not isinstance(model, dict):
        raise CheckpointError(f"{where}: 'model' must be a state dict. Got {type(model).__name__}.")
    for name, value in model.items():
        if not isinstance(name, str) or not isinstance(value, torch.Tensor):
            raise CheckpointError(
                f"{where}: 'model' entry {name!r} must map a name to a tensor. "
                f"Got {type(value).__name__}."
            )
    optimizer = tensors["optimizer"]
    if optimizer is not None and not isinstance(optimizer, dict):
        raise CheckpointError(
            f"{where}: 'optimizer' must be a state dict or None. Got {type(optimizer).__name__}."
        )
    return tensors
