"""Best-fit decreasing into a fixed number of rows: the kernel of ``packing="best_fit"``.

A window's documents (each one *item* of ``length`` tokens, its boundary token
included) are placed into exactly ``rows`` rows of ``capacity = block + 1`` token slots:

1. A document longer than a row is cut first into full rows at stride ``block``
   (pieces ``[i * block, i * block + block + 1)``: consecutive pieces share one token,
   so every adjacent pair of the document stays a target exactly once); its remainder
   (``length - n * block`` tokens, when at least 2) becomes an item. With
   ``truncate=True`` it is cut to its first ``capacity`` tokens instead (the dropped
   tokens are counted).
2. Items, longest first (ties in window order), go to the row with the *least* free
   space that still holds them (best fit). Free space is tracked per value in
   ``[0, capacity]``: a segment tree over those values finds the smallest nonempty
   value ``>= length`` in ``O(log block)``, and each value keeps its rows in a stack
   (the row taken is the one pushed last; rows start pushed in descending order, so
   ties go to the lowest row). ``O(n log block)`` per window.
3. An item that fits no row is split into the free space: the row with the most free
   space takes a piece that fills it, the rest (sharing one token with that piece)
   goes on — best fit again when it fits, else the next largest hole. Such a document
   is counted as cut.

The row budget is chosen by the caller from the window's token total alone
(:func:`row_budget`), so every window's row count is known before it is planned. Step
3 never runs out of space under that budget: it fails only if every row has at most one
free slot, i.e. ``rows * block`` slots are used, while the slots used are at most the
tokens plus one shared token per piece that does not start its document, and such
pieces number at most ``2 * rows`` (each fills a row, or ends a document whose earlier
piece filled one). ``rows * (block - 2) >= tokens`` therefore suffices.

Two interchangeable implementations of step 2-3 give identical results: the loop below
run on Python lists (always available), or the same loop compiled by numba when the
gather backend is ``"numba"`` (:func:`mixle._gather.set_gather_backend`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle._gather import gather_backend

__all__ = ["MIN_BLOCK", "RowPieces", "best_fit_rows", "row_budget"]

#: The smallest ``block`` best-fit packs into (:func:`row_budget` divides by ``block - 2``).
MIN_BLOCK = 3


def row_budget(tokens: int, block: int) -> int:
    """Rows a window of ``tokens`` slots (boundary tokens included) is packed into:
    ``ceil(tokens / (block - 2))``, enough for any mix of lengths (module notes)."""
    return -(-int(tokens) // (block - 2)) if tokens > 0 else 0


@dataclass(frozen=True, slots=True)
class RowPieces:
    """Where every piece of a window's documents lies in its rows.

    Pieces are sorted by ``(row, at)``; ``row_starts[r] : row_starts[r + 1]`` are the
    pieces of row ``r``, which fill its slots from 0 without gaps. Piece ``k`` is tokens ``[begin[k], begin[k] + length[k])`` of
    the window's document ``item[k]`` (a position in the window), written to slots
    ``[at[k], at[k] + length[k])`` of its row.

    Attributes
    ----------
    row_starts
        ``rows + 1`` int64 offsets into the piece arrays.
    row, item, begin, length, at
        int64 per piece (``row``: the piece's row).
    cut_documents
        Documents in more than one piece (longer than a row, or split into free space).
    truncated_documents, truncated_tokens
        With ``truncate=True``: documents cut to a row and the tokens dropped.
    """

    row_starts: np.ndarray
    row: np.ndarray
    item: np.ndarray
    begin: np.ndarray
    length: np.ndarray
    at: np.ndarray
    cut_documents: int
    truncated_documents: int
    truncated_tokens: int

    @property
    def rows(self) -> int:
        return int(self.row_starts.shape[0]) - 1

    def row_used(self) -> np.ndarray:
        """Slots each row's pieces fill (int64 per row): they lie at ``[0, used)``."""
        filled = np.zeros(self.length.shape[0] + 1, dtype=np.int64)
        np.cumsum(self.length, out=filled[1:])
        return np.diff(filled[self.row_starts])

    @property
    def used_slots(self) -> int:
        """Token slots holding document tokens (the rest of ``rows * (block + 1)`` is padding)."""
        return int(self.length.sum())


def _place_items(
    sizes: Any,
    items: Any,
    begins: Any,
    rows: int,
    full_rows: int,
    capacity: int,
    out: Any,
    start: int,
    tree: Any,
    head: Any,
    below: Any,
    fill: Any,
) -> int:
    """Steps 2-3 of the module notes over lists or arrays (numba compiles it as is).

    ``sizes, items, begins``: the items, longest first. ``out`` is ``(5, n)``: row,
    slot, item, begin and length of each piece, written from column ``start`` on. Rows
    ``[0, full_rows)`` are full. Returns the column after the last piece written, or
    ``-1 - k`` when item ``k`` found no room (impossible under :func:`row_budget`).
    """
    leaves = (len(tree)) // 2
    for row in range(rows - 1, full_rows - 1, -1):  # pushed descending: lowest row on top
        below[row] = head[capacity]
        head[capacity] = row
    node = leaves + capacity
    while node >= 1:
        tree[node] += rows - full_rows
        node //= 2
    written = start
    for k in range(len(sizes)):
        begin = begins[k]
        end = begin + sizes[k]
        while end - begin > 0:
            want = end - begin
            # The smallest free-space value >= want with a row, else the largest one.
            node = leaves + want
            if tree[node] == 0:
                while node > 1:
                    if node % 2 == 0 and tree[node + 1] > 0:
                        node += 1
                        break
                    node //= 2
                if node == 1:  # no row holds `want`: descend to the largest value
                    if tree[1] == 0:
                        return -1 - k
                    while node < leaves:
                        node = 2 * node + 1 if tree[2 * node + 1] > 0 else 2 * node
                else:
                    while node < leaves:
                        node = 2 * node if tree[2 * node] > 0 else 2 * node + 1
            free = node - leaves
            if free < 2 and free < want:
                return -1 - k
            row = head[free]
            head[free] = below[row]
            take = want if want <= free else free
            out[0][written] = row
            out[1][written] = fill[row]
            out[2][written] = items[k]
            out[3][written] = begin
            out[4][written] = take
            written += 1
            fill[row] += take
            left = free - take
            below[row] = head[left]
            head[left] = row
            node = leaves + free
            while node >= 1:
                tree[node] -= 1
                node //= 2
            node = leaves + left
            while node >= 1:
                tree[node] += 1
                node //= 2
            # A piece that stops short of the end shares its last token with the next.
            begin = end if take == want else begin + take - 1
    return written


_COMPILED: Callable[..., int] | None = None


def _kernel() -> Callable[..., int] | None:
    """The compiled :func:`_place_items` when the gather backend is numba, else ``None``."""
    global _COMPILED
    if gather_backend() != "numba":
        return None
    if _COMPILED is None:
        import numba

        _COMPILED = numba.njit(cache=True, nogil=True)(_place_items)
    return _COMPILED


def best_fit_rows(
    lengths: np.ndarray,
    block: int,
    rows: int,
    *,
    truncate: bool = False,
    row_order: np.ndarray | None = None,
) -> RowPieces:
    """Pack items of ``lengths`` tokens (a window's documents, in window order) into
    exactly ``rows`` rows of ``block + 1`` slots (see the module notes).

    With ``row_order`` (a permutation of ``range(rows)``), row ``j`` of the result is
    packed row ``row_order[j]`` (the rows handed out shuffled, with no second pass).

    ``block >= MIN_BLOCK`` and ``rows >= row_budget(lengths.sum(), block)`` are the
    caller's to check (a smaller ``rows`` may raise). Deterministic: a pure function of
    its inputs, the same with either backend. Empty documents get no piece.

    Raises
    ------
    RuntimeError
        ``rows`` is too small for the items (never under :func:`row_budget`).
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    capacity = block + 1
    long = lengths > capacity
    if truncate:
        truncated_tokens = int((lengths[long] - capacity).sum())
        lengths = np.minimum(lengths, capacity)
        full_count = np.zeros(lengths.shape[0], dtype=np.int64)
    else:
        truncated_tokens = 0
        full_count = np.where(long, (lengths - 1) // block, 0)
    # Full rows of long documents: rows [0, full_rows), in window order.
    full_rows = int(full_count.sum())
    if full_rows > rows:
        raise RuntimeError(f"{full_rows} full rows do not fit a budget of {rows} rows.")
    full_items = np.repeat(np.arange(lengths.shape[0], dtype=np.int64), full_count)
    full_first = np.cumsum(full_count) - full_count
    full_begins = (np.arange(full_rows, dtype=np.int64) - np.repeat(full_first, full_count)) * block
    # The items: whole documents, and the remainders (>= 2 tokens) of long ones.
    remainder = lengths - full_count * block
    keep = (remainder >= 2) | ((full_count == 0) & (remainder > 0))
    item_ids = np.flatnonzero(keep)
    sizes = remainder[item_ids]
    begins = (full_count * block)[item_ids]
    # Longest first, ties in window order: sizes are <= capacity, so a 16-bit key (a
    # radix sort) when it fits.
    order = np.argsort(_narrow(capacity - sizes, capacity), kind="stable")
    sizes, item_ids, begins = sizes[order], item_ids[order], begins[order]
    leaves = 1 << capacity.bit_length()  # > capacity: every value in [0, capacity] is a leaf
    bound = sizes.shape[0] + 2 * rows + 1
    # Columns: row, slot, item, begin, length; the full rows' pieces first.
    out = np.empty((5, full_rows + bound), dtype=np.int64)
    out[0, :full_rows] = np.arange(full_rows)
    out[1, :full_rows] = 0
    out[2, :full_rows] = full_items
    out[3, :full_rows] = full_begins
    out[4, :full_rows] = capacity
    kernel = _kernel()
    if kernel is not None:
        written = kernel(
            sizes,
            item_ids,
            begins,
            rows,
            full_rows,
            capacity,
            out,
            full_rows,
            np.zeros(2 * leaves, np.int64),
            np.full(capacity + 1, -1, np.int64),
            np.empty(rows, np.int64),
            np.zeros(rows, np.int64),
        )
    else:
        lists = [column.tolist() for column in out[:, :full_rows]]
        for column in lists:
            column.extend([0] * bound)
        written = _place_items(
            sizes.tolist(),
            item_ids.tolist(),
            begins.tolist(),
            rows,
            full_rows,
            capacity,
            lists,
            full_rows,
            [0] * (2 * leaves),
            [-1] * (capacity + 1),
            [0] * rows,
            [0] * rows,
        )
        if written >= 0:
            out[:, full_rows:written] = [column[full_rows:written] for column in lists]
    if written < 0:
        raise RuntimeError(f"document {int(item_ids[-1 - written])} fits none of {rows} rows.")
    pieces = out[:, :written]
    key = pieces[0]
    if row_order is not None:
        position = np.empty(rows, dtype=np.int64)
        position[row_order] = np.arange(rows, dtype=np.int64)
        key = position[key]
    # By row, then slot: a row's pieces are written at increasing slots (full rows hold
    # one piece each), so a stable sort by row keeps each row's pieces in slot order.
    by_row = _stable_order(key, rows)
    row = key[by_row]
    _, at, item, begin, length = pieces[:, by_row]
    row_starts = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=rows), out=row_starts[1:])
    return RowPieces(
        row_starts,
        row,
        item,
        begin,
        length,
        at,
        cut_documents=_cut_documents(item, lengths.shape[0]),
        truncated_documents=int(np.count_nonzero(long)) if truncate else 0,
        truncated_tokens=truncated_tokens,
    )


def _narrow(keys: np.ndarray, bound: int) -> np.ndarray:
    """``keys`` (in ``[0, bound]``) as uint16 when they fit (numpy sorts 16-bit keys by
    radix: O(n)), else as they are."""
    return keys.astype(np.uint16) if bound < 1 << 16 else keys


def _stable_order(keys: np.ndarray, bound: int) -> np.ndarray:
    """The stable argsort of nonnegative ``keys`` below ``bound``: two 16-bit radix
    passes (low half, then high half) when ``bound <= 2**32``."""
    if bound > 1 << 32:
        return np.argsort(keys, kind="stable")
    order = np.argsort((keys & 0xFFFF).astype(np.uint16), kind="stable")
    if bound <= 1 << 16:
        return order
    high = (keys[order] >> 16).astype(np.uint16)
    return order[np.argsort(high, kind="stable")]


def _cut_documents(item: np.ndarray, count: int) -> int:
    """Documents that have more than one piece."""
    return int(np.count_nonzero(np.bincount(item, minlength=count) > 1))
