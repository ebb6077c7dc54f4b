"""The epoch order a saved state names, checked before the state is loaded.

A stream identity holds the order as its ``"order"`` field: ``{"name": "blocks",
"version": V, "block_documents": B, "window_blocks": W}`` for the hierarchical order
(``V`` one of :data:`~mixle.data._order_windows.BLOCK_ORDER_VERSIONS`);
no field at all for the seed's permutation order (every state saved before there was
a choice has none, and keeps resuming with the permutation). :func:`check_saved_order`
refuses a state of an unknown order or order version, and a state of one order loaded
into a stream of another, with a message that names the field and the way to resume.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mixle.data._options import OrderOptions
from mixle.data._order_windows import BLOCK_ORDER_VERSIONS, BlockOrder
from mixle.errors import CorpusError, StateMismatchError

__all__ = [
    "ORDER_FIELD",
    "check_order_field",
    "check_saved_order",
    "order_arguments",
    "saved_order",
]

#: The stream-identity field that names the order.
ORDER_FIELD = "order"
# The order versions this mixle reads, by name (the permutation's states carry none).
_VERSIONS = {BlockOrder.name: BLOCK_ORDER_VERSIONS}


def order_arguments(order: Mapping[str, Any] | None) -> str:
    """The constructor arguments that build a stream of ``order`` (an identity field)."""
    if order is None:
        return "order='permutation'"
    arguments = (
        f"order={order.get('name')!r}, block_documents={order.get('block_documents')!r}, "
        f"window_blocks={order.get('window_blocks')!r}"
    )
    # The newest version is what a stream builds unless told: name only an older one.
    if order.get("version") != BLOCK_ORDER_VERSIONS[-1]:
        arguments += f", order_version={order.get('version')!r}"
    return arguments


def _described(order: Mapping[str, Any] | None, where: str) -> str:
    if order is None:
        return f"order 'permutation' (no {where} field)"
    return f"{order_arguments(order)} ({where})"


def _known(order: Any) -> bool:
    """Whether ``order`` (a saved ``"order"`` field) names an order and version known here."""
    if not isinstance(order, Mapping) or not isinstance(order.get("name"), str):
        return False
    return order.get("version") in _VERSIONS.get(order["name"], ())


# Identity fields that must agree before the order is compared: a state of another
# layout or corpus is named by the cursor's own check of every field.
_SAME_STREAM = ("layout", "fingerprint", "num_documents")


def _saved_stream(state: Any, identity: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The state's stream identity when it is of ``identity``'s layout and corpus."""
    stream = state.get("stream") if isinstance(state, Mapping) else None
    if not isinstance(stream, Mapping) or any(
        stream.get(key) != identity.get(key) for key in _SAME_STREAM
    ):
        return None
    return stream


def saved_order(state: Any, identity: Mapping[str, Any]) -> OrderOptions | None:
    """The order ``state`` was saved with, as options that build a stream of it;
    ``None`` when the state is not one of ``identity``'s layout and corpus or names an
    order this mixle cannot build (:func:`check_saved_order` then says why)."""
    stream = _saved_stream(state, identity)
    if stream is None:
        return None
    saved = stream.get(ORDER_FIELD)
    if saved is None:
        return OrderOptions("permutation")
    if not _known(saved):
        return None
    try:
        return OrderOptions(
            saved["name"],
            saved.get("block_documents"),
            saved.get("window_blocks"),
            saved["version"],
        )
    except (CorpusError, TypeError):
        return None


def check_saved_order(state: Any, identity: Mapping[str, Any], kind: str) -> None:
    """Refuse ``state`` unless it was saved with the order of the stream ``identity``
    (its ``"order"`` field; none for the permutation order). A state that is not a
    dict with a ``"stream"`` dict, or whose stream has another layout or corpus, is
    left to the cursor's own checks (which name every differing field).

    Raises
    ------
    StateMismatchError
        As :func:`check_order_field`.
    """
    stream = _saved_stream(state, identity)
    if stream is not None:
        check_order_field(stream.get(ORDER_FIELD), identity.get(ORDER_FIELD), kind, ORDER_FIELD)


def check_order_field(saved: Any, current: Mapping[str, Any] | None, kind: str, field: str) -> None:
    """Refuse a state whose order field ``saved`` (``stream[field]``; ``None`` when
    absent) differs from the stream's ``current`` one.

    Raises
    ------
    StateMismatchError
        The state names an unknown order or order version, or another order (or other
        block sizes) than the stream's; the message names the field and says how to
        build the stream that resumes the state.
    """
    where = f"`stream.{field}`" if field.isidentifier() else f"`stream[{field!r}]`"
    if saved is not None and not _known(saved):
        name = saved.get("name") if isinstance(saved, Mapping) else saved
        if isinstance(saved, Mapping) and isinstance(name, str) and name in _VERSIONS:
            raise StateMismatchError(
                f"{kind} state has order {name!r} version {saved.get('version')!r} in "
                f"{where}; this mixle reads version(s) {list(_VERSIONS[name])} of it. "
                "Resume it with the mixle that saved it."
            )
        known = ", ".join(f"{n!r} (versions {list(v)})" for n, v in _VERSIONS.items())
        raise StateMismatchError(
            f"{kind} state names an unknown order {name!r} in {where}; this mixle reads "
            f"{known}, and states without the field are order 'permutation'."
        )
    if saved != current:
        raise StateMismatchError(
            f"{kind} state was saved with {_described(saved, where)}; this stream uses "
            f"{_described(current, where)}. Build the stream with {order_arguments(saved)} "
            "to resume that state."
        )
