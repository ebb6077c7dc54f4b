"""The state of a stateful ``sequence_selector`` inside a stream's state.

A selector with ``state_dict``/``load_state_dict`` (such as
:class:`~mixle.data._curriculum_bandit.LengthBandit`, whose weights follow the rewards
it was given) decides the order of epochs still to come, so a stream saves that state
under :data:`SELECTOR_KEY` beside its cursor and restores it before it plans an epoch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from mixle.errors import StateMismatchError

__all__ = ["SELECTOR_KEY", "StatefulSelector", "selector_state"]

SELECTOR_KEY = "selector"


@runtime_checkable
class StatefulSelector(Protocol):
    """A ``sequence_selector`` whose choices depend on state it can save and restore."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Any) -> None: ...


def selector_state(state: Mapping[str, Any]) -> Any:
    """The selector's part of a stream ``state``.

    Raises
    ------
    StateMismatchError
        ``state`` has no ``"selector"`` field (saved by a stream without this selector).
    """
    if SELECTOR_KEY not in state:
        raise StateMismatchError(
            f"stream state lacks the field `{SELECTOR_KEY}`: it was saved without this "
            "stateful sequence_selector, whose weights decide the order of the next epochs."
        )
    return state[SELECTOR_KEY]
