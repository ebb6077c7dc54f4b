"""Groups of packed-row batches read straight into a DataLoader worker's shared slot.

A :class:`~mixle.data.torch.StreamLoader` worker over a stream that can read a run of batches
into buffers of the caller's (:class:`ReadsRunsInto`: ``StreamingCorpus`` with
concatenated rows) does not build each batch's arrays and then copy them into its
shared-memory slot (:mod:`mixle.data._batch_group`'s stacks): the group's one gather
writes every token once, into the slot. The slot holds, for ``k`` batches of ``b x
block`` rows:

- ``k`` token buffers of ``b * block + 1`` int64 (a batch's ``context`` is its first
  ``b * block`` tokens, its ``targets`` the last ``b * block``: one buffer, as in the
  in-process batch), 64-byte aligned, at a fixed stride;
- the group's loss mask, ``k * b * block`` bool (batch ``i``'s at ``i * b * block``);
- the other arrays of the batch tuple, each in ``k`` regions at a fixed stride: the
  document ids and positions filled in place (one flat array each for the group, as
  the reader fills them: no fresh arrays, whose page faults cost more than the fill),
  anything else copied once.

A run's last batch may have fewer rows (an epoch's last batch): it sits in its own
regions and makes a :data:`Segment` of its own. Only a small descriptor travels through
the pipe: the slot's place and, per segment, one :data:`Column` per array of the batch
tuple (dtype, shape, offset of the segment's first batch's, stride).
The main process makes each batch's tensors as views of the lent slot, one
``torch.from_numpy`` per array of a batch, so each tensor's storage is that batch's
array only (``untyped_storage().nbytes()`` is the batch's size, not the slot's), and the
slot is freed when the last tensor of the group is gone: a batch kept by the user keeps
its slot from being written again (the worker writes only into free slots; later
groups go through the other slots, or through the pipe when none is free).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from mixle.data._batch import Batch
from mixle.data._batch_group import BatchGroup, Position
from mixle.data._row_plan import RunBuffers
from mixle.data._slot_ring import FdHandle, SlotOwner, SlotRing, mapped_ring, worker_ring

__all__ = [
    "Column",
    "ReadsRunsInto",
    "Segment",
    "SlotGroup",
    "column_batches",
    "direct_group_bytes",
    "read_direct_group",
    "receive_columns",
    "unpack_columns",
]

#: One array of every batch of a group: ``(dtype, shape of one batch's array, byte
#: offset of batch 0's, bytes from one batch's to the next)``. Columns may overlap (a
#: batch's ``context`` and ``targets`` are views of one token buffer).
Column = tuple[str, tuple[int, ...], int, int]

# Token buffers start on a cache line (and every array on its dtype's alignment).
_ALIGN = 64


@runtime_checkable
class ReadsRunsInto(Protocol):
    """A stream that reads a run of consecutive batches of one epoch into the caller's
    buffers (``StreamingCorpus.read_run_into``)."""

    def read_run_into(
        self, epoch: int, index: int, count: int, buffers: RunBuffers
    ) -> list[Batch] | None:
        """The batches from ``(epoch, index)``, written into ``buffers``; ``None``:
        nothing read (the layout cannot, or ``buffers`` declined)."""
        ...


def _aligned(nbytes: int) -> int:
    return -(-nbytes // _ALIGN) * _ALIGN


def _nbytes(column: Column, count: int) -> int:
    """Bytes from the buffer's start to the end of ``column``'s last array."""
    dtype_str, shape, offset, stride = column
    return offset + (count - 1) * stride + math.prod(shape) * np.dtype(dtype_str).itemsize


def _layout(sample: tuple[np.ndarray, ...], count: int) -> tuple[Column, ...]:
    """The columns of ``count`` batches shaped like ``sample`` (packed rows: context,
    targets, loss mask, then any arrays copied)."""
    rows, block = sample[0].shape
    size = rows * block
    tokens = _aligned((size + 1) * 8)
    mask = count * tokens
    columns: list[Column] = [
        ("<i8", (rows, block), 0, tokens),
        ("<i8", (rows, block), 8, tokens),
        ("|b1", (rows, block), mask, size),
    ]
    offset = _aligned(mask + count * size)
    for array in sample[3:]:
        # 8-byte multiples: int64 ids of consecutive batches are one flat array.
        stride = -(-array.nbytes // 8) * 8
        columns.append((array.dtype.str, tuple(array.shape), offset, stride))
        offset += count * stride
    return tuple(columns)


def direct_group_bytes(sample: tuple[np.ndarray, ...], count: int) -> int | None:
    """Slot bytes of a direct group of ``count`` batches shaped like ``sample`` (a
    packed-rows batch tuple), or ``None`` if ``sample`` is not one (its ``context``
    and ``targets`` are not int64 ``(b, block)``, or its mask not bool)."""
    if len(sample) < 3:
        return None
    context, targets, mask = sample[:3]
    if not (
        context.ndim == 2
        and context.dtype == np.int64
        and targets.dtype == np.int64
        and mask.dtype == np.bool_
        and context.shape == targets.shape == mask.shape
    ):
        return None
    return max(_nbytes(column, count) for column in _layout(sample, count))


#: Consecutive batches of one shape in a group: their count and their columns.
Segment = tuple[int, tuple[Column, ...]]


class SlotGroup(SlotOwner):
    """A group of batches as a worker sends it: :data:`Segment` s of :data:`Column` s in
    one buffer (a shared slot, or a ``bytearray`` when no slot is free), and the
    position of every batch and of the next one. Pickles as the slot's place (or the
    bytes) and the segments; the main process receives a
    :class:`~mixle.data._batch_group.BatchGroup`."""

    __slots__ = ("buffer", "positions", "segments")

    def __init__(
        self,
        buffer: bytearray | np.ndarray,
        segments: tuple[Segment, ...],
        positions: tuple[Position | None, ...],
        ring_slot: tuple[SlotRing, int, int] | None,
    ) -> None:
        super().__init__(ring_slot)
        self.buffer = buffer
        self.segments = segments
        self.positions = positions

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        if self._ring_slot is None:
            return (unpack_columns, (self.buffer, self.segments, self.positions))
        # The receiver's views free the slot when they go.
        return (receive_columns, (self._hand_over(), self.segments, self.positions))


def read_direct_group(
    stream: ReadsRunsInto,
    runs: list[tuple[int, int, int]],
    sample: tuple[np.ndarray, ...],
    positions: tuple[Position | None, ...],
    full: int,
    shared: bool,
) -> SlotGroup | None:
    """The batches of ``runs`` (``(epoch, index, count)`` each, in order) read by
    ``stream`` straight into a free slot of this worker's ring (made for groups of
    ``full`` bytes), or into a ``bytearray`` when none is free or ``shared`` is false.

    Batch ``i`` of the group has the ``i``-th region of every column; a run's last
    batch may have fewer rows than ``sample`` (an epoch's last batch), and makes a
    segment of its own. ``None`` when the group cannot be read so (a run the stream
    does not read into buffers, other arrays than ``sample``'s): the caller reads it
    otherwise.
    """
    count = len(positions) - 1
    columns = _layout(sample, count)
    nbytes = max(_nbytes(column, count) for column in columns)
    ring = worker_ring(full) if shared else None
    acquired = None if ring is None else ring.acquire(nbytes)
    buffer: bytearray | np.ndarray
    if acquired is None:
        buffer = bytearray(nbytes)
        raw = np.frombuffer(buffer, dtype=np.uint8)
    else:
        raw = buffer = acquired[2]
    rows = [0] * count
    filled: list[bool] = []
    done = 0
    for epoch, index, length in runs:
        buffers = _run_buffers(raw, columns, sample[0].shape, done, rows, filled)
        read = stream.read_run_into(epoch, index, length, buffers)
        if read is None or len(read) != length:
            return None  # never published: the slot stays free
        skip = 2 if filled.pop() else 0  # ids filled in place: nothing to copy
        for offset, batch in enumerate(read):
            extra = batch.as_tuple()[3 + skip :]
            if not _copy_extra(raw, columns[3 + skip :], extra, done + offset):
                return None
        done += length
    segments = _segments(columns, rows)
    if ring is None or acquired is None:
        return SlotGroup(buffer, segments, positions, None)
    ring.publish(acquired[0], acquired[1])
    return SlotGroup(buffer, segments, positions, (ring, acquired[0], acquired[1]))


def _copy_extra(
    raw: np.ndarray, columns: tuple[Column, ...], extra: tuple[np.ndarray, ...], index: int
) -> bool:
    """Copy arrays of batch ``index`` into its regions of ``columns`` (whether they are
    the arrays the columns were laid out for, up to a row count)."""
    if len(extra) != len(columns):
        return False
    for (dtype_str, shape, at, stride), array in zip(columns, extra, strict=True):
        if array.dtype.str != dtype_str or array.shape[1:] != shape[1:] or array.nbytes > stride:
            return False
        start = at + index * stride
        np.copyto(raw[start : start + array.nbytes].view(array.dtype).reshape(array.shape), array)
    return True


def _segments(columns: tuple[Column, ...], rows: list[int]) -> tuple[Segment, ...]:
    """The group's runs of batches of one row count, each with its columns (the
    group's, with that row count and offset to the run's first batch)."""
    segments: list[Segment] = []
    first = 0
    while first < len(rows):
        stop = first + 1
        while stop < len(rows) and rows[stop] == rows[first]:
            stop += 1
        segments.append(
            (
                stop - first,
                tuple(
                    (dtype, (rows[first], *shape[1:]), offset + first * stride, stride)
                    for dtype, shape, offset, stride in columns
                ),
            )
        )
        first = stop
    return tuple(segments)


def _run_buffers(
    raw: np.ndarray,
    columns: tuple[Column, ...],
    shape: tuple[int, ...],
    first: int,
    rows: list[int],
    filled: list[bool],
) -> RunBuffers:
    """The ``buffers`` callback of a run whose first batch is batch ``first`` of the
    group: views of its token buffers and of its part of the mask column (and of the
    two id columns, when the batches have them), noting each batch's row count in
    ``rows`` and whether the ids are given in ``filled``. Every batch but the run's last
    must have the rows of ``shape`` (the last may have fewer: an epoch's last batch);
    it declines others."""
    full, block = shape
    size = full * block
    tokens = columns[0][3]
    mask_at = columns[2][2]

    def buffers(
        counts: Sequence[int], width: int
    ) -> tuple[list[np.ndarray], np.ndarray, tuple[np.ndarray, np.ndarray] | None] | None:
        filled.append(False)
        if width != block or any(count != full for count in counts[:-1]):
            return None
        if not 0 < counts[-1] <= full:
            return None
        rows[first : first + len(counts)] = counts
        starts = range(first * tokens, (first + len(counts)) * tokens, tokens)
        views = [
            raw[at : at + (count * block + 1) * 8].view(np.int64)
            for at, count in zip(starts, counts, strict=True)
        ]
        stop = first * size + sum(counts) * block
        mask = raw[mask_at + first * size : mask_at + stop].view(np.bool_)
        ids = None
        if len(columns) >= 5 and all(
            dtype == "<i8" and stride == size * 8 for dtype, _, _, stride in columns[3:5]
        ):
            filled[-1] = True
            doc_at, pos_at = columns[3][2], columns[4][2]
            ids = (
                raw[doc_at + first * size * 8 : doc_at + stop * 8].view(np.int64),
                raw[pos_at + first * size * 8 : pos_at + stop * 8].view(np.int64),
            )
        return views, mask, ids

    return buffers


def column_batches(
    buffer: bytearray | np.ndarray, columns: tuple[Column, ...], count: int
) -> list[list[torch.Tensor]]:
    """The ``count`` batches of a buffer laid out in ``columns``: each batch's tensors
    are views of ``buffer``, one ``from_numpy`` each (a storage of that array only).

    Raises
    ------
    RuntimeError
        A column reaches past the buffer or is misaligned (a broken hand-over, never
        expected).
    """
    raw = np.frombuffer(buffer, dtype=np.uint8)
    arrays = []
    for column in columns:
        dtype_str, shape, offset, stride = column
        dtype = np.dtype(dtype_str)
        width = math.prod(shape) * dtype.itemsize
        if (
            offset < 0
            or stride < 0
            or (offset | stride) % dtype.itemsize
            or _nbytes(column, count) > raw.shape[0]
        ):
            raise RuntimeError(
                f"StreamLoader: a group's column {column} does not fit its buffer of "
                f"{raw.shape[0]} bytes ({count} batches)."
            )
        strided = np.lib.stride_tricks.as_strided(
            raw[offset:], shape=(count, width), strides=(stride, 1)
        )
        arrays.append(strided.view(dtype).reshape(count, *shape))
    convert = torch.from_numpy
    return [[convert(array) for array in batch] for batch in zip(*arrays, strict=True)]


def unpack_columns(
    buffer: bytearray, segments: tuple[Segment, ...], positions: tuple[Position | None, ...]
) -> BatchGroup:
    """A group that came through the pipe (its bytes are the receiver's)."""
    return BatchGroup(_batches(buffer, segments), positions)


def receive_columns(
    place: tuple[str, int, FdHandle | None, int, int],
    segments: tuple[Segment, ...],
    positions: tuple[Position | None, ...],
) -> BatchGroup:
    """A group a worker left in a shared slot: views of the slot, freed when they go."""
    token, pid, handle, slot, sequence = place
    nbytes = max(_nbytes(column, count) for count, columns in segments for column in columns)
    lent = mapped_ring(token, pid, handle).lend(slot, sequence, nbytes)
    return BatchGroup(_batches(lent, segments), positions)


def _batches(
    buffer: bytearray | np.ndarray, segments: tuple[Segment, ...]
) -> list[list[torch.Tensor]]:
    """The batches of every segment, in order."""
    if len(segments) == 1:
        count, columns = segments[0]
        return column_batches(buffer, columns, count)
    batches: list[list[torch.Tensor]] = []
    for count, columns in segments:
        batches += column_batches(buffer, columns, count)
    return batches
