"""Epoch plans kept across processes: what a plan store must do, and nothing about files.

Planning an epoch of ``N`` documents is O(N) (a permutation and a gather of the
lengths in that order: about 1 s for 10M documents). A resumed run plans the same
epochs again; a :class:`PlanStore` lets it load them instead. The data layer hands the
store a plan as a few named int64 arrays together with the *plan identity* (the
stream identity, the epoch and the plan format), and asks for them back by that
identity. The store decides where and how they live (``mixle.corpus.storage.plan_cache``
keeps them in memory-mapped files); it must return ``None`` for a plan it does not hold
or cannot read, never a plan of another identity.

:func:`plan_arrays` and :func:`plan_from_arrays` convert between a
:class:`~mixle.data._packing.StreamLayout` with its row and batch counts and those
arrays. :func:`plan_from_arrays` checks the arrays' shapes, the layout's end points and
a sample of documents against the corpus lengths, so a truncated or mangled plan is
rejected (and rebuilt by the caller) instead of producing wrong batches.

A store may hand back :class:`CheckedArrays` (arrays whose bytes it verifies a range at a
time, on first read: ``mixle.corpus.PlanFiles`` does). Then :func:`plan_from_arrays`
verifies the few elements it trusts (``counts``, the first and last start; changed
ones make the plan rejected, so rebuilt) and gives
the layout the check, so that every read of a batch goes through it
(:meth:`~mixle.data._packing.StreamLayout.segment`); the sampled documents it compares
with the corpus are read unverified (they only decide whether to use the plan).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np

from mixle.data._documents import DocumentSource
from mixle.data._packing import StreamLayout
from mixle.errors import ArgumentTypeError, CorpusFormatError

__all__ = [
    "PLAN_FORMAT",
    "CheckedArrays",
    "PlanStore",
    "checked_plan_store",
    "plan_arrays",
    "plan_from_arrays",
    "sampled_lengths",
    "stored_or_built",
]

Plan = TypeVar("Plan")

# Bumped whenever the arrays below change meaning.
PLAN_FORMAT = 1
# Documents of a loaded plan checked against the corpus lengths (spread over the plan).
_SAMPLES = 64


@runtime_checkable
class PlanStore(Protocol):
    """Keeps epoch plans by identity.

    ``load(identity)`` returns the arrays saved with an identity equal to ``identity``
    (read-only arrays are fine, memory-mapped ones preferred), or ``None``;
    ``save(identity, arrays)`` keeps them, replacing any plan of that identity, so that
    a concurrent or later ``load`` sees either nothing or the complete plan.
    """

    def load(self, identity: Mapping[str, Any]) -> Mapping[str, np.ndarray] | None: ...

    def save(self, identity: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None: ...


@runtime_checkable
class CheckedArrays(Protocol):
    """Loaded plan arrays whose bytes are verified on first read.

    ``check(name, start, stop)`` verifies elements ``[start, stop)`` (clipped) of array
    ``name`` before they are read, and raises (naming the file and the part) when they
    changed since they were saved.
    """

    def check(self, name: str, start: int, stop: int) -> None: ...


def checked_plan_store(value: Any) -> PlanStore | None:
    """``value`` when it is ``None`` or a :class:`PlanStore`.

    Raises
    ------
    ArgumentTypeError
        Anything else.
    """
    if value is not None and not isinstance(value, PlanStore):
        raise ArgumentTypeError(
            "`plan_store` must have load(identity) and save(identity, arrays). "
            f"Got {type(value).__name__} instead."
        )
    return value


def plan_arrays(layout: StreamLayout, rows: int, num_batches: int) -> dict[str, np.ndarray]:
    """The arrays that describe a plan: ``indices``, ``lengths``, ``starts`` and ``counts``
    (``[rows, num_batches, has_boundary]``), all int64."""
    counts = np.array([rows, num_batches, int(layout.has_boundary)], dtype=np.int64)
    return {
        "indices": layout.indices,
        "lengths": layout.lengths,
        "starts": layout.starts,
        "counts": counts,
    }


def plan_from_arrays(
    arrays: Mapping[str, np.ndarray],
    num_documents: int,
    lengths_of: Callable[[np.ndarray], np.ndarray],
    has_boundary: bool,
) -> tuple[StreamLayout, int, int] | None:
    """``(layout, rows, num_batches)`` from :func:`plan_arrays` output, or ``None`` when
    the arrays are not a consistent plan for a corpus of ``num_documents`` documents
    whose lengths ``lengths_of(indices)`` returns.

    Checks dtypes and shapes, ``starts[0] == 0``, the stream length against the lengths,
    the recorded boundary flag, and ``_SAMPLES`` documents spread over the plan (index in
    range, length equal to the corpus's, start consistent with its neighbour's).
    """
    try:
        indices, lengths = arrays["indices"], arrays["lengths"]
        starts, counts = arrays["starts"], arrays["counts"]
    except KeyError:
        return None
    int64 = np.dtype(np.int64)
    if any(a.dtype != int64 or a.ndim != 1 for a in (indices, lengths, starts, counts)):
        return None
    count = indices.shape[0]
    if lengths.shape[0] != count or starts.shape[0] != count + 1 or counts.shape[0] != 3:
        return None
    check = arrays.check if isinstance(arrays, CheckedArrays) else None
    if check is not None:
        try:
            check("counts", 0, 3)
            check("starts", 0, 1)
            check("starts", count, count + 1)
        except CorpusFormatError:
            return None  # changed where the loaded plan is judged: rebuilt
    rows, num_batches, boundary = (int(v) for v in counts)
    if boundary != int(has_boundary) or rows < 0 or num_batches < 0 or int(starts[0]) != 0:
        return None
    if count:
        # Evenly spread, increasing; repeats (count < _SAMPLES) are harmless. (np.unique
        # would import numpy.ma on first use: ~200 ms of a fresh process's restart.)
        picks = np.linspace(0, count - 1, min(count, _SAMPLES)).astype(np.int64)
        documents = indices[picks]
        if documents.min() < 0 or documents.max() >= num_documents:
            return None
        if not np.array_equal(lengths[picks], lengths_of(documents)):
            return None
        pieces = lengths[picks] + (1 if has_boundary else 0)
        pieces[picks == count - 1] = lengths[count - 1]  # the last document has no boundary
        if not np.array_equal(starts[picks + 1] - starts[picks], pieces):
            return None
    return StreamLayout(indices, lengths, starts, has_boundary, check=check), rows, num_batches


def sampled_lengths(
    documents: DocumentSource, lengths: np.ndarray | None, indices: np.ndarray
) -> np.ndarray:
    """Lengths of a few documents (int64): from ``lengths`` when it has been read, else
    from the documents themselves (so checking a loaded plan never reads every length)."""
    if lengths is not None:
        return np.asarray(lengths[indices], dtype=np.int64)
    return np.array(list(map(len, documents.take(indices.tolist()))), dtype=np.int64)


def stored_or_built(
    store: PlanStore,
    identity: Mapping[str, Any],
    check: Callable[[Mapping[str, np.ndarray]], Plan | None],
    build: Callable[[], tuple[Plan, Mapping[str, np.ndarray]]],
) -> Plan:
    """The plan of ``identity`` loaded from ``store`` when ``check`` accepts its arrays,
    else ``build()``'s plan, whose arrays are saved to ``store`` under ``identity``
    (replacing a missing, corrupt or inconsistent one)."""
    arrays = store.load(identity)
    plan = None if arrays is None else check(arrays)
    if plan is None:
        plan, arrays = build()
        store.save(identity, arrays)
    return plan
