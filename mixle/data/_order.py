"""The global document order of an epoch and its round-robin split across ranks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from mixle._checks import INT64_MAX, nonnegative_int
from mixle._gather import legacy_permutation
from mixle.data._options import ShardOptions
from mixle.errors import ArgumentError, ArgumentTypeError

__all__ = [
    "SequenceSelector",
    "as_document_indices",
    "global_document_order",
    "length_table",
    "shard_documents_for_rank",
]

SequenceSelector = Callable[[np.ndarray, int, int], Any]
"""``(order, seed, epoch) -> order``: may reorder, filter or repeat document indices."""


def as_document_indices(values: Any, what: str, num_documents: int | None) -> np.ndarray:
    """Validate document indices and return them as a 1-D int64 array.

    Parameters
    ----------
    values
        Array-like of integer indices.
    what
        How messages name the input, e.g. ``"`indices`"``.
    num_documents
        Exclusive upper bound of a valid index, or ``None`` for "any nonnegative".

    Raises
    ------
    ArgumentTypeError
        ``values`` is not 1-D or does not hold integers (bools and floats included).
    ArgumentError
        An index is negative or ``>= num_documents``; the message names the position.
    """
    array = np.asarray(values)
    if array.ndim != 1:
        raise ArgumentTypeError(
            f"{what} must be a 1-D sequence of document indices. Got shape {array.shape} instead."
        )
    if array.size == 0:
        return np.empty(0, dtype=np.int64)
    if array.dtype.kind not in "iu":
        raise ArgumentTypeError(
            f"{what} must hold integer document indices. Got dtype {array.dtype} instead."
        )
    if array.dtype == np.uint64 and bool((array > np.uint64(INT64_MAX)).any()):
        position = int(np.flatnonzero(array > np.uint64(INT64_MAX))[0])
        raise ArgumentError(
            f"{what} has document index {int(array[position])} at position {position}, "
            "which is out of range."
        )
    result = array.astype(np.int64, copy=False)
    bad = result < 0
    if num_documents is not None:
        bad |= result >= num_documents
    if bad.any():
        position = int(np.flatnonzero(bad)[0])
        bound = f"0 to {num_documents - 1}" if num_documents else "none (no documents)"
        if num_documents is None:
            bound = "nonnegative integers"
        raise ArgumentError(
            f"{what} has document index {int(result[position])} at position {position}; "
            f"valid indices are {bound}."
        )
    return result


def length_table(lengths: Any) -> np.ndarray:
    """Document lengths in the narrowest integer dtype that holds them all.

    Planning an epoch gathers every length in shuffled order (10M random reads for 10M
    documents). Documents of fewer than 65,536 tokens fit in a 2-byte table, a quarter
    of the int64 one, so the gather misses the cache less, and the table kept beside a
    stream costs a quarter of the memory. Values are unchanged; sums and cumulative
    sums over the table must ask for an int64 result.
    """
    array = np.asarray(lengths)
    if array.size == 0:
        return np.empty(0, dtype=np.uint8)
    dtype = np.result_type(
        np.min_scalar_type(int(array.min())), np.min_scalar_type(int(array.max()))
    )
    return array.astype(dtype)


def global_document_order(
    num_documents: int,
    *,
    seed: int,
    epoch: int,
    sequence_selector: SequenceSelector | None = None,
) -> np.ndarray:
    """The order in which all ranks together consume the documents in ``epoch``.

    A pure function of its inputs: the same ``(num_documents, seed, epoch)`` gives a
    bitwise-identical int64 permutation of ``range(num_documents)`` in every call and
    every process (a legacy ``RandomState``, whose stream numpy freezes, keyed by
    ``SeedSequence([seed, epoch])``). Another ``epoch`` gives another order.

    Parameters
    ----------
    num_documents, seed, epoch
        Nonnegative exact integers; ``num_documents=0`` gives an empty order.
    sequence_selector
        Optional curriculum hook ``(order, seed, epoch) -> order`` applied to the base
        permutation; it may reorder, filter or repeat indices. ``None`` passes the
        permutation through.

    Returns
    -------
    numpy.ndarray
        1-D int64 document indices.

    Raises
    ------
    ArgumentTypeError
        An argument is a bool, float or non-integer; ``sequence_selector`` is not callable
        or returns something that is not 1-D integer indices.
    ArgumentError
        An argument is negative, or the selector returns an index outside
        ``[0, num_documents)``.

    Complexity: O(num_documents) time and memory.
    """
    count = nonnegative_int("num_documents", num_documents)
    seed = nonnegative_int("seed", seed)
    epoch = nonnegative_int("epoch", epoch)
    if sequence_selector is not None and not callable(sequence_selector):
        raise ArgumentTypeError(
            "`sequence_selector` must be callable (order, seed, epoch) -> order or None. "
            f"Got {type(sequence_selector).__name__} instead."
        )
    order = legacy_permutation(np.random.MT19937(np.random.SeedSequence([seed, epoch])), count)
    if sequence_selector is None:
        return order
    return as_document_indices(
        sequence_selector(order, seed, epoch), "the order returned by `sequence_selector`", count
    )


def shard_documents_for_rank(order: Any, rank: int, world_size: int) -> np.ndarray:
    """Rank ``rank``'s share of ``order``: ``order[rank::world_size]`` as int64.

    Disjoint across ranks and complete: concatenating every rank's share, position by
    position, gives back ``order``.

    Raises
    ------
    ArgumentTypeError
        ``order`` is not 1-D integers, or ``rank``/``world_size`` are not integers.
    ArgumentError
        ``world_size < 1``, ``rank < 0`` or ``rank >= world_size``, or ``order`` holds a
        negative index.
    """
    shard = ShardOptions(rank, world_size)
    indices = as_document_indices(order, "`order`", None)
    return indices[shard.rank :: shard.world_size].copy()
