"""Best-fit rows of an epoch: each order window packed on its own, row counts known up front.

An epoch's order comes cut into windows (:class:`~mixle.data._order_windows.OrderWindows`)
whose token and document totals are known before any window is read. Window ``k`` is
packed into exactly ``rows_k = row_budget(slots_k, block)`` rows (``slots_k`` its tokens,
plus one boundary token per document when the stream has a boundary id) by best-fit
decreasing (:mod:`~mixle.data._best_fit`); its rows are then shuffled by a keyed
bijection (:class:`~mixle.data._permutation.FeistelPermutation`, key ``(seed, epoch)``,
domain ``(k, ROWS_DOMAIN)``). The epoch's rows are windows ``0, 1, ...`` concatenated,
so global row ``r`` lies in the window found by one binary search over the cumulative
row counts (O(windows) memory) and only the windows a batch touches are packed (the
last few are kept).

A row holds ``block + 1`` token slots: whole documents where they fit, each followed by
its boundary token when ``boundary_id`` is set, then ``pad_id``. Its targets are the
next tokens *inside* each piece: the pair between two documents and every padding target
is masked, so a document of ``L`` tokens trains exactly its ``L - 1`` pairs (``L`` with
the boundary) in the epoch, however it was cut.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from mixle.data._best_fit import MIN_BLOCK, RowPieces, best_fit_rows, row_budget
from mixle.data._documents import DocumentSource
from mixle.data._order_windows import OrderWindows
from mixle.data._permutation import FeistelPermutation
from mixle.errors import ArgumentError

__all__ = [
    "DEFAULT_WINDOW_DOCUMENTS",
    "ROWS_DOMAIN",
    "BestFitRows",
    "PackedPieces",
    "check_best_fit_block",
]

#: Documents per best-fit window when the order does not say (the seed's permutation).
DEFAULT_WINDOW_DOCUMENTS = 16384
#: Key-domain word of the row shuffle inside a window ("mxrowsbf").
ROWS_DOMAIN = 0x6D78726F77736266
# Packed windows kept: a batch spans at most two windows, the next batch may start a third.
_CACHED_WINDOWS = 4


def check_best_fit_block(block: int) -> int:
    """``block`` when best-fit can pack into it (``>= MIN_BLOCK``).

    Raises
    ------
    ArgumentError
        ``block < MIN_BLOCK``.
    """
    if block < MIN_BLOCK:
        raise ArgumentError(
            f"`block` must be at least {MIN_BLOCK} with packing='best_fit'. Got {block} instead."
        )
    return block


@dataclass(frozen=True, slots=True)
class PackedPieces:
    """``count`` best-fit rows read by :meth:`BestFitRows.read`.

    Attributes
    ----------
    rows
        ``(count, block + 1)`` int64 token slots (``pad_id`` past the pieces).
    mask
        ``(count, block)`` bool: target ``rows[:, 1:][i, j]`` is trained (it follows
        ``rows[i, j]`` inside one piece).
    document_ids, position_ids
        ``(count, block)`` int64 per input slot (``-1`` and ``0`` on padding).
    """

    rows: np.ndarray
    mask: np.ndarray
    document_ids: np.ndarray
    position_ids: np.ndarray

    @property
    def real(self) -> int:
        return int(np.count_nonzero(self.mask))


@dataclass(frozen=True, slots=True)
class _Window:
    documents: np.ndarray  # global ids, window order
    lengths: np.ndarray  # token counts (no boundary)
    pieces: RowPieces
    shuffle: np.ndarray  # output row j of the window is packed row shuffle[j]


class BestFitRows:
    """The best-fit rows of one epoch (see the module docstring).

    Parameters
    ----------
    windows
        The epoch's order, by windows.
    block
        Input tokens per row (``>= MIN_BLOCK``).
    has_boundary
        Whether each document is followed by a boundary token.
    seed, epoch
        Key of the row shuffles.
    truncate
        Cut documents longer than a row to one row (counted) instead of splitting them.

    Raises
    ------
    ArgumentError
        ``block`` is too small.
    """

    def __init__(
        self,
        windows: OrderWindows,
        *,
        block: int,
        has_boundary: bool,
        seed: int,
        epoch: int,
        truncate: bool = False,
    ) -> None:
        self.windows = windows
        self.block = check_best_fit_block(block)
        self.has_boundary = has_boundary
        self.seed, self.epoch, self.truncate = seed, epoch, truncate
        tokens, documents = windows.window_totals()
        slots = tokens + documents if has_boundary else tokens
        counts = np.where(slots > 0, -(-slots // (self.block - 2)), 0).astype(np.int64)
        self.row_starts = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=self.row_starts[1:])
        self._cache: OrderedDict[int, _Window] = OrderedDict()

    @property
    def rows(self) -> int:
        """Rows of the epoch."""
        return int(self.row_starts[-1])

    def window_rows(self, k: int) -> int:
        """Rows of window ``k`` (known before it is packed)."""
        return int(self.row_starts[k + 1] - self.row_starts[k])

    def window(self, k: int) -> _Window:
        """Window ``k`` packed (kept among the last few)."""
        kept = self._cache.get(k)
        if kept is not None:
            self._cache.move_to_end(k)
            return kept
        documents, lengths = self.windows.window(k)
        slots = lengths + 1 if self.has_boundary else lengths
        rows = self.window_rows(k)
        assert rows == row_budget(int(slots.sum()), self.block)  # totals agree with the window
        pieces = best_fit_rows(slots, self.block, rows, truncate=self.truncate)
        shuffle = FeistelPermutation(rows, self.seed, self.epoch, domain=(k, ROWS_DOMAIN))(
            np.arange(rows, dtype=np.int64)
        )
        packed = _Window(documents, np.asarray(lengths, dtype=np.int64), pieces, shuffle)
        self._cache[k] = packed
        if len(self._cache) > _CACHED_WINDOWS:
            self._cache.popitem(last=False)
        return packed

    def window_documents_of_rows(self, first_row: int, count: int) -> np.ndarray:
        """The documents of the windows rows ``[first_row, first_row + count)`` lie in
        (read-ahead hints), without packing them."""
        low, high = self._windows_between(first_row, first_row + count)
        parts = [self.windows.window_documents(k) for k in range(low, high)]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    def _windows_between(self, begin: int, end: int) -> tuple[int, int]:
        end = min(end, self.rows)
        if end <= begin:
            return 0, 0
        low = int(self.row_starts.searchsorted(begin, side="right")) - 1
        high = int(self.row_starts.searchsorted(end, side="left"))
        return low, high

    def read(
        self,
        documents: DocumentSource,
        first_row: int,
        count: int,
        *,
        pad_id: int,
        boundary_id: int | None,
    ) -> PackedPieces:
        """Rows ``[first_row, first_row + count)``; rows past the epoch's end are padding.

        Reads only the documents of those rows, with one ``gather_into`` call.
        O(count x block) memory besides the packed windows.
        """
        capacity = self.block + 1
        # Per piece of the rows asked for: its document, token range and first slot.
        parts: list[tuple[np.ndarray, ...]] = []
        low, high = self._windows_between(first_row, first_row + count)
        for k in range(low, high):
            window = self.window(k)
            start, stop = int(self.row_starts[k]), int(self.row_starts[k + 1])
            local = np.arange(max(first_row, start), min(first_row + count, stop)) - start
            if not local.size:  # a window without rows
                continue
            packed = window.shuffle[local]
            row_starts = window.pieces.row_starts
            sizes = row_starts[packed + 1] - row_starts[packed]
            ends = np.cumsum(sizes)
            index = np.arange(int(ends[-1])) - np.repeat(ends - sizes - row_starts[packed], sizes)
            out_rows = np.repeat(local + start - first_row, sizes)
            item = window.pieces.item[index]
            parts.append(
                (
                    window.documents[item],
                    window.lengths[item],
                    window.pieces.begin[index],
                    window.pieces.length[index],
                    out_rows * capacity + window.pieces.at[index],
                )
            )
        flat = np.empty(count * capacity, dtype=np.int64)
        flat.fill(pad_id)
        piece_of = np.full(count * capacity, -1, dtype=np.int64)
        positions = np.zeros(count * capacity, dtype=np.int64)
        owner = np.full(count * capacity, -1, dtype=np.int64)
        if parts:
            # sizes: the documents' lengths without their boundary.
            ids, sizes, begin, length, at = (
                np.concatenate(column) for column in zip(*parts, strict=True)
            )
            # The tokens: a piece may end with the document's boundary slot.
            token_end = np.minimum(begin + length, sizes)
            documents.gather_into(ids, begin, token_end, flat, at)
            if self.has_boundary:
                with_boundary = begin + length > sizes
                fill = 0 if boundary_id is None else boundary_id
                flat[(at + length - 1)[with_boundary]] = fill
            # Per slot: the piece it belongs to, its document and position.
            covered = np.repeat(np.arange(ids.shape[0]), length)
            run_starts = np.cumsum(length) - length
            offset = np.arange(covered.shape[0]) - np.repeat(run_starts, length)
            where = at[covered] + offset
            piece_of[where] = covered
            owner[where] = ids[covered]
            positions[where] = begin[covered] + offset
        rows = flat.reshape(count, capacity)
        piece_rows = piece_of.reshape(count, capacity)
        mask = (piece_rows[:, :-1] == piece_rows[:, 1:]) & (piece_rows[:, :-1] >= 0)
        document_ids = owner.reshape(count, capacity)[:, :-1]
        position_ids = positions.reshape(count, capacity)[:, :-1]
        return PackedPieces(rows, mask, document_ids, position_ids)
