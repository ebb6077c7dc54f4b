"""The row-plan contract: how one rank's batches are cut from an epoch's packed rows.

A :class:`~mixle.data.StreamingCorpus` shuffles each epoch's documents, packs them
into rows of ``block + 1`` tokens at stride ``block`` and hands out batches. *Which*
documents form the stream a rank packs, which rows make a batch and what the cursor
counts is a :class:`RowPlan`: the seed's per-rank layout
(:mod:`~mixle.data._plan_per_rank`) and the global layout
(:mod:`~mixle.data._plan_global`) are two implementations; a new layout is one new
module that implements this protocol and one :func:`register_layout` line.

A plan answers, for one epoch, in cursor units (what the cursor's ``index`` counts):

- :meth:`RowPlan.build` — the epoch's :class:`EpochPlan` (the stream's layout, its
  rows and the batches of this rank) from the epoch's document order;
- :meth:`RowPlan.epoch_size` and :attr:`RowPlan.step` — where the cursor's index ends
  and how far one batch moves it;
- :meth:`RowPlan.first_row` and :meth:`RowPlan.batch_rows` — this rank's first row of
  the batch at an index, and how many rows it reads;
- :meth:`RowPlan.hint_windows` — the documents behind a run of batches (read-ahead);
- :meth:`RowPlan.identity` — the stream identity a state of this plan carries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from mixle.data._batch import Batch
from mixle.data._cursor import identity_differences
from mixle.data._documents import DocumentSource
from mixle.data._options import (
    LAYOUTS,
    PackOptions,
    ShardOptions,
    add_layout_name,
    remove_layout_name,
)
from mixle.data._order_windows import OrderWindows
from mixle.data._packed_rows import read_packed_group, read_packed_rows
from mixle.data._packing import RowLayout, StreamLayout
from mixle.errors import ArgumentError, StateMismatchError

# Identity fields that tie a state to its shape (the global layout's identity has none).
_SHAPE_FIELDS = ("rank", "world_size", "batch_size")
# The layout each built-in cursor version belongs to, for the message that refuses one.
_VERSION_LAYOUTS = {
    1: "per-rank",
    2: "global",
    3: "global (block_schedule)",
    4: "per-rank (block_schedule)",
}

__all__ = [
    "EpochPlan",
    "PlanFactory",
    "RowPlan",
    "RunBuffers",
    "WindowedRowPlan",
    "build_plan",
    "consecutive_batches",
    "register_layout",
    "unregister_layout",
]


@dataclass(frozen=True, slots=True)
class EpochPlan:
    """One epoch of one rank: the packed stream's layout, its rows, this rank's batches.

    Its rows are the layout's stream concatenated and chunked; a packing that lays rows
    out otherwise subclasses it and overrides :meth:`read_rows`.
    """

    layout: RowLayout
    rows: int
    num_batches: int

    def read_rows(
        self, documents: DocumentSource, first_row: int, count: int, pack: PackOptions
    ) -> tuple[Batch, int]:
        """Rows ``[first_row, first_row + count)`` as a batch, and its real target count
        (rows past the end are padding)."""
        rows = read_packed_rows(
            documents,
            self.layout,
            first_row,
            count,
            block=pack.block,
            pad_id=pack.pad_id,
            boundary_id=pack.boundary_id,
            document_ids=pack.document_ids,
        )
        batch = Batch(rows.context, rows.targets, rows.mask, rows.document_ids, rows.position_ids)
        return batch, rows.real

    def read_batches(
        self,
        documents: DocumentSource,
        first_rows: Sequence[int],
        counts: Sequence[int],
        pack: PackOptions,
    ) -> list[tuple[Batch, int]]:
        """The batches of ``counts[k]`` rows from ``first_rows[k]`` (with their real
        target counts): ``[read_rows(...) for each k]``, bitwise.

        When the batches' rows follow each other they are read together: the per-call
        work (locating and checking the documents, the small arrays around the gather)
        is paid once for the group, which is most of what a batch of a few dozen
        documents costs (:func:`~mixle.data._packed_rows.read_packed_group`). Each
        batch owns its tokens (``context`` and ``targets`` are views of one buffer of
        ``rows * block + 1`` tokens, as from :meth:`read_rows`, which the group's one
        gather writes: no joint buffer, no batch shares a token with the next); its
        mask and document ids are views of the group's arrays. A subclass with rows of its own
        (:meth:`read_rows` overridden) reads batch by batch unless it overrides this.
        """
        if not self._reads_groups(first_rows, counts):
            return [
                self.read_rows(documents, row, count, pack)
                for row, count in zip(first_rows, counts, strict=True)
            ]
        return self._read_group(documents, first_rows, counts, pack, None, None)

    def read_batches_into(
        self,
        documents: DocumentSource,
        first_rows: Sequence[int],
        counts: Sequence[int],
        pack: PackOptions,
        buffers: RunBuffers,
    ) -> list[tuple[Batch, int]] | None:
        """:meth:`read_batches` into buffers of the caller's (a DataLoader worker's
        shared slot), or ``None`` (nothing read) when this plan cannot or ``buffers``
        declines.

        ``buffers(counts, block)`` gives each batch's token buffer (``counts[k] * block
        + 1`` int64), one flat ``sum(counts) * block`` bool array for the loss masks and,
        or ``None``, two flat ``sum(counts) * block`` int64 arrays for the document ids
        and positions (filled with ``document_ids``); batch ``k``'s ``context`` and
        ``targets`` are then views of its buffer (``[:-1]`` and ``[1:]``) and its mask
        and ids the parts of those arrays of its rows, as in :meth:`read_batches`,
        bitwise. Only plans whose rows are the layout's
        concatenated and chunked stream (not a subclass with rows of its own), over
        batches whose rows follow each other.
        """
        if not self._reads_groups(first_rows, counts) or (
            type(self).read_batches is not EpochPlan.read_batches
        ):
            return None
        given = buffers(counts, pack.block)
        if given is None:
            return None
        return self._read_group(documents, first_rows, counts, pack, *given)

    def _reads_groups(self, first_rows: Sequence[int], counts: Sequence[int]) -> bool:
        """Whether these batches are read as one group (rows of the stream that follow
        each other; a subclass with rows of its own reads batch by batch)."""
        return (
            consecutive_batches(first_rows, counts) and type(self).read_rows is EpochPlan.read_rows
        )

    def _read_group(
        self,
        documents: DocumentSource,
        first_rows: Sequence[int],
        counts: Sequence[int],
        pack: PackOptions,
        token_buffers: list[np.ndarray] | None,
        mask_buffer: np.ndarray | None,
        id_buffers: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> list[tuple[Batch, int]]:
        buffers, rows = read_packed_group(
            documents,
            self.layout,
            first_rows[0],
            list(counts),
            block=pack.block,
            pad_id=pack.pad_id,
            boundary_id=pack.boundary_id,
            document_ids=pack.document_ids,
            buffers=token_buffers,
            mask=mask_buffer,
            ids=id_buffers,
        )
        block, mask, ids, positions = pack.block, rows.mask, rows.document_ids, rows.position_ids
        batches: list[tuple[Batch, int]] = []
        at = 0
        for tokens, count in zip(buffers, counts, strict=True):
            shape = (count, block)
            part = slice(at, at + count)
            batch = Batch(
                tokens[:-1].reshape(shape),
                tokens[1:].reshape(shape),
                mask[part],
                None if ids is None else ids[part],
                None if positions is None else positions[part],
            )
            # The real targets are a prefix of the rows' (padding only at the end).
            batches.append((batch, min(max(rows.real - at * block, 0), count * block)))
            at += count
        return batches


def consecutive_batches(first_rows: Sequence[int], counts: Sequence[int]) -> bool:
    """Whether each batch's rows start where the previous batch's end."""
    return all(first_rows[k + 1] == first_rows[k] + counts[k] for k in range(len(first_rows) - 1))


class RowPlan(Protocol):
    """A layout: how a rank's batches and cursor are cut from an epoch's rows.

    Attributes
    ----------
    name
        The layout's name (``StreamingCorpus(layout=name)``).
    cursor_version, index_key, unit
        The state-dict version of a cursor over this plan, what its index counts (the
        state key: ``"batch"``, ``"row"``) and that count's unit in messages.
    index_name, size_name
        The argument name and the method name of the index bound, in messages of
        random access (``"index"``/``"num_batches"``, ``"row"``/``"num_rows"``).
    step
        Cursor units one batch moves the cursor (``1`` batch, ``G`` rows).
    row_stride
        Rows between the first rows of consecutive batches of this rank.
    """

    name: str
    cursor_version: int
    index_key: str
    unit: str
    index_name: str
    size_name: str
    step: int
    row_stride: int

    def build(
        self, order: np.ndarray, lengths: np.ndarray, has_boundary: bool, block: int, *, epoch: int
    ) -> EpochPlan:
        """Epoch ``epoch``'s plan from its document ``order`` and every document's length
        (a plan whose rows are shuffled keys the shuffle by ``epoch``)."""
        ...

    def restore(
        self, layout: StreamLayout, rows: int, num_batches: int, *, epoch: int
    ) -> EpochPlan:
        """Epoch ``epoch``'s plan loaded from a plan store (``num_batches`` as it was saved)."""
        ...

    def epoch_size(self, plan: EpochPlan) -> int:
        """The cursor index at which the epoch ends."""
        ...

    def first_row(self, index: int) -> int:
        """This rank's first row of the batch at cursor index ``index``."""
        ...

    def batch_rows(self, plan: EpochPlan, first_row: int) -> int:
        """Rows the batch starting at ``first_row`` reads (rows past the end are padding)."""
        ...

    def hint_windows(self, plan: EpochPlan, first_rows: range, block: int) -> Iterator[np.ndarray]:
        """Document indices behind the batches of ``first_rows`` (from the second one on),
        one array per window of batches, each document once, in read order."""
        ...

    def identity(self, stream: Mapping[str, Any]) -> dict[str, Any]:
        """The stream identity of a state of this plan, from the corpus's fields.

        ``stream`` holds ``fingerprint, num_documents, seed, block, pad_id,
        boundary_id, sequence_selector`` (and ``even_batches``).
        """
        ...


