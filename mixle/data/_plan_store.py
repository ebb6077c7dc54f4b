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
time, on first read: ``mixle.corpus.PlanFiles`` does). :func:`stored_or_built` wraps
them in :class:`VerifiedArrays`, whose ``read`` verifies a range before handing it out,
and :func:`plan_from_arrays` reads the few elements it trusts (``counts``, the first
and last start) through it and gives the layout the reader, so that every read of a
batch goes through it (:meth:`~mixle.data._packing.StreamLayout.segment`); the
sampled documents it compares with the corpus are read unverified (they only decide
whether to use the plan).

**A changed chunk is rebuilt, never trusted nor fatal.** When a read finds a range
whose bytes changed since the plan was saved (at open or mid-epoch, in the main
process or in a DataLoader worker), :class:`VerifiedArrays` builds the plan again
(a pure function of its identity: the corpus fingerprint, seed, epoch and layout, so
bitwise the arrays the intact file held), saves it under the same identity (the
store's save is atomic: a reader sees the old file or the whole new one), logs a
warning naming the file and chunk on the ``mixle.plans`` logger, and answers that read
and every later one from the rebuilt arrays. The stream's batches are those of an
intact plan; each process that finds the change rebuilds on its own (they write
identical files). A loaded plan that :func:`plan_from_arrays` rejects, and a file the
store itself refuses on open, are rebuilt with a warning too.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np

from mixle.data._documents import DocumentSource
from mixle.data._packing import StreamLayout
from mixle.errors import ArgumentTypeError, CorpusFormatError

__all__ = [
    "PLAN_FORMAT",
    "CheckedArrays",
    "PlanStore",
    "VerifiedArrays",
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
# Where a rebuilt plan is reported (mixle.corpus.storage.plan_cache logs its refusals
# there too): a warning, not warnings.warn, since no caller can act on it (the plan is
# rebuilt already) and -W error must not turn a repaired cache into a failed run.
_LOG = logging.getLogger("mixle.plans")


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


class VerifiedArrays(Mapping[str, np.ndarray]):
    """A loaded plan's arrays, read a verified range at a time; rebuilt when changed.

    Parameters
    ----------
    stored
        The arrays a store loaded, a mapping whose ``check`` verifies a range (a
        :class:`CheckedArrays`).
    rebuild
        Builds the plan's arrays again and saves them to the store (``None``: a
        changed range raises the check's error).

    Indexing (``arrays[name]``) gives the stored array, unverified (its dtype and shape
    are trusted), or the rebuilt one after a rebuild. :meth:`read` is safe to call
    from several threads (one rebuild).
    """

    def __init__(
        self,
        stored: Mapping[str, np.ndarray],
        rebuild: Callable[[], Mapping[str, np.ndarray]] | None = None,
    ) -> None:
        if not isinstance(stored, CheckedArrays):
            raise ArgumentTypeError(
                f"`stored` must have check(name, start, stop). Got {type(stored).__name__} instead."
            )
        self._stored = stored
        self._check = stored.check
        self._rebuild = rebuild
        self._rebuilt: Mapping[str, np.ndarray] | None = None
        self._lock = threading.Lock()

    def __getitem__(self, name: str) -> np.ndarray:
        rebuilt = self._rebuilt
        return self._stored[name] if rebuilt is None else rebuilt[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._stored)

    def __len__(self) -> int:
        return len(self._stored)

    @property
    def rebuilt(self) -> bool:
        """Whether the stored plan was found changed and the arrays rebuilt."""
        return self._rebuilt is not None

    def read(self, name: str, start: int, stop: int) -> np.ndarray:
        """Elements ``[start, stop)`` (``0 <= start <= stop``, clipped to the array) of
        array ``name``, verified first (O(the chunks they span), each chunk once).

        Raises
        ------
        CorpusFormatError
            The range changed since it was saved and there is no ``rebuild``; or the
            rebuilt plan does not have the stored one's arrays, dtypes, shapes and
            counts (the corpus changed under its fingerprint).
        """
        rebuilt = self._rebuilt
        if rebuilt is None:
            try:
                self._check(name, start, stop)
            except CorpusFormatError as error:
                rebuilt = self._repaired(error)
            else:
                return self._stored[name][start:stop]
        return rebuilt[name][start:stop]

    def _repaired(self, error: CorpusFormatError) -> Mapping[str, np.ndarray]:
        if self._rebuild is None:
            raise error
        with self._lock:
            if self._rebuilt is None:  # another thread may have rebuilt it meanwhile
                rebuilt = self._rebuild()
                _check_rebuilt(self._stored, self._check, rebuilt, error)
                _LOG.warning(
                    "%s The plan was rebuilt from the corpus and saved again; the stream "
                    "reads the rebuilt plan (its batches are those of the intact file).",
                    error,
                )
                self._rebuilt = rebuilt
            return self._rebuilt

    def __getstate__(self) -> dict[str, Any]:  # pragma: no cover - plans stay in-process
        return {**self.__dict__, "_lock": None}

    def __setstate__(self, state: dict[str, Any]) -> None:  # pragma: no cover
        self.__dict__.update(state, _lock=threading.Lock())

    def __repr__(self) -> str:
        return f"VerifiedArrays({self._stored!r}, rebuilt={self.rebuilt})"


def _check_rebuilt(
    stored: Mapping[str, np.ndarray],
    check: Callable[[str, int, int], None],
    rebuilt: Mapping[str, np.ndarray],
    error: CorpusFormatError,
) -> None:
    """Refuse a rebuilt plan that is not the stored one's twin: other arrays, dtypes or
    shapes (the header, which the store verified), or other ``counts`` when the stored
    ones verify (a plan loaded with them may have derived its row count from them)."""
    same = set(stored) == set(rebuilt) and all(
        np.asarray(rebuilt[n]).dtype == stored[n].dtype
        and np.asarray(rebuilt[n]).shape == stored[n].shape
        for n in stored
    )
    if same and "counts" in stored:
        try:
            check("counts", 0, stored["counts"].size)
        except CorpusFormatError:
            pass  # the counts changed too: nothing was derived from them unverified
        else:
            same = np.array_equal(stored["counts"], rebuilt["counts"])
    if not same:
        raise CorpusFormatError(
            f"{error} Rebuilding the plan from the corpus gave another plan (other arrays, "
            "shapes or counts than the file recorded): the corpus changed while it was "
            "being streamed. Open it again."
        ) from error


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

    :class:`VerifiedArrays` (or :class:`CheckedArrays`, wrapped without a rebuild) have
    ``counts`` and the first and last start read verified, and the layout reads through
    them (``reader``); a change found there without a rebuild rejects the plan.
    """
    names = ("indices", "lengths", "starts", "counts")
    if not all(name in arrays for name in names):
        return None
    int64 = np.dtype(np.int64)
    if any(arrays[n].dtype != int64 or arrays[n].ndim != 1 for n in names):
        return None
    count = arrays["indices"].shape[0]
    if (
        arrays["lengths"].shape[0] != count
        or arrays["starts"].shape[0] != count + 1
        or arrays["counts"].shape[0] != 3
    ):
        return None
    if isinstance(arrays, CheckedArrays) and not isinstance(arrays, VerifiedArrays):
        arrays = VerifiedArrays(arrays)  # no rebuild: a changed range raises
    reader = arrays.read if isinstance(arrays, VerifiedArrays) else None
    if reader is None:
        counts, first = arrays["counts"], arrays["starts"][:1]
    else:
        try:  # verified (and rebuilt when changed) before anything is derived from them
            counts, first = reader("counts", 0, 3), reader("starts", 0, 1)
            reader("starts", count, count + 1)  # the stream's length (`stream_tokens`)
        except CorpusFormatError:
            return None  # changed where the plan is judged, and no rebuild: rejected
    # Read after the verified reads: the rebuilt arrays when those found a change.
    indices, lengths, starts = arrays["indices"], arrays["lengths"], arrays["starts"]
    rows, num_batches, boundary = (int(v) for v in counts)
    if boundary != int(has_boundary) or rows < 0 or num_batches < 0 or int(first[0]) != 0:
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
    layout = StreamLayout(indices, lengths, starts, has_boundary, reader=reader)
    return layout, rows, num_batches


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
    (replacing a missing, corrupt or inconsistent one).

    Loaded :class:`CheckedArrays` reach ``check`` as :class:`VerifiedArrays` whose
    rebuild is ``build()``'s arrays, saved to ``store``: a range found changed by a later
    read (at open or mid-epoch) is rebuilt and saved then (see the module docstring).
    """
    loaded = store.load(identity)
    plan = None
    if loaded is not None:
        if isinstance(loaded, CheckedArrays):

            def rebuild() -> Mapping[str, np.ndarray]:
                arrays = build()[1]
                store.save(identity, arrays)
                return arrays

            loaded = VerifiedArrays(loaded, rebuild)
        plan = check(loaded)
        if plan is None:
            _LOG.warning(
                "the plan %s held by %r is not consistent with the corpus: it was rebuilt "
                "from the corpus and saved again.",
                _described(identity),
                store,
            )
    if plan is None:
        plan, arrays = build()
        store.save(identity, arrays)
    return plan


def _described(identity: Mapping[str, Any]) -> str:
    """The fields of a plan identity a reader tells plans apart by (a compact JSON)."""
    return json.dumps({k: identity[k] for k in sorted(identity)}, default=str)
