"""Where one document's trained tokens lie in an epoch's rows: the plan, inverted.

An epoch's rows are a packing of its order (:mod:`~mixle.data._packing`: the order
concatenated and cut into rows of ``block + 1`` tokens at stride ``block``; or
:mod:`~mixle.data._plan_best_fit`: windows of the order packed by best fit). Given a
document, these functions answer which rows of the epoch train any of its tokens
(a token is trained when it is a *target* whose loss mask is on) and which of its
tokens each row trains, as :class:`RowSpan` s, without a pass over the epoch when the
order can be inverted:

- the ``"blocks"`` order (:class:`~mixle.data._order_windows.BlockOrder`) places the
  document with :meth:`~mixle.data._order_windows.BlockOrder.locate` (its window and
  position, O(1)); the window's layout (O(window)) gives its stream start, and the
  rows follow by arithmetic (concatenate), or the window is packed (best fit, O(window));
- the seed's permutation order (a whole :class:`~mixle.data._packing.StreamLayout`)
  has no inverse: its positions are found with one pass over the epoch's order.

Token ranges are the document's own token positions ``[start, stop)``: a boundary
token after the document is not one of them, so a row whose only target of the
document is its boundary does not count.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from mixle.data._order_windows import BlockOrder
from mixle.data._packing import RowLayout, StreamLayout
from mixle.data._plan_best_fit import BestFitRows
from mixle.data._plan_global_best_fit import LayoutWindows
from mixle.data._windowed_layout import WindowedLayout

__all__ = [
    "RowSpan",
    "best_fit_spans",
    "best_fit_windows",
    "document_ranges",
    "layout_spans",
    "stream_spans",
]


class RowSpan(NamedTuple):
    """Row ``row`` of an epoch's rows trains tokens ``[start, stop)`` of the document."""

    row: int
    start: int
    stop: int


def stream_spans(begin: int, length: int, block: int, rows: int) -> list[RowSpan]:
    """The rows among the first ``rows`` of a concatenated stream that train a document
    at stream positions ``[begin, begin + length)``.

    Row ``r``'s targets are stream positions ``[r * block + 1, r * block + block]``
    (the stream's first token is never a target), so position ``p >= 1`` is trained by
    row ``(p - 1) // block`` alone.
    """
    first = max(begin, 1)
    end = begin + length  # exclusive
    if end <= first:
        return []
    spans = []
    for row in range((first - 1) // block, min((end - 2) // block + 1, rows)):
        low = max(begin, row * block + 1)
        high = min(end, row * block + block + 1)
        spans.append(RowSpan(row, low - begin, high - begin))
    return spans


def _positions(layout: StreamLayout, document: int) -> np.ndarray:
    """Positions of ``document`` in ``layout`` (one pass; several with a selector that
    repeats documents)."""
    return np.flatnonzero(layout.indices == document)


def document_ranges(layout: RowLayout, document: int) -> list[tuple[int, int]]:
    """``(stream start, length)`` of every place of ``document`` in the concatenated
    stream of ``layout``, in stream order (see the module docstring for the cost)."""
    if isinstance(layout, WindowedLayout) and isinstance(layout.windows, BlockOrder):
        return [_located(layout, layout.windows, document)]
    found: list[tuple[StreamLayout, int]]
    if isinstance(layout, WindowedLayout):
        found = [
            (window, int(place))
            for k in range(layout.num_windows)
            for window in [layout.window(k)]
            for place in _positions(window, document)
        ]
    else:
        whole = layout.segment(0, layout.stream_tokens)
        found = [(whole, int(place)) for place in _positions(whole, document)]
    return sorted((int(part.starts[place]), int(part.lengths[place])) for part, place in found)


def layout_spans(layout: RowLayout, document: int, block: int, rows: int) -> list[RowSpan]:
    """The rows among the first ``rows`` of the concatenated stream of ``layout`` that
    train ``document``, in row order (see the module docstring for the cost)."""
    spans: list[RowSpan] = []
    for begin, length in document_ranges(layout, document):
        spans.extend(stream_spans(begin, length, block, rows))
    return sorted(spans)


def _located(layout: WindowedLayout, order: BlockOrder, document: int) -> tuple[int, int]:
    """``(stream start, length)`` of ``document`` in a ``"blocks"`` layout, in closed
    form: its window and position from :meth:`BlockOrder.locate`, then the pieces of
    the documents before it in the window, or after it (whichever side is shorter:
    at most half a window of documents and lengths read)."""
    windows, places = order.locate([document])
    k, place = int(windows[0]), int(places[0])
    size = int(layout.document_starts[k + 1] - layout.document_starts[k])
    length = int(np.diff(order.offsets(np.array([document, document + 1])))[0])
    before = place <= size - place
    side = np.arange(0, place) if before else np.arange(place + 1, size)
    ids = order.documents_at(k, side.astype(np.int64))
    edges = order.offsets(np.concatenate([ids, ids + 1]))
    pieces = int((edges[len(ids) :] - edges[: len(ids)]).sum()) + (
        len(ids) if layout.has_boundary else 0
    )
    if before:
        return int(layout.window_starts[k]) + pieces, length
    # From the window's end: its pieces total the next window's start less its own,
    # plus the boundary the stream's last document does not have.
    boundary = 1 if layout.has_boundary else 0
    last = boundary if k == layout.num_windows - 1 else 0
    return int(layout.window_starts[k + 1]) + last - pieces - (length + boundary), length


def best_fit_windows(best_fit: BestFitRows, document: int) -> list[int]:
    """The packing windows of ``best_fit`` that hold ``document`` (closed form for the
    ``"blocks"`` order, one pass over the order for the permutation)."""
    windows = best_fit.windows
    if isinstance(windows, BlockOrder):
        return [int(windows.locate([document])[0][0])]
    assert isinstance(windows, LayoutWindows)
    places = _positions(windows.layout, document)
    return sorted({int(place) // windows.size for place in places})


def best_fit_spans(best_fit: BestFitRows, document: int) -> list[RowSpan]:
    """The best-fit rows of the epoch that train ``document``, in row order.

    Each window holding it is packed (O(window)); a piece of ``length`` slots from the
    document's token ``begin`` trains its tokens ``begin + 1 .. begin + length - 1``
    (the pair into a piece's first slot is masked), less the boundary slot.
    """
    capacity = best_fit.block + 1
    spans: list[RowSpan] = []
    for k in best_fit_windows(best_fit, document):
        window = best_fit.window(k)
        first_row = int(best_fit.row_starts[k])
        for piece in np.flatnonzero(window.ids == document).tolist():
            begin = int(window.begin[piece])
            stop = int(window.token_end[piece])
            if stop > begin + 1:
                row = first_row + int(window.slot[piece]) // capacity
                spans.append(RowSpan(row, begin + 1, stop))
    return sorted(spans)