@runtime_checkable
class WindowedRowPlan(RowPlan, Protocol):
    """A row plan that also packs an order handed out window by window (the
    ``"blocks"`` order; see :mod:`~mixle.data._order_windows`)."""

    def build_windows(
        self, windows: OrderWindows, has_boundary: bool, block: int, *, epoch: int
    ) -> EpochPlan:
        """Epoch ``epoch``'s plan from its order's windows (no per-document array)."""
        ...


RunBuffers = Callable[
    [Sequence[int], int],
    tuple[list[np.ndarray], np.ndarray, tuple[np.ndarray, np.ndarray] | None] | None,
]
"""Where :meth:`EpochPlan.read_batches_into` reads: ``(counts, block)`` -> token buffers,
mask, document ids and positions (or ``None``), or ``None`` to decline."""

PlanFactory = Callable[[ShardOptions, bool], RowPlan]
"""Builds a layout's plan from the shard options and ``even_batches``."""

_FACTORIES: dict[str, PlanFactory] = {}


def register_layout(name: str, factory: PlanFactory) -> None:
    """Make ``StreamingCorpus(layout=name)`` use the plans ``factory`` builds.

    The built-in layouts register themselves when their modules are imported.

    Raises
    ------
    ArgumentError
        ``name`` is taken (a built-in, or registered already).
    """
    if name in _FACTORIES:
        raise ArgumentError(f"layout {name!r} is registered already.")
    _FACTORIES[name] = factory
    add_layout_name(name)


