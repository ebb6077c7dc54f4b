"""Check a zarr array's metadata against the manifest before decoding anything.

A zarr ``zarr.json`` is as untrusted as the rest of a downloaded corpus: a forged
``shape`` or chunk shape makes the decoder allocate whatever it says (a 5 KB
corpus claiming 2**33 ids would exhaust the machine). The manifest, checked
against its own SHA-256, says how many ids each array holds, so every size the
decoder will allocate is checked against that count first.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mixle._safe_json import loads_bounded
from mixle.errors import CorpusFormatError

__all__ = ["check_array_metadata"]


def _shape(value: Any, what: str, where: str) -> int:
    if (
        not isinstance(value, list)
        or len(value) != 1
        or isinstance(value[0], bool)
        or not isinstance(value[0], int)
    ):
        raise CorpusFormatError(f"{where}: {what} must be a list of one integer. Got {value!r}.")
    return int(value[0])


def check_array_metadata(raw: bytes, where: str, length: int, dtype: str) -> None:
    """Check the array metadata ``raw`` (read from ``where``) describes ``length`` ids of
    ``dtype`` with chunks no larger than the array (at least one element).

    Raises
    ------
    CorpusFormatError
        Not bounded JSON, not a 1-D zarr v3 array of ``length`` ``dtype`` ids, or a
        chunk shape outside ``[1, max(length, 1)]``.
    """
    meta = loads_bounded(raw, where, CorpusFormatError)
    if (
        not isinstance(meta, dict)
        or meta.get("zarr_format") != 3
        or meta.get("node_type") != "array"
    ):
        raise CorpusFormatError(f"{where}: not zarr v3 array metadata.")
    shape = _shape(meta.get("shape"), "`shape`", where)
    if shape != length:
        raise CorpusFormatError(
            f"{where}: `shape` is [{shape}], the manifest says {length} elements "
            "(forged or mismatched metadata; nothing was decoded)."
        )
    if meta.get("data_type") != np.dtype(dtype).name:
        raise CorpusFormatError(
            f"{where}: `data_type` is {meta.get('data_type')!r}, the manifest says {dtype}."
        )
    bound = max(length, 1)
    grid = meta.get("chunk_grid")
    config = grid.get("configuration") if isinstance(grid, dict) else None
    outer = _shape(
        config.get("chunk_shape") if isinstance(config, dict) else None,
        "`chunk_grid` chunk_shape",
        where,
    )
    sizes = [outer]
    codecs = meta.get("codecs")
    if not isinstance(codecs, list):
        raise CorpusFormatError(f"{where}: `codecs` must be a list.")
    for codec in codecs:
        inner = codec.get("configuration") if isinstance(codec, dict) else None
        if isinstance(inner, dict) and "chunk_shape" in inner:
            sizes.append(_shape(inner["chunk_shape"], "sharding chunk_shape", where))
    # The outer chunk may round the array up to a whole number of inner chunks.
    limit = 2 * bound
    for size in sizes:
        if not 1 <= size <= limit:
            raise CorpusFormatError(
                f"{where}: chunk shape [{size}] must lie in [1, {limit}] for an array of "
                f"{length} elements (forged metadata; nothing was decoded)."
            )
