"""Device meshes: the data-parallel place of a rank, and context-parallel row slices.

With tensor, pipeline or context parallelism the data-parallel rank is not the global
rank. :func:`data_parallel_place` reads it from a ``torch.distributed.DeviceMesh``: the
data-parallel dimensions (e.g. replicate × shard) combine in mesh order, row-major, and
every other dimension (tp, pp, cp) is ignored, so its peers get the same place and hence
the same batches. Pass the result as ``rank=``/``world_size=`` of a stream.

:func:`context_parallel_indices` / :func:`context_parallel_slice` cut a row (its tokens,
targets, loss mask, position and document ids alike, so they stay consistent) for one
context-parallel rank: contiguous chunks, or the load-balanced zig-zag split (rank ``r``
of ``c`` takes chunks ``r`` and ``2c - 1 - r`` of ``2c``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mixle._checks import nonnegative_int, positive_int
from mixle.errors import ArgumentError

__all__ = ["context_parallel_indices", "context_parallel_slice", "data_parallel_place"]


def data_parallel_place(mesh: Any, dims: str | Sequence[str] = ("dp",)) -> tuple[int, int]:
    """``(dp_rank, dp_world_size)`` of this process in ``mesh`` over its dimensions ``dims``.

    Raises
    ------
    ArgumentError
        ``dims`` is empty, repeats a name, or names a dimension the mesh lacks (named,
        with the mesh's dimension names).
    """
    names = (dims,) if isinstance(dims, str) else tuple(dims)
    available = tuple(getattr(mesh, "mesh_dim_names", None) or ())
    if not names or len(set(names)) != len(names):
        raise ArgumentError(f"`dims` must name distinct mesh dimensions. Got {names!r} instead.")
    missing = [name for name in names if name not in available]
    if missing:
        raise ArgumentError(
            f"the device mesh has no dimension {', '.join(map(repr, missing))}; its "
            f"dimensions are {available!r}."
        )
    rank, size = 0, 1
    for name in names:
        dim_size = int(mesh.size(available.index(name)))
        rank = rank * dim_size + int(mesh.get_local_rank(name))
        size *= dim_size
    return rank, size


def context_parallel_indices(
    length: int, cp_rank: int, cp_size: int, *, zigzag: bool = False
) -> np.ndarray:
    """Positions of a row of ``length`` that context-parallel rank ``cp_rank`` of ``cp_size`` holds.

    Raises
    ------
    ArgumentError
        ``cp_rank`` is not below ``cp_size``, or ``length`` is not a multiple of
        ``cp_size`` (``2 * cp_size`` for zig-zag).
    """
    length = nonnegative_int("length", length)
    cp_size = positive_int("cp_size", cp_size)
    cp_rank = nonnegative_int("cp_rank", cp_rank)
    if cp_rank >= cp_size:
        raise ArgumentError(f"`cp_rank` must be below cp_size {cp_size}. Got {cp_rank} instead.")
    chunks = 2 * cp_size if zigzag else cp_size
    if length % chunks:
        raise ArgumentError(
            f"row length {length} must be a multiple of {chunks} "
            f"({'2 × ' if zigzag else ''}context-parallel degree {cp_size})."
        )
    chunk = length // chunks
    picked = (cp_rank, chunks - 1 - cp_rank) if zigzag else (cp_rank,)
    return np.concatenate([np.arange(c * chunk, (c + 1) * chunk) for c in picked])


def context_parallel_slice(
    arrays: Sequence[np.ndarray], cp_rank: int, cp_size: int, *, zigzag: bool = False
) -> tuple[np.ndarray, ...]:
    """Each array cut along its last axis at the same :func:`context_parallel_indices`.

    Pass a batch's arrays together (context, targets, loss mask, document ids, position
    ids): they keep their correspondence position by position.

    Raises
    ------
    ArgumentError
        The arrays differ in their last axis, or as :func:`context_parallel_indices`.
    """
    lengths = {int(np.shape(array)[-1]) for array in arrays}
    if len(lengths) != 1:
        raise ArgumentError(
            f"the arrays must share their last axis. Got lengths {sorted(lengths)} instead."
        )
    index = context_parallel_indices(lengths.pop(), cp_rank, cp_size, zigzag=zigzag)
    return tuple(np.asarray(array)[..., index] for array in arrays)