def unregister_layout(name: str) -> None:
    """Forget a layout added with :func:`register_layout` (built-ins stay)."""
    if name not in LAYOUTS and name in _FACTORIES:
        del _FACTORIES[name]
        remove_layout_name(name)


def build_plan(shard: ShardOptions, even_batches: bool) -> RowPlan:
    """The plan of ``shard.layout`` (validated by :class:`ShardOptions`)."""
    return _FACTORIES[shard.layout](shard, even_batches)


def check_plan_state(state: Any, identity: dict[str, Any], *, layout: str, version: int) -> None:
    """Refuse a state of another cursor version, or a state that differs only in the
    stream's shape, with a message that names the global layout as the way to
    resume elastically."""
    if not isinstance(state, dict):
        return
    saved_version, expected = state.get("version"), version
    if saved_version in _VERSION_LAYOUTS and saved_version != expected:
        saved_layout = _VERSION_LAYOUTS[saved_version]
        raise StateMismatchError(
            f"StreamingCorpus state is a version-{saved_version} ({saved_layout} layout) state; "
            f"this stream uses layout={layout!r} and reads version {expected}. "
            f"layout in checkpoint: {saved_layout!r} / in stream: {layout!r}."
        )
    saved = state.get("stream")
    if saved_version == expected and isinstance(saved, dict):
        differences = identity_differences(saved, identity)
        if differences and all(d.split(" ", 1)[0] in _SHAPE_FIELDS for d in differences):
            raise StateMismatchError(
                f"StreamingCorpus {layout} state resumes only with the same rank, "
                "world_size and batch_size: " + "; ".join(differences) + ". Build the "
                "stream with layout='global' to resume on another number of ranks or "
                "with another batch size."
            )
