"""Checks of a ``StatefulDataLoader`` state before ``loader_state_for`` rewrites it.

A state saved with ``n`` workers must hold one snapshot per worker ``0 .. n-1``, each
under its own key (``worker_<w>``), labelled with its worker id and carrying a dataset
state saved by that worker of ``n`` (``stream.worker``, ``stream.num_workers``): a
missing snapshot would make the resumed loader skip that worker's batches, a copied one
repeat another's. Every field read is type- and range-checked; each refusal is a
:class:`~mixle.errors.StateMismatchError` naming the field or the worker and the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mixle.errors import StateMismatchError

__all__ = ["MAX_POSITION", "saved_workers"]


#: Largest saved epoch, batch or yielded count accepted (int64 arithmetic downstream).
MAX_POSITION = 2**63 - 1


def _field(kind: str, where: str, value: Any, expected: type) -> Any:
    """``value`` if it is an ``expected`` (``Mapping`` or ``int``, never a bool), else
    the error naming the field ``where``, what it must be and what it is."""
    if isinstance(value, expected) and not isinstance(value, bool):
        return value
    shown = "a dict" if expected is Mapping else "an integer"
    raise StateMismatchError(
        f"{kind} loader state is not a StatefulDataLoader state_dict: `{where}` must be "
        f"{shown}. Got {_short(value)} ({type(value).__name__}) instead."
    )


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, int) or value.bit_length() <= 64 else "a huge int"
    return text if len(text) <= 80 else text[:77] + "..."


def _count(kind: str, where: str, value: Any, low: int) -> int:
    """An int field in ``[low, 2**63)``, else the error naming it."""
    value = _field(kind, where, value, int)
    if not low <= value <= MAX_POSITION:
        raise StateMismatchError(
            f"{kind} loader state field `{where}` must be an integer in [{low}, 2**63). "
            f"Got {_short(value)} instead."
        )
    return int(value)


def saved_workers(
    kind: str, state: Any, main_keys: tuple[str, ...]
) -> tuple[dict[str, Any], list[tuple[int, int, Mapping[str, Any]]]]:
    """The main-process fields (``main_keys``, all required) of a ``StatefulDataLoader``
    state and, per saved worker, ``(worker, num_workers, dataset state)``, checked to be
    workers ``0 .. n-1`` once each (the dataset states themselves are the caller's to
    check against its stream).

    Raises
    ------
    StateMismatchError
        A field missing or malformed, a worker missing or repeated (each named).
    """
    _field(kind, "state", state, Mapping)
    saved: list[tuple[int, int, Mapping[str, Any]]] = []
    if "_snapshot" not in state:
        main = {key: state[key] for key in main_keys if key in state}
        item = _field(kind, "dataset_state", state.get("dataset_state"), Mapping)
        saved.append((0, 1, item))
    else:
        snapshot = _field(kind, "_snapshot", state["_snapshot"], Mapping)
        main = dict(_field(kind, "_main_snapshot", snapshot.get("_main_snapshot"), Mapping))
        snapshots = _field(kind, "_worker_snapshots", snapshot.get("_worker_snapshots"), Mapping)
        count = _count(kind, "_num_workers", main.get("_num_workers"), 1)
        for key, value in snapshots.items():
            value = _field(kind, f"_worker_snapshots.{key}", value, Mapping)
            worker = _count(kind, f"_worker_snapshots.{key}.worker_id", value.get("worker_id"), 0)
            if key != f"worker_{worker}" and f"worker_{worker}" in snapshots:
                raise StateMismatchError(
                    f"{kind} loader state: the snapshot of worker {worker} appears twice "
                    f"(under 'worker_{worker}' and {_short(key)}); a loader of {count} "
                    "workers has one snapshot per worker."
                )
            if key != f"worker_{worker}" or worker >= count:
                raise StateMismatchError(
                    f"{kind} loader state: the snapshot under {_short(key)} is of worker "
                    f"{worker}; a loader of {count} workers has worker_0 .. "
                    f"worker_{count - 1}, each under its own key."
                )
            item = _field(
                kind, f"_worker_snapshots.{key}.dataset_state", value.get("dataset_state"), Mapping
            )
            saved.append((worker, count, item))
        # Each saved worker is < count under its own (unique) key, so a worker is missing
        # exactly when fewer than `count` were saved; the first gap is found in
        # len(saved) + 1 steps (`count` itself may be huge).
        present = {worker for worker, _, _ in saved}
        if len(present) < count:
            missing = next(w for w in range(count) if w not in present)
            raise StateMismatchError(
                f"{kind} loader state of {count} workers lacks the snapshot of worker "
                f"{missing}: resuming would skip its batches."
            )
    missing_keys = [key for key in main_keys if key not in main]
    if missing_keys:
        raise StateMismatchError(
            f"{kind} loader state is not a StatefulDataLoader state_dict: "
            f"{', '.join(missing_keys)} missing."
        )
    _count(kind, "_sampler_iter_yielded", main["_sampler_iter_yielded"], 0)
    for worker, count, item in saved:
        stream = item.get("stream")
        if not isinstance(stream, Mapping) or (
            stream.get("worker"),
            stream.get("num_workers"),
        ) != (worker, count):
            shown = (
                (stream.get("worker"), stream.get("num_workers"))
                if isinstance(stream, Mapping)
                else stream
            )
            raise StateMismatchError(
                f"{kind} loader state: the dataset state saved for worker {worker} of {count} "
                f"says (worker, num_workers) = {_short(shown)}: a snapshot of another worker, "
                "copied or edited."
            )
    return main, saved
