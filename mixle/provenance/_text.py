"""Token ids to text for ``mixle show``: raw bytes, or a Hugging Face ``tokenizer.json``.

:func:`load_decoder` turns ``"bytes"`` (every id is one byte, decoded as UTF-8 with
replacement characters, ids of 256 and above shown as ``<id>``) or the path of a
``tokenizer.json`` (read with the ``tokenizers`` package) into a :data:`Decoder`, a
function from a 1-D array of token ids to text. A file that is not a tokenizer is
refused when it is loaded, never when a row is decoded.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from mixle._optional import import_optional
from mixle.errors import ArgumentError, MissingBackendError

__all__ = ["BYTES", "Decoder", "load_decoder"]

#: The name of the byte-level decoder (one token id per byte).
BYTES = "bytes"

Decoder = Callable[[np.ndarray], str]
"""Token ids (1-D integer array) to text."""


def _decode_bytes(tokens: np.ndarray) -> str:
    values = np.asarray(tokens, dtype=np.int64)
    if values.size and (values.min() < 0 or values.max() > 255):
        return "".join(
            chr(v) if 32 <= v < 127 or v in (9, 10) else f"<{v}>" for v in values.tolist()
        )
    return values.astype(np.uint8).tobytes().decode("utf-8", errors="replace")


def load_decoder(tokenizer: str) -> Decoder:
    """The decoder named by ``tokenizer``: :data:`BYTES` or a ``tokenizer.json`` path.

    Raises
    ------
    ArgumentError
        ``tokenizer`` is not ``"bytes"`` and not a file the ``tokenizers`` package
        reads as a tokenizer (the file and the reason named).
    MissingBackendError
        ``tokenizers`` is not installed.
    """
    if not isinstance(tokenizer, str) or not tokenizer:
        raise ArgumentError(
            f"`tokenizer` must be {BYTES!r} or a tokenizer.json path. Got {tokenizer!r}."
        )
    if tokenizer == BYTES:
        return _decode_bytes
    if not os.path.isfile(tokenizer):
        raise ArgumentError(
            f"`tokenizer` must be {BYTES!r} or a tokenizer.json file. Got {tokenizer!r}, "
            "which is not a file."
        )
    tokenizers = import_optional("tokenizers", "tokenizers", error=MissingBackendError)
    try:
        loaded = tokenizers.Tokenizer.from_file(tokenizer)
    except Exception as exc:  # tokenizers raises its own Exception for any bad file
        message = " ".join(str(exc).split())[:200]
        raise ArgumentError(
            f"`tokenizer` {tokenizer} is not a tokenizer.json the tokenizers package reads: "
            f"{message}"
        ) from exc

    def decode(tokens: np.ndarray) -> str:
        ids = [int(v) for v in np.asarray(tokens).tolist()]
        return str(loaded.decode(ids, skip_special_tokens=False))

    return decode
