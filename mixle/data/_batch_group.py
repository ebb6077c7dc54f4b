"""Groups of consecutive batches handed over as one DataLoader item (:class:`StreamLoader`).

torch's DataLoader costs its main process 60-160 µs per item whatever the item holds
(an index put on the worker's queue, the result taken off the pipe, the bookkeeping of
in-order delivery): at batch 8 x 2048 that is about as much as a worker spends making
the batch, so a second worker cannot help. A worker of a :class:`StreamLoader` therefore
yields *k* consecutive batches as one item: their arrays in one buffer (one slot of the
worker's shared-memory ring, :mod:`mixle.data._slot_ring`), with the position of each
batch and of the one after them. The main process maps the slot without copying
(:meth:`MappedRing.lend`), makes each batch's tensors as views of it and the loader
yields them one at a time; the slot is freed when the last of those tensors is gone.

A group is described by :data:`GroupInfo`: the number of arrays of each batch and the
``k + 1`` positions (the last one is where the next batch after the group is, ``None``
past the end of the stream).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from mixle.data._slot_ring import FdHandle, mapped_ring

__all__ = [
    "ALIGN",
    "GROUP_BYTES",
    "MAX_GROUP",
    "BatchGroup",
    "GroupInfo",
    "Layout",
    "Position",
    "Stack",
    "arrays_of",
    "auto_group_size",
    "group_bytes",
    "nbytes_of",
    "receive_group",
    "stacked",
    "tensors_of",
    "unpack_group",
]

#: Each array starts at a multiple of this many bytes in a packed buffer, so every view
#: is aligned for its dtype (int64 at most).
ALIGN = 8

#: The automatic group holds at most this many batches ...
MAX_GROUP = 128
#: ... and at most this many bytes (a ring holds six groups per worker: at most 96 MiB
#: of shared memory per worker). Measured at batch 8 x 2048 (278 KB, one worker, load
#: 7 on 2 cores, medians of 5 interleaved runs): the main process's CPU per batch is
#: 48 / 33 / 21 µs at ``k`` = 16 / 30 / 60 batches per item (torch's per-item cost,
#: some 400-900 µs under load, paid once per group), so 60 fits (16 MiB / 278 KB). A
#: group read straight into its slot (:mod:`mixle.data._slot_group`) takes 147.5 KB a
#: batch (one token buffer and the mask), so 113 fit: 11 -> 9 µs of main-process CPU
#: per batch against 64 (one worker, load 7, medians of 3).
GROUP_BYTES = 16 << 20

Layout = tuple[tuple[str, tuple[int, ...], int], ...]
Position = tuple[int, int]
#: ``(sizes, positions)``: the arrays of each batch, in batch order; or ``((), positions)``
#: when the buffer holds one stack per array of the batch (every batch alike).
GroupInfo = tuple[tuple[int, ...], tuple[Position | None, ...]]


class Stack:
    """Arrays of one dtype and shape, packed as one array with a leading axis.

    The receiver makes one tensor of the stack and ``unbind``s it: one ``from_numpy``
    per array of a batch instead of one per array per batch.
    """

    __slots__ = ("arrays", "dtype", "nbytes", "shape")

    def __init__(self, arrays: list[np.ndarray]) -> None:
        self.arrays = arrays
        self.dtype = arrays[0].dtype
        self.shape = (len(arrays), *arrays[0].shape)
        self.nbytes = arrays[0].nbytes * len(arrays)


def stacked(
    batches: list[tuple[np.ndarray, ...]], positions: tuple[Position | None, ...]
) -> tuple[tuple[np.ndarray | Stack, ...], GroupInfo]:
    """The parts and :data:`GroupInfo` of a group: one :class:`Stack` per array when every
    batch has the same dtypes and shapes (always, but for a short last batch), else
    every batch's arrays in turn."""
    first = batches[0]
    alike = all(
        len(batch) == len(first)
        and all(
            a.dtype == b.dtype and a.shape == b.shape for a, b in zip(batch, first, strict=True)
        )
        for batch in batches[1:]
    )
    if alike:
        columns = tuple(Stack([batch[j] for batch in batches]) for j in range(len(first)))
        return columns, ((), positions)
    flat = tuple(array for batch in batches for array in batch)
    return flat, (tuple(len(batch) for batch in batches), positions)


