"""Stream ``(context window, next token)`` micro-batches without materialising windows.

:func:`stream_token_source` is the seed API over an in-memory token-id array: only the
array (and, with ``shuffle=True``, one O(corpus) permutation of window starts per
epoch) stays resident; each batch's ``(b, block)`` windows are gathered on the fly and
dropped by the caller. Ids are validated once, at call time, and stay int64 all the way
to the yielded batches: they are never narrowed to float32, which would silently merge
distinct ids at and above ``2**24``.

A window is ``tokens[i : i + block]`` and its target is ``tokens[i + block]``, for every
``i`` in ``[0, len(tokens) - block)``; each epoch visits every window exactly once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from mixle._checks import as_token_ids, nonnegative_int, positive_int
from mixle.errors import ArgumentTypeError, TokenIdError

__all__ = ["stream_token_source"]

Batch = tuple[np.ndarray, np.ndarray]


def _check_flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise ArgumentTypeError(
            f"`{name}` must be a bool. Got {value!r} ({type(value).__name__}) instead."
        )
    return bool(value)


def _token_array(token_ids: Any) -> np.ndarray:
    if isinstance(token_ids, list | tuple):
        # np.asarray([0, True]) is array([0, 1]): a bool would pass as the id 1 silently.
        for position, item in enumerate(token_ids):
            if isinstance(item, bool | np.bool_):
                raise TokenIdError(
                    f"`token_ids` has non-integer token id {item!r} at position {position}."
                )
    return as_token_ids(token_ids, "`token_ids`")


def _array_batches(
    tokens: np.ndarray, block: int, batch_size: int, epochs: int, shuffle: bool, seed: int
) -> Iterator[Batch]:
    num_windows = max(tokens.shape[0] - block, 0)
    if num_windows == 0 or epochs == 0:
        return
    # A read-only strided view: row i is tokens[i:i+block]. Indexing it with a batch of
    # starts copies just those (b, block) rows; the full window matrix never exists.
    windows = np.lib.stride_tricks.sliding_window_view(tokens, block)
    rng = np.random.default_rng(seed)
    for _epoch in range(epochs):
        order = rng.permutation(num_windows) if shuffle else None
        for first in range(0, num_windows, batch_size):
            last = min(first + batch_size, num_windows)
            starts = order[first:last] if order is not None else np.arange(first, last)
            yield windows[starts], tokens[starts + block]


def stream_token_source(
    token_ids: Any,
    block: int,
    batch_size: int,
    *,
    epochs: int = 1,
    shuffle: bool = True,
    seed: int = 0,
) -> Iterator[Batch]:
    """Yield ``(context_windows, next_tokens)`` micro-batches; never buffer windows.

    Every argument is validated when this function is *called*, before the returned
    iterator produces anything.

    Parameters
    ----------
    token_ids
        A 1-D array-like of token ids: integers, or floats holding finite exact
        integers, all within the int64 range. Converted once to int64 (no copy when it
        already is int64).
    block
        Context length, a positive int.
    batch_size
        Windows per batch, a positive int. The last batch of an epoch may be smaller.
    epochs
        Passes over all windows, a nonnegative int; ``0`` is an explicit no-op.
    shuffle
        Visit windows in a fresh random order each epoch (one O(len(token_ids))
        permutation array per epoch); ``False`` visits them in stream order.
    seed
        Nonnegative int; the same seed gives the same batches, in any process.

    Returns
    -------
    Iterator[tuple[numpy.ndarray, numpy.ndarray]]
        Batches ``(context, next_tokens)`` with ``context`` an int64 ``(b, block)`` array
        (``context[j] == token_ids[s : s + block]``) and ``next_tokens`` an int64 ``(b,)``
        array (``token_ids[s + block]``), ``1 <= b <= batch_size``. With
        ``len(token_ids) <= block`` there are no windows and nothing is yielded.
        Each batch is a fresh array the caller may keep or modify.

    Raises
    ------
    ArgumentTypeError
        ``block``, ``batch_size``, ``epochs`` or ``seed`` is not an int (bools and floats
        are rejected); ``shuffle`` is not a bool; ``token_ids`` is not 1-D or not numeric.
    ArgumentError
        ``block`` or ``batch_size`` is not positive, ``epochs`` or ``seed`` is negative.
    TokenIdError
        A token id is non-finite, fractional or outside int64 (message gives position).

    Notes
    -----
    Memory is O(len(token_ids)) for the ids, plus one permutation per epoch when
    shuffling, plus O(batch_size x block) per batch. Time per batch is
    O(batch_size x block).

    Examples
    --------
    >>> import numpy as np
    >>> batches = stream_token_source(np.arange(10), block=4, batch_size=3, shuffle=False)
    >>> context, target = next(batches)
    >>> context.tolist(), target.tolist()
    ([[0, 1, 2, 3], [1, 2, 3, 4], [2, 3, 4, 5]], [4, 5, 6])
    """
    block = positive_int("block", block)
    batch_size = positive_int("batch_size", batch_size)
    epochs = nonnegative_int("epochs", epochs)
    seed = nonnegative_int("seed", seed)
    shuffle = _check_flag("shuffle", shuffle)
    tokens = _token_array(token_ids)
    return _array_batches(tokens, block, batch_size, epochs, shuffle, seed)
