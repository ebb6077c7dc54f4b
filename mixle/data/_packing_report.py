"""Truncation and padding of the two packings, side by side, from document lengths alone.

:func:`compare_packings` answers "how many documents would each packing cut, and how
much padding would it add?" for one epoch of a corpus without reading a token: the
epoch's order (:func:`~mixle.data._order.global_document_order`) laid out as the global
layout lays it out, then

- concatenate-and-chunk: a document is *cut* when it does not lie inside one row
  (rows of ``block + 1`` tokens at stride ``block``); padding is the final row's tail;
- best-fit: the same windows the stream packs (:class:`~mixle.data._plan_best_fit.BestFitRows`),
  so the figures are the stream's: a document is cut when it has more than one piece.

``mixle inspect CORPUS --packing best_fit --block N`` prints it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from mixle._checks import nonnegative_int, positive_int
from mixle.data._options import OrderOptions
from mixle.data._order import global_document_order
from mixle.data._order_windows import OrderWindows
from mixle.data._packing import StreamLayout, rows_for_stream
from mixle.data._packing_options import PackingOptions
from mixle.data._plan_best_fit import BestFitRows, check_best_fit_block
from mixle.data._plan_global_best_fit import LayoutWindows

__all__ = ["PackingSummary", "compare_packings"]


@dataclass(frozen=True, slots=True)
class PackingSummary:
    """One packing's figures for one epoch.

    Attributes
    ----------
    packing
        ``"concatenate"`` or ``"best_fit"``.
    rows
        Rows of the epoch.
    documents, cut_documents
        Nonempty documents, and those split over more than one row.
    longer_than_row
        Documents longer than a row (``block + 1`` tokens, boundary included): the
        fewest any packing must cut.
    padding_fraction
        Target positions whose next token is padding, over all ``rows * block``.
    trained_fraction
        Target positions that train (a real pair inside one piece of a document, or
        across documents in concatenate-and-chunk).
    truncated_tokens
        Tokens dropped by best-fit's ``truncate`` option (0 otherwise).
    """

    packing: str
    rows: int
    documents: int
    cut_documents: int
    longer_than_row: int
    padding_fraction: float
    trained_fraction: float
    truncated_tokens: int

    @property
    def cut_fraction(self) -> float:
        """``cut_documents / documents`` (0.0 without documents)."""
        return self.cut_documents / self.documents if self.documents else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "cut_fraction": self.cut_fraction}


def compare_packings(
    lengths: Any,
    *,
    block: int,
    seed: int = 0,
    epoch: int = 0,
    has_boundary: bool = False,
    order: str = "blocks",
    block_documents: int | None = None,
    window_blocks: int | None = None,
    window_documents: int | None = None,
    truncate: bool = False,
) -> tuple[PackingSummary, PackingSummary]:
    """Concatenate-and-chunk and best-fit figures of epoch ``epoch`` of a corpus whose
    documents have ``lengths`` (see the module docstring).

    Parameters
    ----------
    lengths
        1-D nonnegative document lengths (``documents.lengths``).
    block
        Input tokens per row (``>= 3``, best-fit's minimum).
    seed, epoch
        The stream's shuffle.
    has_boundary
        Whether a boundary token follows each document.
    order, block_documents, window_blocks
        The epoch order, as ``StreamingCorpus(layout="global")`` takes it (default
        ``"blocks"``, whose windows are best-fit's windows).
    window_documents, truncate
        Best-fit's options (:class:`~mixle.data._packing_options.PackingOptions`;
        ``window_documents`` applies to ``order="permutation"``).

    Raises
    ------
    ArgumentError
        A bad option (named).

    Complexity: O(documents) time and memory (best-fit: O(documents log block)).
    """
    block = check_best_fit_block(positive_int("block", block))
    window = PackingOptions().window_documents if window_documents is None else window_documents
    options = PackingOptions("best_fit", window, truncate)
    table = np.asarray(lengths, dtype=np.int64)
    seed, epoch = nonnegative_int("seed", seed), nonnegative_int("epoch", epoch)
    order_options = OrderOptions(order, block_documents, window_blocks)
    windows: OrderWindows
    if order_options.name == "blocks":
        offsets = np.zeros(len(table) + 1, dtype=np.int64)
        np.cumsum(table, out=offsets[1:])
        windows = order_options.block_order(len(table), offsets.take, seed=seed, epoch=epoch)
        parts = [windows.window_documents(k) for k in range(windows.num_windows)]
        documents = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
        layout = StreamLayout.build(documents, table.take(documents), has_boundary)
    else:
        documents = global_document_order(len(table), seed=seed, epoch=epoch)
        layout = StreamLayout.build(documents, table.take(documents), has_boundary)
        windows = LayoutWindows(layout, options.window_documents)
    nonempty = int(np.count_nonzero(table))
    slots = table + 1 if has_boundary else table
    longer = int(np.count_nonzero(slots > block + 1))
    planned = BestFitRows(
        windows,
        block=block,
        has_boundary=has_boundary,
        seed=seed,
        epoch=epoch,
        truncate=options.truncate,
    )
    return (
        _concatenate(layout, block, nonempty, longer),
        _best_fit(planned, block, nonempty, longer),
    )


def _concatenate(layout: StreamLayout, block: int, nonempty: int, longer: int) -> PackingSummary:
    rows = rows_for_stream(layout.stream_tokens, block)
    starts = layout.starts[:-1]
    ends = starts + layout.lengths
    # Inside row floor(start / block) iff the document ends by that row's last token.
    cut = (layout.lengths > 0) & (ends > (starts // block) * block + block + 1)
    targets = rows * block
    trained = max(layout.stream_tokens - 1, 0) if rows else 0
    return PackingSummary(
        "concatenate",
        rows,
        nonempty,
        int(np.count_nonzero(cut)),
        longer,
        (targets - trained) / targets if targets else 0.0,
        trained / targets if targets else 0.0,
        0,
    )


def _best_fit(planned: BestFitRows, block: int, nonempty: int, longer: int) -> PackingSummary:
    cut = trained = used_targets = truncated = 0
    for k in range(len(planned.row_starts) - 1):
        pieces = planned.window(k).pieces
        cut += pieces.cut_documents
        truncated += pieces.truncated_tokens
        trained += int((pieces.length - 1).sum())
        # A row's padding targets: every position after its last document slot.
        used_targets += int(np.maximum(pieces.row_used() - 1, 0).sum())
    targets = planned.rows * block
    return PackingSummary(
        "best_fit",
        planned.rows,
        nonempty,
        cut,
        longer,
        (targets - used_targets) / targets if targets else 0.0,
        trained / targets if targets else 0.0,
        truncated,
    )
