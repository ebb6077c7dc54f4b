"""The one resumable cursor of the data layer: ``(epoch, index)`` plus its state dict.

Every resumable iterator of mixle (``StreamingCorpus``, ``TokenStream``, the torch
adapters, the training sources) keeps its position in a :class:`Cursor`. The index
counts what the iterator counts — ``"batch"`` (per-rank batches), ``"position"``
(windows of a ``TokenStream``) or ``"row"`` (global rows of the global layout) — and
names the state-dict key. A state dict is::

    {"version": v, "epoch": e, <index key>: i, [extra cursor fields], "stream": {...}}

where ``"stream"`` (:data:`STREAM_KEY`) is the *stream identity*: a flat dict of
everything that defines the stream (corpus fingerprint, seed, block, ...). Loading a
state checks the version, the fields, that every cursor field is a nonnegative integer,
that the identity matches (every differing field named with both values, e.g. "seed in
checkpoint: 3 / in stream: 4") and that the position lies inside the epoch; nothing
moves unless every check passes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from mixle.errors import StateMismatchError

__all__ = ["STREAM_KEY", "Cursor", "check_state", "identity_differences"]

STREAM_KEY = "stream"
"""The state-dict key holding the stream identity."""


def identity_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """``"key in checkpoint: a / in stream: b"`` for every field where the two differ."""
    return [
        f"{key} in checkpoint: {saved.get(key, '<absent>')!r} / in stream: {current.get(key, '<absent>')!r}"
        for key in sorted(set(saved) | set(current))
        if saved.get(key, "<absent>") != current.get(key, "<absent>")
    ]


def check_state(
    state: Any,
    *,
    kind: str,
    version: int,
    stream: Mapping[str, Any],
    cursor_fields: tuple[str, ...],
) -> None:
    """Raise unless ``state`` is a version-``version`` state of the stream ``stream``.

    Parameters
    ----------
    state
        The dict given to ``load_state_dict``.
    kind
        The iterator's name, used in messages (e.g. ``"StreamingCorpus"``).
    version
        The only state version accepted here.
    stream
        The identity fields of the stream being restored into.
    cursor_fields
        Keys that must be present besides ``"version"`` and ``"stream"``; each must
        be a nonnegative int.

    Raises
    ------
    StateMismatchError
        The state is not a dict, has another version, lacks a field, has a bad
        cursor value, or belongs to a different stream (every differing field named).
    """
    if not isinstance(state, Mapping):
        raise StateMismatchError(
            f"{kind} state must be a dict from state_dict(). Got {type(state).__name__} instead."
        )
    if state.get("version") != version:
        raise StateMismatchError(
            f"{kind} state has version {state.get('version')!r}; this mixle reads version {version}."
        )
    missing = [key for key in (STREAM_KEY, *cursor_fields) if key not in state]
    if missing:
        raise StateMismatchError(f"{kind} state lacks the field(s) {', '.join(missing)}.")
    for key in cursor_fields:
        value = state[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise StateMismatchError(
                f"{kind} state field `{key}` must be a nonnegative integer. Got {value!r} instead."
            )
    saved = state[STREAM_KEY]
    if not isinstance(saved, Mapping):
        raise StateMismatchError(f"{kind} state field `{STREAM_KEY}` must be a dict.")
    differences = identity_differences(saved, stream)
    if differences:
        raise StateMismatchError(
            f"{kind} state belongs to a different stream: " + "; ".join(differences) + "."
        )


class Cursor:
    """A position ``(epoch, index)`` in an across-epochs stream, with its state dict.

    Parameters
    ----------
    kind
        The owner's name, used in error messages.
    index_key
        What ``index`` counts and its state-dict key (``"batch"``, ``"position"``,
        ``"row"``).
    version
        The state-dict version written and read.
    extra
        Further nonnegative-integer cursor fields the owner stores after the index
        (e.g. ``("done",)``), passed to :meth:`state_dict` and returned by :meth:`load`.
    """

    __slots__ = ("epoch", "extra", "index", "index_key", "kind", "version")

    def __init__(
        self, kind: str, *, index_key: str = "batch", version: int = 1, extra: tuple[str, ...] = ()
    ) -> None:
        self.kind = kind
        self.index_key = index_key
        self.version = version
        self.extra = extra
        self.epoch = 0
        self.index = 0

    @property
    def position(self) -> tuple[int, int]:
        """``(epoch, index)``."""
        return self.epoch, self.index

    def move(self, epoch: int, index: int) -> None:
        """Set the position (no checks: callers pass positions they computed)."""
        self.epoch, self.index = epoch, index

    def state_dict(self, identity: Mapping[str, Any], **extra: int) -> dict[str, Any]:
        """``{"version", "epoch", <index_key>, *extra, "stream": identity}`` (JSON-able)."""
        return {
            "version": self.version,
            "epoch": self.epoch,
            self.index_key: self.index,
            **extra,
            STREAM_KEY: dict(identity),
        }

    def check(self, state: Any, identity: Mapping[str, Any]) -> tuple[int, int]:
        """Validate ``state`` against this cursor and ``identity``; return its position.

        Raises
        ------
        StateMismatchError
            See :func:`check_state`.
        """
        check_state(
            state,
            kind=self.kind,
            version=self.version,
            stream=identity,
            cursor_fields=("epoch", self.index_key, *self.extra),
        )
        return int(state["epoch"]), int(state[self.index_key])

    def past_end(self, epoch: int, index: int, total: int, unit: str) -> StateMismatchError:
        """The error for a saved ``index`` beyond the ``total`` ``unit`` of ``epoch``."""
        return StateMismatchError(
            f"{self.kind} state points at {self.index_key} {index} of epoch {epoch}, which has "
            f"only {total} {unit}."
        )

    def load(
        self,
        state: Any,
        identity: Mapping[str, Any],
        *,
        epoch_size: Callable[[int], int],
        unit: str = "batches",
    ) -> None:
        """Check ``state`` and move to it; an index equal to the epoch size means ``(epoch + 1, 0)``.

        Raises
        ------
        StateMismatchError
            The state fails :meth:`check`, or its index exceeds ``epoch_size(epoch)``.
        """
        epoch, index = self.check(state, identity)
        total = epoch_size(epoch)
        if index > total:
            raise self.past_end(epoch, index, total, unit)
        self.move(*((epoch, index) if index < total else (epoch + 1, 0)))
