"""Stage a training batch for its device: parse it, and pin it when the device is CUDA.

With ``mixle train --prefetch N`` the producer thread calls :func:`stage_batch` on
every batch, so the trainer's thread receives a ready :class:`TokenBatch`: the
validation and masking of :func:`~mixle.models._inputs.parse_batch` overlap the
previous step, and on CUDA the arrays already live in page-locked (pinned) host
memory, from which the accumulator's ``.to(device, non_blocking=True)`` is a true
asynchronous copy (from ordinary pageable memory CUDA copies synchronously).

Pinning never changes a value: the pinned arrays are byte-for-byte copies of the
parsed ones, and the pinned buffers stay alive as long as the batch (the arrays are
views of them), so an asynchronous copy can never read a reused buffer.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from mixle.data._batch import Batch
from mixle.models._inputs import TokenBatch, parse_batch

__all__ = ["pin_for", "pinned_empty", "stage_batch"]

#: Allocates an uninitialised host tensor of a shape and dtype.
HostAllocator = Callable[[tuple[int, ...], torch.dtype], torch.Tensor]


def pin_for(device: torch.device) -> bool:
    """Whether batches for ``device`` are staged in pinned memory: CUDA devices only.

    Pinned memory exists only with a CUDA runtime (a CPU-only torch refuses to
    allocate it), and only a host-to-CUDA copy gains from it.
    """
    return device.type == "cuda" and torch.cuda.is_available()


def pinned_empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised page-locked host tensor (needs a CUDA runtime)."""
    return torch.empty(shape, dtype=dtype, pin_memory=True)


def _copy_into(array: np.ndarray, allocate: HostAllocator) -> np.ndarray:
    """``array`` copied into a tensor from ``allocate``; returned as a view of it."""
    source = torch.from_numpy(np.ascontiguousarray(array))
    host = allocate(tuple(source.shape), source.dtype)
    host.copy_(source)
    return host.numpy()


def stage_batch(
    batch: Batch,
    *,
    vocab: int,
    block: int,
    pin: bool,
    allocate: HostAllocator | None = None,
) -> TokenBatch:
    """Parse ``batch`` (as :func:`parse_batch` does) and, when ``pin``, pin its arrays.

    Parameters
    ----------
    batch
        A raw batch from a batch source.
    vocab, block
        As for :func:`parse_batch`.
    pin
        Copy the parsed arrays into host tensors from ``allocate`` (see
        :func:`pin_for`); ``False`` returns the parsed batch as it is.
    allocate
        Where pinned copies are made (default :func:`pinned_empty`, looked up at each
        call); tests substitute ordinary memory to run the copy without CUDA.

    Raises
    ------
    ArgumentTypeError, ArgumentError, TokenIdError
        As :func:`parse_batch`.
    """
    parsed = parse_batch(batch, vocab, block)
    if not pin:
        return parsed
    allocate = allocate or pinned_empty
    return TokenBatch(
        _copy_into(parsed.contexts, allocate),
        _copy_into(parsed.targets, allocate),
        _copy_into(parsed.weights, allocate),
        None if parsed.sequence_ids is None else _copy_into(parsed.sequence_ids, allocate),
    )
