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

from mixle._gather import ramp_runs, zero_gaps
from mixle.data._best_fit import MIN_BLOCK, RowPieces, best_fit_rows, row_budget
from mixle.data._documents import DocumentSource
from mixle.data._order_windows import OrderWindows, index_ranges
from mixle.data._permutation import FeistelPermutation
from mixle.errors import ArgumentError

__all__ = [
    "ROWS_DOMAIN",
    "BestFitRows",
    "PackedPieces",
    "check_best_fit_block",
    "epoch_row_bound",
]

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


def epoch_row_bound(slots: int, windows: int, block: int) -> int:
    """The most rows ``windows`` windows holding ``slots`` token slots in all can be
    budgeted, however the slots are split among them: ``sum ceil(s_k / (block - 2))``
    is at most ``(slots + windows * (block - 3)) // (block - 2)``."""
    return (slots + windows * (block - 3)) // (block - 2) if slots > 0 else 0


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
        ``(count, block)`` int64 per input slot (``-1`` and ``0`` on padding), or
        ``None`` when not asked for.
    real
        ``mask.sum()``: the trained targets.
    trained_before
        ``count + 1`` int64: the trained targets of rows ``[0, j)`` (``trained_before[-1]
        == real``), from the windows' own counts (no pass over the mask).
    """

    rows: np.ndarray
    mask: np.ndarray
    document_ids: np.ndarray | None
    position_ids: np.ndarray | None
    real: int
    trained_before: np.ndarray


@dataclass(frozen=True, slots=True)
class _Window:
    """A packed window, its rows in the order they are read (``pieces``'s row ``j`` is
    the window's output row ``j``, after the shuffle), laid out for :meth:`BestFitRows.read`.

    ``row_starts[j] : row_starts[j + 1]`` are the pieces of output row ``j``, which
    fill its slots from 0; ``trained_before[j]`` are the targets rows ``[0, j)`` train.
    Per piece: the global document id, its token range ``[begin, token_end)``, its
    ``length`` in slots (its document's boundary included when ``boundary``), its first
    and last slot in the window (``j * (block + 1) + at``). ``pad_slots[pad_starts[j] :
    pad_starts[j + 1]]`` are row ``j``'s padding slots.
    """

    pieces: RowPieces
    row_starts: np.ndarray
    trained_before: np.ndarray
    ids: np.ndarray
    begin: np.ndarray
    token_end: np.ndarray
    length: np.ndarray
    boundary: np.ndarray
    slot: np.ndarray
    last_slot: np.ndarray
    pad_starts: np.ndarray
    pad_slots: np.ndarray

    @classmethod
    def of(
        cls, documents: np.ndarray, lengths: np.ndarray, pieces: RowPieces, capacity: int
    ) -> _Window:
        """The window of ``documents`` (of ``lengths``, without boundaries) whose rows,
        in the order they are read, are ``pieces``'s."""
        used = pieces.row_used()
        # A row trains one target fewer than each of its pieces' slots.
        trained_before = np.zeros(pieces.rows + 1, dtype=np.int64)
        np.cumsum(used - np.diff(pieces.row_starts), out=trained_before[1:])
        sizes = np.asarray(lengths, dtype=np.int64)[pieces.item]
        end = pieces.begin + pieces.length
        slot = pieces.row * capacity + pieces.at
        gaps = capacity - used
        pad_starts = np.zeros(pieces.rows + 1, dtype=np.int64)
        np.cumsum(gaps, out=pad_starts[1:])
        row_slots = np.arange(0, pieces.rows * capacity, capacity, dtype=np.int64)
        return cls(
            pieces,
            pieces.row_starts,
            trained_before,
            documents[pieces.item],
            pieces.begin,
            np.minimum(end, sizes),
            pieces.length,
            end > sizes,  # the piece ends with its document's boundary slot
            slot,
            slot + pieces.length - 1,
            pad_starts,
            index_ranges(row_slots + used, gaps),
        )


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
    epoch_rows
        The epoch's row count when it must not depend on the order (a mixture source's
        epochs all have one length): at least the windows' budgets, whose sum never
        exceeds :func:`epoch_row_bound`; the rows beyond the budgets go to the last
        window (they are padding unless its documents fill them). ``None``: the sum
        of the budgets.

    Raises
    ------
    ArgumentError
        ``block`` is too small, or ``epoch_rows`` is below the windows' budgets.
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
        epoch_rows: int | None = None,
    ) -> None:
        self.windows = windows
        self.block = check_best_fit_block(block)
        self.has_boundary = has_boundary
        self.seed, self.epoch, self.truncate = seed, epoch, truncate
        tokens, documents = windows.window_totals()
        slots = tokens + documents if has_boundary else tokens
        counts = np.where(slots > 0, -(-slots // (self.block - 2)), 0).astype(np.int64)
        if epoch_rows is not None and len(counts):
            extra = epoch_rows - int(counts.sum())
            if extra < 0:
                raise ArgumentError(
                    f"`epoch_rows` must be at least the windows' {int(counts.sum())} rows. "
                    f"Got {epoch_rows} instead."
                )
            counts[-1] += extra
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
        assert rows >= row_budget(int(slots.sum()), self.block)  # totals agree with the window
        shuffle = FeistelPermutation(rows, self.seed, self.epoch, domain=(k, ROWS_DOMAIN))(
            np.arange(rows, dtype=np.int64)
        )
        # Output row j is packed row shuffle[j].
        pieces = best_fit_rows(slots, self.block, rows, truncate=self.truncate, row_order=shuffle)
        packed = _Window.of(documents, lengths, pieces, self.block + 1)
        self._cache[k] = packed
        if len(self._cache) > _CACHED_WINDOWS:
            self._cache.popitem(last=False)
        return packed

    def windows_of_rows(self, first_row: int, count: int) -> range:
        """The windows that rows ``[first_row, first_row + count)`` lie in."""
        return range(*self._windows_between(first_row, first_row + count))

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
        with_ids: bool,
    ) -> PackedPieces:
        """Rows ``[first_row, first_row + count)``; rows past the epoch's end are padding.

        Reads only the documents of those rows, with one ``gather_into`` call.
        O(count x block) memory besides the packed windows.
        """
        capacity = self.block + 1
        size = count * capacity
        flat = np.empty(size, dtype=np.int64)
        # A slot trains when its target (the next slot) is in its piece: every slot of
        # a piece but its last; padding does not.
        trained = np.ones(size, dtype=np.bool_)
        fill = 0 if boundary_id is None else boundary_id
        # Per piece of the rows asked for: its document, token range and slots.
        parts: list[tuple[np.ndarray, ...]] = []
        real = 0
        # Trained targets before each row; rows past the epoch's end stay at the total.
        trained_before = np.zeros(count + 1, dtype=np.int64)
        low, high = self._windows_between(first_row, first_row + count)
        for k in range(low, high):
            window = self.window(k)
            start, stop = int(self.row_starts[k]), int(self.row_starts[k + 1])
            first, last = max(first_row, start) - start, min(first_row + count, stop) - start
            chosen = slice(int(window.row_starts[first]), int(window.row_starts[last]))
            here = max(first_row, start) - first_row  # the window's first row in the batch
            trained_before[here + 1 : here + 1 + last - first] = (
                window.trained_before[first + 1 : last + 1] - window.trained_before[first] + real
            )
            real += int(window.trained_before[last] - window.trained_before[first])
            shift = (start - first_row) * capacity  # window slots -> batch slots
            padding = window.pad_slots[window.pad_starts[first] : window.pad_starts[last]] + shift
            flat[padding] = pad_id
            trained[padding] = False
            last_slot = window.last_slot[chosen] + shift
            trained[last_slot] = False
            if self.has_boundary:
                flat[last_slot[window.boundary[chosen]]] = fill
            parts.append(
                (
                    window.ids[chosen],
                    window.begin[chosen],
                    window.token_end[chosen],
                    window.length[chosen],
                    window.slot[chosen] + shift,
                )
            )
        past = max(first_row + count - max(first_row, self.rows), 0)  # rows past the end
        if past:
            flat[size - past * capacity :] = pad_id
            trained[size - past * capacity :] = False
        if parts:
            ids, begin, token_end, length, at = (
                parts[0] if len(parts) == 1 else map(np.concatenate, zip(*parts, strict=True))
            )
            documents.gather_into(ids, begin, token_end, flat, at)
        else:
            ids = begin = length = at = np.empty(0, dtype=np.int64)
        mask = trained.reshape(count, capacity)[:, :-1]
        document_ids = position_ids = None
        if with_ids:
            document_ids, position_ids = _Slots(ids, begin, length, at, size).documents()
            document_ids = document_ids.reshape(count, capacity)[:, :-1]
            position_ids = position_ids.reshape(count, capacity)[:, :-1]
        rows = flat.reshape(count, capacity)
        done = min(max(self.rows - first_row, 0), count)  # rows before the epoch's end
        trained_before[done + 1 :] = real
        return PackedPieces(rows, mask, document_ids, position_ids, real, trained_before)


class _Slots:
    """Per-slot views of pieces that lie at increasing, disjoint slots ``at`` of a
    buffer of ``size`` slots, built as runs (see :meth:`documents`)."""

    def __init__(
        self, ids: np.ndarray, begin: np.ndarray, length: np.ndarray, at: np.ndarray, size: int
    ) -> None:
        self.ids, self.begin, self.length, self.at, self.size = ids, begin, length, at, size
        ends = at + length
        # Padding slots before each piece, and after the last one.
        self.gaps = at.copy()
        self.gaps[1:] -= ends[:-1]
        self.tail = size - (int(ends[-1]) if ends.size else 0)

    def _interleaved(self, last: int, gap: np.ndarray | int, piece: np.ndarray) -> np.ndarray:
        """Per run (each piece's gap, then the piece; then the tail): ``gap``, ``piece``
        interleaved piece by piece, then ``last``."""
        values = np.empty(2 * self.ids.shape[0] + 1, dtype=np.int64)
        values[0:-1:2] = gap
        values[1::2] = piece
        values[-1] = last
        return values

    def documents(self) -> tuple[np.ndarray, np.ndarray]:
        """Each slot's document id and position in it (``-1`` and ``0`` on padding): one
        run table for both, ids by ``np.repeat``, positions by
        :func:`~mixle._gather.ramp_runs` (a piece at slot ``at`` from document position
        ``begin`` has offset ``begin - at``) with the gaps zeroed after."""
        runs = self._interleaved(self.tail, self.gaps, self.length)
        document_ids = np.repeat(self._interleaved(-1, -1, self.ids), runs)
        offsets = self._interleaved(0, 0, self.begin - self.at)
        position_ids = ramp_runs(offsets, runs, self.size)
        zero_gaps(position_ids, self.gaps, self.at, self.tail)
        return document_ids, position_ids
