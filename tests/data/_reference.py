"""Naive, obviously-correct reference implementations the property tests compare to."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def reference_stream(
    documents: Sequence[np.ndarray], indices: Sequence[int], boundary_id: int | None
) -> list[int]:
    """The rank's token stream, built one Python int at a time."""
    stream: list[int] = []
    for position, index in enumerate(indices):
        if boundary_id is not None and position > 0:
            stream.append(boundary_id)
        stream.extend(int(token) for token in documents[index])
    return stream


def reference_rows(stream: list[int], block: int, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``block + 1`` at stride ``block`` and the loss mask, by definition."""
    rows: list[list[int]] = []
    mask: list[list[bool]] = []
    start = 0
    while start + 1 < len(stream):
        window = stream[start : start + block + 1]
        real_targets = len(window) - 1
        rows.append(window + [pad_id] * (block + 1 - len(window)))
        mask.append([True] * real_targets + [False] * (block - real_targets))
        start += block
    return (
        np.array(rows, dtype=np.int64).reshape(len(rows), block + 1),
        np.array(mask, dtype=np.bool_).reshape(len(rows), block),
    )
