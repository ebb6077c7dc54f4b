"""A mixture's stream identity and the checks that let a saved state resume it.

:func:`mixture_identity` is what a :class:`~mixle.data.Mixture`'s ``state_dict``
carries besides its cursor: every source's name, fingerprint, document count,
``max_epochs`` and epoch order, the phases' rounded counts, seed, block, pad and
boundary, and the fields of non-default options (objective, packing, mixing rule,
block schedule; absent in states that predate them). :func:`load_mixture_state` checks
a saved state against it (phases appended after the saved row are allowed: how weights
change between runs) and moves the cursor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mixle.data._mixing_rule import RowSchedule, rule_identity
from mixle.data._mixture_phased import check_saved_schedule
from mixle.data._mixture_records import MAX_ROW, SourceStream, source_order_key
from mixle.data._order_state import check_order_field
from mixle.errors import StateMismatchError

if TYPE_CHECKING:
    from mixle.data._cursor import Cursor
    from mixle.data._mixture import Mixture

__all__ = ["load_mixture_state", "mixture_identity", "phase_identity"]


def mixture_identity(mixture: Mixture) -> dict[str, Any]:
    """The identity a mixture's state carries (see the module docstring)."""
    identity: dict[str, Any] = {
        "mixture_sources": mixture.names,
        "seed": mixture.seed,
        "block": mixture.block,
        "pad_id": mixture.pad_id,
        "boundary_id": mixture.boundary_id,
        "layout": "global",
    }
    if mixture.objective == "windows":  # packed states predate the field: absent = packed
        identity["objective"] = "windows"
    if mixture.packing.is_best_fit:  # concatenate states predate the field: absent = concatenate
        identity["packing"] = mixture.packing.identity()
    for source, rows in zip(mixture.sources, mixture.rows, strict=True):
        identity[f"source {source.name!r} fingerprint"] = rows.fingerprint
        identity[f"source {source.name!r} num_documents"] = rows.num_documents
        identity[f"source {source.name!r} max_epochs"] = source.max_epochs
        order = _order_field(mixture, rows)
        if order is not None:  # permutation states predate the field: absent = permutation
            identity[source_order_key(source.name)] = order
    identity["phases"] = phase_identity(mixture.schedule)
    rule = rule_identity(mixture.schedule_rule)
    if rule is not None:  # default states predate the field: absent = exact
        identity["schedule"] = rule
    if mixture.block_schedule is not None and mixture.blocks is not None:
        # States without a schedule predate the fields: absent = one block.
        identity["block_schedule"] = mixture.block_schedule.identity()
        identity["tokens_per_batch"] = mixture.blocks.tokens_per_batch
    return identity


def _order_field(mixture: Mixture, rows: SourceStream) -> dict[str, Any] | None:
    """A packed source's ``order`` identity field (windows have none)."""
    if mixture.objective == "windows":
        return None
    return mixture.order.identity(rows.num_documents)


def phase_identity(schedule: RowSchedule) -> list[list[Any]]:
    """``[[start_row, [n_0, ..., n_k]], ...]``: every phase's rounded counts."""
    return [
        [start, list(phase.counts)]
        for start, phase in zip(schedule.starts, schedule.phases, strict=True)
    ]


def load_mixture_state(mixture: Mixture, cursor: Cursor, state: Any) -> None:
    """:meth:`~mixle.data.Mixture.load_state_dict`: check ``state`` against the
    mixture's identity and move its ``cursor`` there.

    Raises
    ------
    StateMismatchError
        Malformed state (a cursor beyond :data:`MAX_ROW` included), or any other change
        (each differing field named with both values; a changed or inserted phase named
        as ``phases``).
    """
    identity = mixture_identity(mixture)
    saved = state.get("stream") if isinstance(state, Mapping) else None
    index = cursor.index_key
    if isinstance(saved, Mapping):
        check_saved_schedule(mixture.block_schedule, saved)
    if isinstance(saved, Mapping) and isinstance(state.get(index), int):
        own = identity["phases"]
        kept = saved.get("phases")
        if (
            isinstance(kept, list)
            and 0 < len(kept) < len(own)
            and own[: len(kept)] == kept
            and own[len(kept)][0] >= mixture.cursor_row(max(state[index], 0))
        ):
            identity = {**identity, "phases": kept}  # phases appended after the row
    if (
        isinstance(saved, Mapping)
        and saved.get("mixture_sources") == mixture.names
        and saved.get("objective") == identity.get("objective")
    ):
        for name in mixture.names:
            # Only a source of the same documents: another corpus is named as such.
            same = (f"source {name!r} fingerprint", f"source {name!r} num_documents")
            if all(saved.get(key) == identity.get(key) for key in same):
                key = source_order_key(name)
                check_order_field(saved.get(key), identity.get(key), "Mixture", key)
    cursor.check(state, identity)
    if state["epoch"] != 0:
        raise StateMismatchError(
            f"Mixture state has epoch {state['epoch']}; a mixture has only epoch 0."
        )
    if state[index] > MAX_ROW:
        raise StateMismatchError(
            f"Mixture state field `{index}` must be at most {MAX_ROW} (2**62). "
            f"Got {state[index]} instead."
        )
    if mixture.blocks is not None:
        mixture.blocks.check_saved_token(state[index])
    cursor.move(0, state[index])
