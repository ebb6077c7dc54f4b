"""Rows of a packed stream: the one batch builder of ``StreamingCorpus`` and mixtures.

A stream laid out by :class:`~mixle.data._packing.StreamLayout` is cut into rows of
``block + 1`` tokens at stride ``block``: row ``r`` is stream tokens ``[r * block, r *
block + block + 1)``. :func:`read_packed_rows` returns ``n`` consecutive rows from row
``first_row`` as one flat int64 buffer (filled by the shared packer,
:func:`~mixle.data._packing.stream_segment`, and ``pad_id`` past the stream's end), the
loss mask (False only on targets past the stream's last token) and, when asked, every
input token's document id and position inside its document (filled by ranges, not per
token, or one compiled pass with ``mixle[fast]``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mixle._gather import SplitOutput, document_id_runs, fill_document_ids, gather_backend
from mixle.data._documents import DocumentSource
from mixle.data._packing import RowLayout, StreamLayout, stream_segment

__all__ = [
    "PackedRows",
    "read_packed_batches",
    "read_packed_group",
    "read_packed_rows",
    "read_packed_tokens",
]


@dataclass(frozen=True, slots=True)
class PackedRows:
    """``n`` consecutive packed rows (see :func:`read_packed_rows`).

    Attributes
    ----------
    buffer
        ``n * block + 1`` int64 tokens; row ``i`` is ``buffer[i * block : (i + 1) * block
        + 1]``.
    mask
        ``(n, block)`` bool: whether each target is a real stream token.
    real
        ``mask.sum()``: real targets (the mask is a prefix of True values).
    document_ids, position_ids
        ``(n, block)`` int64 per input token (``-1`` and ``0`` on padding), or ``None``.
    """

    buffer: np.ndarray
    mask: np.ndarray
    real: int
    document_ids: np.ndarray | None
    position_ids: np.ndarray | None

    @property
    def count(self) -> int:
        return int(self.mask.shape[0])

    @property
    def context(self) -> np.ndarray:
        """``(n, block)`` inputs: a contiguous view of ``buffer``."""
        return self.buffer[:-1].reshape(self.mask.shape)

    @property
    def targets(self) -> np.ndarray:
        """``(n, block)`` targets (``context`` shifted by one): a contiguous view."""
        return self.buffer[1:].reshape(self.mask.shape)

    @property
    def rows(self) -> np.ndarray:
        """``(n, block + 1)`` rows: a read-only strided view (consecutive rows overlap)."""
        count, block = self.mask.shape
        return np.lib.stride_tricks.as_strided(
            self.buffer,
            shape=(count, block + 1),
            strides=(block * self.buffer.itemsize, self.buffer.itemsize),
            writeable=False,
        )


def read_packed_rows(
    documents: DocumentSource,
    layout: RowLayout,
    first_row: int,
    count: int,
    *,
    block: int,
    pad_id: int,
    boundary_id: int | None,
    document_ids: bool,
) -> PackedRows:
    """Rows ``[first_row, first_row + count)`` of the packed stream of ``layout``.

    Rows past the stream's end are padding (``pad_id``, masked). Reads only the
    documents the rows overlap, each once, from the layout's segment of the rows
    (``layout.segment``); O(count x block) memory besides that segment.

    Raises
    ------
    TokenIdError, ArgumentTypeError, CorpusFormatError
        As :func:`~mixle.data._packing.stream_segment` (a bad or changed document).
    """
    return read_packed_tokens(
        documents,
        layout,
        first_row * block,
        count,
        block=block,
        pad_id=pad_id,
        boundary_id=boundary_id,
        document_ids=document_ids,
    )


def read_packed_tokens(
    documents: DocumentSource,
    layout: RowLayout,
    begin: int,
    count: int,
    *,
    block: int,
    pad_id: int,
    boundary_id: int | None,
    document_ids: bool,
) -> PackedRows:
    """``count`` rows of ``block + 1`` tokens at stride ``block`` from stream token
    ``begin`` on (any token, not only a multiple of ``block``: how a mixture source
    continues its epoch in rows of another block), as :func:`read_packed_rows`."""
    size = count * block
    end = begin + size + 1
    stream_tokens = layout.stream_tokens
    stream_end = max(min(end, stream_tokens), begin)
    buffer = np.empty(end - begin, dtype=np.int64)
    local = layout.segment(begin, stream_end)
    first, stop = stream_segment(
        documents, local, begin, stream_end, buffer[: stream_end - begin], boundary_id
    )
    buffer[stream_end - begin :] = pad_id
    # Target j of the rows is real iff begin + j + 1 < stream_tokens.
    real = min(max(stream_tokens - begin - 1, 0), size)
    shape = (count, block)
    mask = _loss_mask(shape, real)
    if not document_ids:
        return PackedRows(buffer, mask, real, None, None)
    doc_ids, pos_ids = _document_positions(local, stream_end, begin, size, first, stop)
    return PackedRows(buffer, mask, real, doc_ids.reshape(shape), pos_ids.reshape(shape))


def read_packed_batches(
    documents: DocumentSource,
    layout: RowLayout,
    first_row: int,
    counts: list[int],
    *,
    block: int,
    pad_id: int,
    boundary_id: int | None,
    document_ids: bool,
) -> list[PackedRows]:
    """Consecutive batches of rows from ``first_row`` on, ``counts[k]`` rows each, read
    together: ``[read_packed_rows(...) for each batch]``, bitwise (see
    :func:`read_packed_group`)."""
    buffers, group = read_packed_group(
        documents,
        layout,
        first_row,
        counts,
        block=block,
        pad_id=pad_id,
        boundary_id=boundary_id,
        document_ids=document_ids,
    )
    batches = []
    row = 0
    for buffer, count in zip(buffers, counts, strict=True):
        part = slice(row, row + count)
        batches.append(
            PackedRows(
                buffer,
                group.mask[part],
                min(max(group.real - row * block, 0), count * block),
                None if group.document_ids is None else group.document_ids[part],
                None if group.position_ids is None else group.position_ids[part],
            )
        )
        row += count
    return batches


def read_packed_group(
    documents: DocumentSource,
    layout: RowLayout,
    first_row: int,
    counts: list[int],
    *,
    block: int,
    pad_id: int,
    boundary_id: int | None,
    document_ids: bool,
    buffers: list[np.ndarray] | None = None,
    mask: np.ndarray | None = None,
    ids: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[list[np.ndarray], PackedRows]:
    """The tokens of consecutive batches (``counts[k]`` rows each from ``first_row`` on),
    one array per batch, and the group's rows (``sum(counts)`` of them) without tokens:
    its mask, real target count and document ids, of which each batch's are the part
    of its rows (its real targets, ``min(max(real - row * block, 0), count * block)``).

    Batch ``k``'s array is its own, ``counts[k] * block + 1`` tokens, as
    :func:`read_packed_rows`'s buffer, written by one gather of the group's documents (a
    :class:`~mixle._gather.SplitOutput`: the token at the edge of two batches, one's
    last target and the next one's first input, is written into both); no joint buffer
    and no copy out of one, when ``documents`` has ``gathers_split_output`` and the
    gather backend is numpy. Otherwise, as before: :func:`read_packed_rows` of the
    group, each batch's tokens copied out of its buffer.

    ``buffers`` and ``mask``, when given, are where the batches' tokens and the group's
    loss mask are written (``counts[k] * block + 1`` int64 and ``sum(counts) * block``
    bool, flat, C-contiguous; e.g. views of a DataLoader worker's shared slot): the
    returned arrays are those buffers and a ``(sum(counts), block)`` view of ``mask``;
    ``ids`` (two flat ``sum(counts) * block`` int64 arrays), where the document ids and
    positions are filled (with ``document_ids``; no fresh arrays, no page faults).
    """
    total = sum(counts)
    if gather_backend() != "numpy" or getattr(documents, "gathers_split_output", False) is not True:
        group = read_packed_rows(
            documents,
            layout,
            first_row,
            total,
            block=block,
            pad_id=pad_id,
            boundary_id=boundary_id,
            document_ids=document_ids,
        )
        copies, row = [], 0
        for k, count in enumerate(counts):
            part = group.buffer[row * block : (row + count) * block + 1]
            if buffers is None:
                copies.append(part.copy())
            else:
                buffers[k][...] = part
                copies.append(buffers[k])
            row += count
        if mask is not None:
            mask[...] = group.mask.reshape(-1)
            doc_ids, pos_ids = group.document_ids, group.position_ids
            if ids is not None and doc_ids is not None and pos_ids is not None:
                ids[0][...] = doc_ids.reshape(-1)
                ids[1][...] = pos_ids.reshape(-1)
                doc_ids, pos_ids = ids[0].reshape(doc_ids.shape), ids[1].reshape(pos_ids.shape)
            shape = group.mask.shape
            group = PackedRows(group.buffer, mask.reshape(shape), group.real, doc_ids, pos_ids)
        return copies, group
    size = total * block
    begin = first_row * block
    stream_tokens = layout.stream_tokens
    stream_end = max(min(begin + size + 1, stream_tokens), begin)
    stream = stream_end - begin
    if buffers is None:
        buffers = [np.empty(count * block + 1, dtype=np.int64) for count in counts]
    starts = [0] * len(counts)
    for k in range(1, len(counts)):
        starts[k] = starts[k - 1] + counts[k - 1] * block
    local = layout.segment(begin, stream_end)
    first, stop = stream_segment(
        documents, local, begin, stream_end, SplitOutput(buffers, starts, stream), boundary_id
    )
    for buffer, start in zip(buffers, starts, strict=True):
        if start + buffer.shape[0] > stream:
            buffer[max(stream - start, 0) :] = pad_id
    real = min(max(stream_tokens - begin - 1, 0), size)
    shape = (total, block)
    rows_mask = _loss_mask(shape, real, mask)
    if not document_ids:
        return buffers, PackedRows(_NO_TOKENS, rows_mask, real, None, None)
    doc_ids, pos_ids = _document_positions(local, stream_end, begin, size, first, stop, ids)
    return buffers, PackedRows(
        _NO_TOKENS, rows_mask, real, doc_ids.reshape(shape), pos_ids.reshape(shape)
    )


_NO_TOKENS = np.empty(0, dtype=np.int64)
_NO_TOKENS.flags.writeable = False


def _loss_mask(shape: tuple[int, int], real: int, out: np.ndarray | None = None) -> np.ndarray:
    """The rows' loss mask: True for the first ``real`` targets (row-major), False after
    (written into ``out``, flat, when given)."""
    if out is not None:
        out[:real] = True
        out[real:] = False
        return out.reshape(shape)
    if real == shape[0] * shape[1]:
        mask = np.empty(shape, dtype=np.bool_)
        mask.fill(True)
        return mask
    flat = np.zeros(shape[0] * shape[1], dtype=np.bool_)
    flat[:real] = True
    return flat.reshape(shape)


def _document_positions(
    layout: StreamLayout,
    stream_end: int,
    begin: int,
    size: int,
    first: int,
    stop: int,
    out: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Document ids and in-document positions of stream tokens ``[begin, begin + size)``.

    ``[first, stop)`` are the positions in ``layout.indices`` of the documents the rows
    overlap (as :func:`~mixle.data._packing.stream_segment` returned them); each
    contributes one run (its boundary token included), built by
    :func:`~mixle._gather.document_id_runs` (or filled by
    :func:`~mixle._gather.fill_document_ids` when the rows reach past the stream's end);
    positions from ``stream_end`` (the stream's end, or the rows') on are padding (-1
    and 0). Filled into ``out`` (two flat int64 arrays of ``size``) when given.
    """
    real = max(min(begin + size, stream_end) - begin, 0)
    indices, starts = layout.indices[first:stop], layout.starts[first : stop + 1]
    if real == size and out is None:  # every batch but an epoch's last: built by runs
        return document_id_runs(indices, starts, begin, size)
    doc_ids, pos_ids = (
        out if out is not None else (np.empty(size, np.int64), np.empty(size, np.int64))
    )
    if real:
        fill_document_ids(doc_ids[:real], pos_ids[:real], indices, starts, begin)
    doc_ids[real:] = -1
    pos_ids[real:] = 0
    return doc_ids, pos_ids
