"""Validation of iterator ``state_dict``s against the stream they are loaded into.

A state carries ``"version"``, its cursor fields, and ``"stream"``: a flat dict of
everything that defines the stream (corpus fingerprint, seed, block, ...). Loading a
state whose ``"stream"`` differs raises :class:`StateMismatchError` naming each
differing field with both values, e.g. "seed in checkpoint: 3 / seed in stream: 4".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mixle.errors import StateMismatchError

__all__ = ["check_state"]


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
        The only state version this iterator reads.
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
    missing = [key for key in ("stream", *cursor_fields) if key not in state]
    if missing:
        raise StateMismatchError(f"{kind} state lacks the field(s) {', '.join(missing)}.")
    for key in cursor_fields:
        value = state[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise StateMismatchError(
                f"{kind} state field `{key}` must be a nonnegative integer. Got {value!r} instead."
            )
    saved = state["stream"]
    if not isinstance(saved, Mapping):
        raise StateMismatchError(f"{kind} state field `stream` must be a dict.")
    differences = [
        f"{key} in checkpoint: {saved.get(key, '<absent>')!r} / in stream: {stream.get(key, '<absent>')!r}"
        for key in sorted(set(saved) | set(stream))
        if saved.get(key, "<absent>") != stream.get(key, "<absent>")
    ]
    if differences:
        raise StateMismatchError(
            f"{kind} state belongs to a different stream: " + "; ".join(differences) + "."
        )
