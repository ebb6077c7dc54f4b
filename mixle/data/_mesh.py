"""Device meshes: the data-parallel place of a rank, and context-parallel row slices.

With tensor, pipeline or context parallelism the data-parallel rank is not the global
rank. :func:`data_parallel_place` reads it from a ``torch.distributed.DeviceMesh``: the
data-parallel dimensions (e.g. replicate × shard) combine in mesh order, row-major, and
every other dimension (tp, pp, cp) is ignored, so its peers get the same place and hence
the same batches. The streams (``StreamingCorpus``, ``TokenStream``, ``Mixture``) and
:class:`~mixle.data._dcp.DcpLoaderState` take ``mesh=``/``dp_dims=`` in place of
``rank=``/``world_size=`` and resolve them here (:func:`place_from_mesh`); the torch
datasets take them to check that their stream was built for this rank's place.

:func:`context_parallel_indices` / :func:`context_parallel_slice` cut a row (its tokens,
targets, loss mask, position and document ids alike, so they stay consistent) for one
context-parallel rank: contiguous chunks, or the load-balanced zig-zag split (rank ``r``
of ``c`` takes chunks ``r`` and ``2c - 1 - r`` of ``2c``); :func:`context_parallel_batch`
cuts a whole :class:`~mixle.data.Batch`, each per-token field alike, per-row fields kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from mixle._checks import nonnegative_int, positive_int
from mixle.data._batch import Batch
from mixle.data._options import ShardOptions
from mixle.errors import ArgumentError

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = [
    "DpDims",
    "PlacedStream",
    "check_stream_place",
    "context_parallel_batch",
    "context_parallel_indices",
    "context_parallel_slice",
    "data_parallel_place",
    "dim_names",
    "place_from_mesh",
]

#: The data-parallel dimensions of a mesh: one name or several (replicate × shard).
DpDims = str | Sequence[str]


def dim_names(dims: DpDims) -> tuple[str, ...]:
    """``dims`` as a tuple of names (one name given alone is a 1-tuple)."""
    return (dims,) if isinstance(dims, str) else tuple(dims)


@runtime_checkable
class PlacedStream(Protocol):
    """A stream that states its data-parallel place (``shard.rank``, ``shard.world_size``):
    ``StreamingCorpus``, ``TokenStream`` and ``Mixture`` do."""

    shard: ShardOptions


def data_parallel_place(mesh: DeviceMesh, dims: DpDims = ("dp",)) -> tuple[int, int]:
    """``(dp_rank, dp_world_size)`` of this process in ``mesh`` over its dimensions ``dims``.

    Raises
    ------
    ArgumentError
        ``dims`` is empty, repeats a name, or names a dimension the mesh lacks (named,
        with the mesh's dimension names).
    """
    names = dim_names(dims)
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


def place_from_mesh(
    mesh: DeviceMesh | None, dp_dims: DpDims, rank: int | None, world_size: int | None
) -> tuple[int | None, int | None]:
    """A stream's ``(rank, world_size)``: as given without a mesh, else the mesh's
    :func:`data_parallel_place` over ``dp_dims``.

    Raises
    ------
    ArgumentError
        Both a mesh and ``rank``/``world_size`` are given, or as :func:`data_parallel_place`.
    """
    if mesh is None:
        return rank, world_size
    if rank is not None or world_size is not None:
        raise ArgumentError(
            "give either `mesh` (with `dp_dims`) or `rank`/`world_size`, not both: the mesh "
            f"defines the data-parallel place. Got rank={rank!r}, world_size={world_size!r}."
        )
    return data_parallel_place(mesh, dp_dims)


def check_stream_place(
    kind: str, place: tuple[int, int], mesh: DeviceMesh, dp_dims: DpDims
) -> None:
    """Refuse a stream built for another data-parallel place than this rank's in ``mesh``.

    Raises
    ------
    ArgumentError
        ``place`` (the stream's ``(rank, world_size)``) differs from the mesh's (both
        named, with the dimensions), or as :func:`data_parallel_place`.
    """
    expected = data_parallel_place(mesh, dp_dims)
    if place != expected:
        names = dim_names(dp_dims)
        raise ArgumentError(
            f"{kind}: the stream is built for rank {place[0]} of {place[1]} but this "
            f"process's data-parallel place in the mesh (dims {names!r}) is rank "
            f"{expected[0]} of {expected[1]}: build the stream with mesh=, dp_dims=."
        )


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


def context_parallel_batch(
    batch: Batch[np.ndarray], cp_rank: int, cp_size: int, *, zigzag: bool = False
) -> Batch[np.ndarray]:
    """This context-parallel rank's part of ``batch``: every per-token field (``context``,
    ``targets`` of packed rows, ``loss_mask``, ``document_ids``, ``position_ids``) cut at
    the same :func:`context_parallel_indices`; per-row fields (``source_ids``, the
    ``(b,)`` next tokens of windows) kept whole.

    Document ids and in-document positions travel with their tokens, so a document's
    boundaries (where ``document_ids`` changes, where ``position_ids`` restarts at 0)
    are exact on each part, zig-zag included (there the part's two chunks are far
    apart: compare ids, not neighbours across the seam). Without ``position_ids`` the
    row positions of the part are ``context_parallel_indices(block, cp_rank, cp_size)``.

    Raises
    ------
    ArgumentError
        As :func:`context_parallel_indices` for the batch's row length.
    """
    block = int(np.shape(batch.context)[-1])
    index = context_parallel_indices(block, cp_rank, cp_size, zigzag=zigzag)
    shape = np.shape(batch.context)
    return batch.map(
        lambda array: np.asarray(array)[..., index] if np.shape(array) == shape else array
    )
