"""A packed stream laid out window by window: O(windows) at plan time, a window per read.

:class:`WindowedLayout` is the :class:`~mixle.data._packing.RowLayout` of an
:class:`~mixle.data._order_windows.OrderWindows`: it knows where every window starts
in the stream (from the windows' token and document totals) and builds a window's
:class:`~mixle.data._packing.StreamLayout` (documents, lengths, stream starts) only
when a read touches it, keeping the last :data:`KEPT_WINDOWS`. A token range inside
one window is answered with that window's layout as it is; a range across windows
with the documents of it that overlap the range (from each window's layout, cut). The stream is the one a whole
:class:`~mixle.data._packing.StreamLayout` of the same order would describe, token for
token: boundaries follow every document but the stream's last.
"""

from __future__ import annotations

import numpy as np

from mixle.data._order_windows import OrderWindows
from mixle.data._packing import StreamLayout

__all__ = ["KEPT_WINDOWS", "WindowedLayout"]

#: Windows whose layouts a :class:`WindowedLayout` keeps (the read-ahead hints walk
#: ahead of the batch being read).
KEPT_WINDOWS = 4


class WindowedLayout:
    """The stream of ``windows``' order (see the module docstring).

    Parameters
    ----------
    windows
        The epoch's order, a window at a time.
    has_boundary
        Whether a boundary token follows every document but the stream's last.

    Notes
    -----
    Construction reads ``windows.window_totals()`` and keeps two int64 arrays of
    ``num_windows + 1``; each window layout kept is ``24`` bytes per document.
    """

    def __init__(self, windows: OrderWindows, has_boundary: bool) -> None:
        self.windows = windows
        self.has_boundary = has_boundary
        tokens, documents = windows.window_totals()
        pieces = tokens + documents if has_boundary else tokens
        self.window_starts = np.zeros(len(tokens) + 1, dtype=np.int64)
        np.cumsum(pieces, out=self.window_starts[1:])
        self.document_starts = np.zeros(len(tokens) + 1, dtype=np.int64)
        np.cumsum(documents, out=self.document_starts[1:])
        if has_boundary and self.document_starts[-1]:
            self.window_starts[-1] -= 1  # no boundary after the stream's last document
        self._kept: dict[int, StreamLayout] = {}
        # The window segment() returned last, with its stream range ``[first, stop)``:
        # the batches and hints of a window ask for it thousands of times in a row
        # (one tuple, replaced whole, so a prefetch thread sees a consistent one).
        self._last: tuple[int, int, StreamLayout] | None = None

    @property
    def stream_tokens(self) -> int:
        return int(self.window_starts[-1])

    @property
    def num_windows(self) -> int:
        return len(self.window_starts) - 1

    def window(self, k: int) -> StreamLayout:
        """Window ``k``'s layout: its documents with their stream starts (kept)."""
        layout = self._kept.get(k)
        if layout is not None:
            return layout
        documents, lengths = self.windows.window(k)
        # The stream starts in place, in the one array kept (no temporary of the
        # window's size: each is a page fault per 4 KiB in a fresh process).
        starts = np.empty(len(documents) + 1, dtype=np.int64)
        starts[0] = self.window_starts[k]
        pieces = starts[1:]
        if self.has_boundary:
            np.add(lengths, 1, out=pieces)
        else:
            pieces[...] = lengths
        if pieces.size:
            pieces[0] += starts[0]
        np.cumsum(pieces, out=pieces)
        if self.has_boundary and k == self.num_windows - 1 and len(documents):
            starts[-1] -= 1
        layout = StreamLayout(
            documents, lengths, starts, self.has_boundary, int(self.document_starts[k])
        )
        if len(self._kept) >= KEPT_WINDOWS:
            self._kept.pop(next(iter(self._kept)))
        self._kept[k] = layout
        return layout

    def segment(self, begin: int, end: int) -> StreamLayout:
        """A layout holding every document that stream tokens ``[begin, end)`` overlap:
        the window's own when the range lies in one window, else those documents only
        (an empty stream gives an empty layout)."""
        if not self.num_windows:
            empty = np.empty(0, dtype=np.int64)
            return StreamLayout(empty, empty, np.zeros(1, dtype=np.int64), self.has_boundary)
        last = self._last
        if last is not None and last[0] <= begin < last[1] and end <= last[1]:
            return last[2]
        starts = self.window_starts
        low = min(max(int(starts.searchsorted(begin, side="right")) - 1, 0), self.num_windows - 1)
        high = max(min(int(starts.searchsorted(end, side="left")), self.num_windows), low + 1)
        if high == low + 1:
            layout = self.window(low)
            self._last = (int(starts[low]), int(starts[low + 1]), layout)
            return layout
        # Across windows: only the documents of the range, from the first window's that
        # overlap it to the last window's (a read or a hint pass at a window crossing
        # copied two whole windows, ~13 ms each at 262,144 documents per window).
        parts = [self.window(k) for k in range(low, high)]
        head = parts[0].documents_between(begin, end)[0]
        tail = parts[-1].documents_between(begin, end)[1]
        # (documents, lengths, starts after each) of every window, the ends cut.
        spans = [(p.indices, p.lengths, p.starts[1:]) for p in parts]
        documents, lengths, after = spans[0]
        spans[0] = (documents[head:], lengths[head:], after[head:])
        documents, lengths, after = spans[-1]
        spans[-1] = (documents[:tail], lengths[:tail], after[:tail])
        return StreamLayout(
            np.concatenate([span[0] for span in spans]),
            np.concatenate([span[1] for span in spans]),
            np.concatenate([parts[0].starts[head : head + 1], *(span[2] for span in spans)]),
            self.has_boundary,
            parts[0].first + head,
        )

    def document_order(self) -> np.ndarray:
        """Every document of the stream, in order: O(documents), window by window."""
        if not self.num_windows:
            return np.empty(0, dtype=np.int64)
        return np.concatenate([self.windows.window_documents(k) for k in range(self.num_windows)])