def auto_group_size(batch_bytes: int) -> int:
    """Batches per item for batches of ``batch_bytes``: as many as fit :data:`GROUP_BYTES`,
    between 1 and :data:`MAX_GROUP`."""
    return max(1, min(MAX_GROUP, GROUP_BYTES // max(batch_bytes, 1)))


def tensors_of(buffer: bytearray | np.ndarray, layout: Layout) -> list[torch.Tensor]:
    """The tensors of a packed buffer: contiguous views of ``buffer``, in order."""
    return [torch.from_numpy(array) for array in arrays_of(buffer, layout)]


def arrays_of(buffer: bytearray | np.ndarray, layout: Layout) -> list[np.ndarray]:
    """The arrays of a packed buffer: contiguous views of ``buffer``, in order."""
    raw = np.frombuffer(buffer, dtype=np.uint8)
    arrays = []
    for dtype_str, shape, offset in layout:
        dtype = np.dtype(dtype_str)
        end = offset + math.prod(shape) * dtype.itemsize
        arrays.append(raw[offset:end].view(dtype).reshape(shape))
    return arrays


def nbytes_of(layout: Layout) -> int:
    """Bytes a packed buffer of ``layout`` uses (to the end of its last array)."""
    dtype_str, shape, offset = layout[-1]
    return offset + math.prod(shape) * np.dtype(dtype_str).itemsize


class BatchGroup:
    """Consecutive batches received as one DataLoader item, and where each one is.

    Attributes
    ----------
    batches
        Each batch's tensors, as the DataLoader yields a batch (a ``list``).
    positions
        ``len(batches) + 1`` dataset positions: batch ``i`` is at ``positions[i]``, the
        next batch after it at ``positions[i + 1]`` (``None``: the stream ends there).
    """

    __slots__ = ("batches", "positions")

    def __init__(
        self, batches: list[list[torch.Tensor]], positions: tuple[Position | None, ...]
    ) -> None:
        self.batches = batches
        self.positions = positions

    def pin_memory(self) -> BatchGroup:
        """The group with every tensor copied to pinned memory (``pin_memory=True``)."""
        return BatchGroup(
            [[tensor.pin_memory() for tensor in batch] for batch in self.batches],
            self.positions,
        )


def _split(arrays: list[np.ndarray], group: GroupInfo) -> BatchGroup:
    """The group's batches, one ``from_numpy`` per array of each: every tensor's storage
    is that array only (a batch the user keeps holds its own bytes, not the group's)."""
    sizes, positions = group
    convert = torch.from_numpy
    if not sizes:  # one stack per array: batch i is the i-th slice of each
        return BatchGroup(
            [[convert(array) for array in batch] for batch in zip(*arrays, strict=True)],
            positions,
        )
    batches, start = [], 0
    for size in sizes:
        batches.append([convert(array) for array in arrays[start : start + size]])
        start += size
    return BatchGroup(batches, positions)


def unpack_group(buffer: bytearray, layout: Layout, group: GroupInfo) -> BatchGroup:
    """A group that came through the pipe (its bytes are the receiver's)."""
    return _split(arrays_of(buffer, layout), group)


def receive_group(
    place: tuple[str, int, FdHandle | None, int, int], layout: Layout, group: GroupInfo
) -> BatchGroup:
    """A group a worker left in a shared slot: views of the slot, freed when they go."""
    token, pid, handle, slot, sequence = place
    lent = mapped_ring(token, pid, handle).lend(slot, sequence, nbytes_of(layout))
    return _split(arrays_of(lent, layout), group)


def group_bytes(parts: Any) -> int:
    """Bytes of one batch's arrays as packed (each array padded to :data:`ALIGN`)."""
    return sum(-(-part.nbytes // ALIGN) * ALIGN for part in parts)
