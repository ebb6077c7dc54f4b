"""Reusable resume checks for any iterator with ``state_dict`` / ``load_state_dict``.

``assert_resumes_at_every_step`` runs an iterator uninterrupted, saving its state
(through a JSON round trip) before every item, then restores a fresh iterator from each
saved state and checks that it produces exactly the rest of the uninterrupted stream.
Works for ``StreamingCorpus``, ``TokenStream`` or anything shaped like them.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import numpy as np


class Resumable(Protocol):
    def __iter__(self) -> Any: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Any) -> None: ...


def assert_items_equal(actual: Any, expected: Any) -> None:
    """Bitwise equality for arrays, tensors and (nested) tuples/lists of them."""
    if isinstance(expected, tuple | list):
        assert isinstance(actual, tuple | list) and len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            assert_items_equal(a, e)
        return
    actual_array, expected_array = np.asarray(actual), np.asarray(expected)
    assert actual_array.dtype == expected_array.dtype, (actual_array.dtype, expected_array.dtype)
    assert actual_array.shape == expected_array.shape, (actual_array.shape, expected_array.shape)
    assert actual_array.tobytes() == expected_array.tobytes()


def json_round_trip(state: dict[str, Any]) -> dict[str, Any]:
    """The state as it comes back from a JSON checkpoint (proves it is JSON-able)."""
    return json.loads(json.dumps(state))  # type: ignore[no-any-return]


def _take(iterable: Iterable[Any], count: int | None) -> list[Any]:
    return list(iterable if count is None else itertools.islice(iterable, count))


def assert_resumes_at_every_step(
    make: Callable[[], Resumable],
    *,
    steps: int | None = None,
    compare: Callable[[Any, Any], None] = assert_items_equal,
) -> list[Any]:
    """Restore from the state before every item and compare the rest of the stream.

    Parameters
    ----------
    make
        Builds a fresh iterator in its initial state (same arguments every call).
    steps
        Items of the uninterrupted run to check (``None``: until it is exhausted — the
        iterator must then be finite). Restored runs are compared on the remaining
        ``steps - i`` items. Cost: O(steps**2) items.
    compare
        ``compare(actual, expected)`` for one item; bitwise by default.

    Returns
    -------
    list
        The uninterrupted items, for further checks.
    """
    reference = make()
    iterator = iter(reference)
    states = [json_round_trip(reference.state_dict())]
    items: list[Any] = []
    for item in iterator if steps is None else itertools.islice(iterator, steps):
        items.append(item)
        states.append(json_round_trip(reference.state_dict()))
    for position, state in enumerate(states):
        restored = make()
        restored.load_state_dict(state)
        expected = items[position:]
        actual = _take(iter(restored), len(expected) if steps is not None else None)
        assert len(actual) == len(expected), (position, len(actual), len(expected))
        for a, e in zip(actual, expected, strict=True):
            compare(a, e)
    return items


def assert_resumes_on_two_ranks(
    make: Callable[..., Resumable], *, skip: int, steps: int = 3, batch_size: int = 4
) -> None:
    """A state saved on one rank after ``skip`` batches resumes on two ranks of half the
    batch size: the ranks' batches, concatenated, are the rest of the one-rank stream.

    ``make(rank=, world_size=, batch_size=)`` builds the iterator (a global-layout one).
    """
    reference = make(rank=0, world_size=1, batch_size=batch_size)
    stream = iter(reference)
    for _ in range(skip):
        next(stream)
    state = reference.state_dict()
    expected = [next(stream) for _ in range(steps)]
    halves = [make(rank=r, world_size=2, batch_size=batch_size // 2) for r in range(2)]
    for half in halves:
        half.load_state_dict(state)
    got = [[next(it) for _ in range(steps)] for it in map(iter, halves)]
    for step in range(steps):
        assert_items_equal(
            tuple(np.concatenate(p) for p in zip(got[0][step], got[1][step], strict=True)),
            expected[step],
        )
