"""Read-ahead hints: the documents behind the coming batches, a window at a time.

Prefetch hints cover :data:`HINT_BATCHES` batches per call, issued while at least half
of the previous window is still ahead: one call (and one vectorised pass in the
corpus) per window instead of one per batch, and every document is hinted once. A row
plan picks one of the two walks below: contiguous batches (the per-rank layout) are one
slice of the layout per window; batches that are one row range each (the global
layout) are located many windows at a time.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

from mixle.data._packing import RowLayout

__all__ = ["HINT_BATCHES", "contiguous_windows", "ranged_windows"]

HINT_BATCHES = 32
# Ranged hint windows are located up to this many at a time (one vectorised pass), as
# long as a pass stays under about this many documents.
_HINT_CHUNK = 16
_HINT_CHUNK_DOCUMENTS = 1 << 16


def contiguous_windows(
    layout: RowLayout, first_rows: range, block: int, span: int
) -> Iterator[np.ndarray]:
    """Windows of batches whose rows follow each other (``span`` tokens per batch).

    ``first_rows`` are the batches' first rows, in order; the windows start with its
    second batch (the first is read at once). The document shared with the batch
    before a window (hinted already, or being read) is left out.
    """
    first_rows = first_rows[1:]
    for at in range(0, len(first_rows), HINT_BATCHES):
        window = first_rows[at : at + HINT_BATCHES]
        end = min(window[-1] * block + span + 1, layout.stream_tokens)
        local = layout.segment(window[0] * block, end)
        low, high = local.documents_between(window[0] * block, end)
        yield local.indices[low + 1 : high]


def ranged_windows(
    layout: RowLayout, first_rows: range, block: int, span: int
) -> Iterator[np.ndarray]:
    """Windows of batches that are one row range each (``span`` tokens per batch).

    Up to :data:`_HINT_CHUNK` windows are located with one ``searchsorted`` pair in
    the layout's segment of their rows and gathered in one vectorised pass (which costs
    about the same for 32 batches as for 512): the first pass covers one window (a
    restart's first batch waits for it), later ones double while they stay under
    :data:`_HINT_CHUNK_DOCUMENTS` documents. Each document is hinted once over all the
    windows, in read order.
    """
    first_rows = first_rows[1:]
    previous = 0  # documents of the stream hinted so far (or passed)
    at, windows = 0, 1  # the first pass locates one window: a restart waits for it
    while at < len(first_rows):
        rows = first_rows[at : at + windows * HINT_BATCHES]
        at += len(rows)
        begins = np.arange(rows.start, rows.stop, rows.step, dtype=np.int64) * block
        local = layout.segment(
            int(begins[0]), min(int(begins[-1]) + span + 1, layout.stream_tokens)
        )
        count = len(local.indices)
        lows = np.maximum(local.starts.searchsorted(begins, side="right") - 1, 0)
        highs = np.minimum(local.starts.searchsorted(begins + span + 1, side="left"), count)
        # A document shared by consecutive ranges is hinted with the first.
        lows[0] = max(int(lows[0]), previous - local.first)
        lows[1:] = np.maximum(lows[1:], highs[:-1])
        counts = np.maximum(highs - lows, 0)
        ends = np.cumsum(counts)
        # Positions lows[k] .. highs[k] - 1 for every k, in one pass.
        chunk = local.indices.take(
            np.arange(int(ends[-1])) - np.repeat(ends - counts - lows, counts)
        )
        bounds = [0, *ends[HINT_BATCHES - 1 :: HINT_BATCHES].tolist()]
        if len(rows) % HINT_BATCHES:
            bounds.append(int(ends[-1]))
        for first, stop in itertools.pairwise(bounds):
            yield chunk[first:stop]
        previous = max(previous, int(highs[-1]) + local.first)
        # Grow the passes while they stay small (short documents fill them fast).
        fits = _HINT_CHUNK_DOCUMENTS * windows // max(chunk.shape[0], 1)
        windows = max(1, min(2 * windows, _HINT_CHUNK, fits))
