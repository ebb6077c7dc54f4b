"""``Mixture``: an exact, resumable weighted blend of several sources in the global layout.

Global row ``k`` comes from the source the :class:`~mixle.data._schedule.MixtureSchedule`
assigns it (O(1) lookup, no per-step state); that source contributes its next row of
its own endless packed stream (:class:`~mixle.data._mixture_source.SourceRows`).
Global batch ``k`` of a run is rows ``[row, row + G)`` from the cursor row, with ``G =
world_size * batch_size``, and rank ``r`` reads rows ``[row + r * batch_size, row + (r
+ 1) * batch_size)``. The state is the global-layout row cursor (``{"version": 2,
"epoch": 0, "row", "stream"}``) whose ``stream`` is the mixture identity, so a run
resumes at any row in O(1) with any world size and batch size.

With ``objective="windows"`` a global row is a ``TokenStream`` window (context and next
token) of its source's endless stream of shuffled windows
(:class:`~mixle.data._mixture_windows.SourceWindows`); schedule, phases, budgets,
accounting and the cursor are the same. With a ``block_schedule`` the rows change
length per phase and the cursor counts tokens (:mod:`~mixle.data._mixture_phased`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from mixle._checks import nonnegative_int
from mixle.data._attention import with_attention_boundaries
from mixle.data._batch import Batch
from mixle.data._block_schedule import BlockSchedule
from mixle.data._cursor import Cursor
from mixle.data._mesh import DpDims, place_from_mesh
from mixle.data._mixing_rule import (
    MixingRule,
    RowSchedule,
    built_schedule,
    checked_rule,
    rule_identity,
)
from mixle.data._mixture_best_fit import build_best_fit_rows
from mixle.data._mixture_phased import (
    MixtureBlocks,
    check_saved_schedule,
    check_schedulable,
    phased_batches,
    phased_sources,
    source_epochs,
    source_epochs_started,
)
from mixle.data._mixture_source import (
    MixtureSource,
    SourceRows,
    build_rows,
    check_unique_names,
    check_weight,
    check_weight_sum,
)
from mixle.data._mixture_windows import SourceWindows
from mixle.data._options import OrderOptions, PackOptions, ShardOptions, check_flag
from mixle.data._order_state import check_order_field
from mixle.data._packing_options import PackingOptions, as_packing
from mixle.data._plan_store import PlanStore, checked_plan_store
from mixle.errors import ArgumentError, ArgumentTypeError, StateMismatchError

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = [
    "OBJECTIVES",
    "Mixture",
    "MixturePhase",
    "SourceAccount",
    "SourceBudget",
    "SourceStream",
    "source_order_key",
]

OBJECTIVES = ("packed", "windows")
#: The length of a mixture's one epoch in rows and steps: the stream never ends.
ENDLESS = 2**62

SeedBatch = tuple[np.ndarray, ...]
# Iteration reads this many global batches' rows of the rank at once.
_READ_AHEAD = 64
# Largest cursor row accepted: rows are int64 on the way to a batch, and a row plus the
# read-ahead (64 global batches) must not wrap. 2**62 rows is a century at 10**9 a second.
MAX_ROW = 1 << 62


class SourceStream(Protocol):
    """One source's endless stream of rows (packed rows, or windows), as a mixture reads it."""

    name: str
    fingerprint: str
    num_documents: int
    rows_per_epoch: int

    def real_tokens(self, rows: int) -> int:
        """Real (trained) targets in the source's first ``rows`` rows, closed form."""
        ...

    def read(self, first: int, count: int, document_ids: bool) -> list[np.ndarray]:
        """The source's rows ``[first, first + count)``: arrays with ``count`` leading rows."""
        ...


@dataclass(frozen=True, slots=True)
class MixturePhase:
    """From global row ``start_row`` on, these ``weights`` (source name -> weight).

    Sources left out get weight 0 in the phase.
    """

    start_row: int
    weights: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class SourceBudget:
    """What a run of a given length needs from one source."""

    name: str
    rows: int
    tokens: int
    epochs: float
    max_epochs: float | None


@dataclass(frozen=True, slots=True)
class SourceAccount:
    """Closed-form accounting of one source over a prefix of global rows."""

    name: str
    rows: int
    real_tokens: int
    epochs_started: int
    realised_share: float
    target_share: float


def source_order_key(name: str) -> str:
    """The identity field of a source's epoch order."""
    return f"source {name!r} order"


class Mixture:
    """A deterministic weighted blend of sources, batched in the global layout.

    Parameters
    ----------
    sources
        :class:`MixtureSource` objects (documents, weight = share of trained tokens,
        unique name, optional ``max_epochs``); their weights rule from row 0.
    block, batch_size
        Tokens per row input; rows per rank per step.
    rank, world_size
        ``0 <= rank < world_size`` (default rank 0 of 1).
    mesh, dp_dims
        A ``torch.distributed.DeviceMesh`` and the names of its data-parallel
        dimensions, in place of ``rank``/``world_size``
        (:func:`~mixle.data.data_parallel_place`): tensor-, pipeline- and
        context-parallel peers get identical batches.
    seed
        Nonnegative integer; epoch ``e`` of source ``s`` is shuffled by ``(seed, s, e)``.
    pad_id, boundary_id
        As for :class:`~mixle.data.StreamingCorpus`.
    phases
        Optional :class:`MixturePhase` objects (or ``(start_row, {name: weight})``
        pairs) with strictly increasing ``start_row > 0``.
    document_ids
        If True, batches carry ``(document_ids, position_ids)`` (each source's own
        document index; -1 and 0 on padding) before the source ids (packed only).
    objective
        ``"packed"`` (default): a global row is a packed row of its source
        (:class:`~mixle.data._mixture_source.SourceRows`). ``"windows"``: the
        ``TokenStream`` windows objective; a global row is one window of ``block``
        tokens and its next token, drawn from its source's endless stream of Feistel-
        shuffled windows (:class:`~mixle.data._mixture_windows.SourceWindows`); the
        weights are then shares of windows (each window trains one target).
        document index; -1 and 0 on padding) before the source ids.
    plan_store
        Optional :class:`~mixle.data._plan_store.PlanStore` (e.g.
        ``mixle.corpus.storage.plan_cache.PlanFiles``) that keeps every permutation
        source's epoch layouts and token count by the source's identity and epoch: a
        restarted process loads them instead of reading every length and planning the
        epochs it resumes in. Batches are the same with or without it.
    order, block_documents, window_blocks
        Every source's epoch order (packed only), as for
        :class:`~mixle.data.StreamingCorpus`: ``"blocks"`` (``None``, the default:
        planned window by window, O(documents / block) per source epoch) or
        ``"permutation"`` (the order of mixtures saved before this option); the sizes
        apply to every source and must fit each. Part of the stream identity (one
        ``source '<name>' order`` field per source; none for the permutation).
    schedule
        The mixing rule (:class:`~mixle.data._mixing_rule.MixingRule`) that turns the
        weights into each row's source: :class:`~mixle.data.ExactSchedule` (default,
        the weights as given) or e.g. :class:`~mixle.data.TemperatureSchedule` (weights
        times each source's size to the power ``alpha``). A non-default rule's name and
        parameters are part of the stream identity.
    packing
        How every source's epochs become rows (packed only), as for
        :class:`~mixle.data.StreamingCorpus`: ``"concatenate"`` (default) or
        ``"best_fit"`` (or :class:`~mixle.data.PackingOptions`): each window of a
        source's epoch order packed by best-fit decreasing, every epoch of a source
        one fixed number of rows (:mod:`~mixle.data._mixture_best_fit`), so the row
        cursor, resumption and exactly-once per source epoch are unchanged. Part of the
        stream identity (a ``packing`` field; none for concatenate): a state of one
        packing is refused by the other by name.
    attention_boundaries
        If True, packed batches also carry ``cu_seqlens``, ``max_seqlen`` and
        ``sequence_ids`` (:mod:`~mixle.data._attention`) and the document and position
        ids they come from, for either packing.
    block_schedule
        Optional :class:`~mixle.data.BlockSchedule`, context length per phase (packed,
        concatenate; ``block`` its first block; a fraction ``until`` needs its
        ``total_tokens``): every source counts its own tokens across a switch, the
        tokens per global batch stay constant, the cursor counts run tokens (state
        version 3, ``"token"``) and the identity holds the schedule
        (:mod:`~mixle.data._mixture_phased`). Weight phases start at global rows.

    Packed batches are ``(context, targets, loss_mask, [document_ids, position_ids],
    source_ids)``: ``(batch_size, block)`` int64, int64, bool, [int64, int64] and a
    ``(batch_size,)`` int64 index into ``sources`` per row. ``loss_mask`` is False
    only on the padding at the end of a source's epoch. Windows batches are
    ``(context, next_tokens, source_ids)``: ``(batch_size, block)``, ``(batch_size,)``
    and ``(batch_size,)`` int64. Either way the schedule decides every row's source,
    so every global batch carries the mix (each source within one row of its share
    of every prefix of rows).

    Raises
    ------
    ArgumentTypeError, ArgumentError
        Bad weights (negative, NaN, not numbers, all zero in a phase), duplicate or
        unknown source names, an empty source, a phase that does not start after the
        previous one: each named, before any batch.
    """

    def __init__(
        self,
        sources: Sequence[MixtureSource],
        *,
        block: int,
        batch_size: int = 1,
        rank: int | None = None,
        world_size: int | None = None,
        seed: int = 0,
        pad_id: int = 0,
        boundary_id: int | None = None,
        phases: Sequence[MixturePhase | tuple[int, Mapping[str, float]]] = (),
        document_ids: bool = False,
        objective: str = "packed",
        plan_store: PlanStore | None = None,
        schedule: MixingRule | None = None,
        mesh: DeviceMesh | None = None,
        dp_dims: DpDims = ("dp",),
        order: str | None = None,
        block_documents: int | None = None,
        window_blocks: int | None = None,
        packing: str | PackingOptions = "concatenate",
        attention_boundaries: bool = False,
        block_schedule: BlockSchedule | None = None,
    ) -> None:
        rank, world_size = place_from_mesh(mesh, dp_dims, rank, world_size)
        self.packing = as_packing(packing)
        self.attention_boundaries = check_flag("attention_boundaries", attention_boundaries)
        self.sources = _checked_sources(sources)
        self.schedule_rule = checked_rule(schedule)
        self.pack = PackOptions(block, pad_id, boundary_id, document_ids or attention_boundaries)
        self.shard = ShardOptions(
            0 if rank is None else rank,
            1 if world_size is None else world_size,
            batch_size,
            "global",
        )
        self.block, self.pad_id = self.pack.block, self.pack.pad_id
        self.boundary_id, self.document_ids = self.pack.boundary_id, self.pack.document_ids
        self.rank, self.world_size = self.shard.rank, self.shard.world_size
        self.batch_size = self.shard.batch_size
        self.seed = nonnegative_int("seed", seed)
        if objective not in OBJECTIVES:
            raise ArgumentError(
                f"`objective` must be one of {', '.join(map(repr, OBJECTIVES))}. Got {objective!r}."
            )
        self.objective = objective
        if objective == "windows":
            for name, asked in (
                ("document_ids=True", document_ids),
                ("attention_boundaries=True", attention_boundaries),
                (f"packing={self.packing.name!r}", self.packing.is_best_fit),
            ):
                if asked:
                    raise ArgumentError(
                        f"`{name}` needs objective='packed': windows are not packed rows "
                        "and carry no document ids."
                    )
        if objective == "windows" and (order, block_documents, window_blocks) != (None,) * 3:
            raise ArgumentError(
                "`order`, `block_documents` and `window_blocks` need objective='packed': "
                "windows are shuffled by their own bijection."
            )
        self.order = OrderOptions(order or "blocks", block_documents, window_blocks)
        self.phases = _checked_phases(phases, [s.name for s in self.sources])
        weights = [[s.weight for s in self.sources]]
        weights += [[float(p.weights.get(s.name, 0.0)) for s in self.sources] for p in self.phases]
        for index, row in enumerate(weights):
            where = (
                "the sources"
                if index == 0
                else f"phase {index} (from row {self.phases[index - 1].start_row})"
            )
            check_weight_sum(row, where)
            if not any(row):
                raise ArgumentError(
                    f"the weights of {where} are all zero; give at least one source a positive weight."
                )
        self.plan_store = checked_plan_store(plan_store)
        self.block_schedule = block_schedule
        if block_schedule is not None:
            check_schedulable(self.objective, self.packing)
        self.blocks: MixtureBlocks | None = (
            None
            if block_schedule is None
            else MixtureBlocks.build(
                block_schedule,
                world_size=self.world_size,
                batch_size=self.batch_size,
                block=self.block,
            )
        )
        rows: list[SourceStream] = (
            [
                SourceWindows(s, block=self.block, seed=self.seed, boundary_id=self.boundary_id)
                for s in self.sources
            ]
            if self.objective == "windows"
            else self._packed_rows()
        )
        self.schedule: RowSchedule = built_schedule(
            self.schedule_rule,
            [0, *(p.start_row for p in self.phases)],
            weights,
            [r.real_tokens(r.rows_per_epoch) for r in rows],
        )
        self.rows = self._phased(rows)
        self._cursor = self._new_cursor()

    def _phased(self, rows: list[SourceStream]) -> list[SourceStream]:
        """The sources' streams cut into each block phase's rows (unchanged without a
        block schedule)."""
        if self.blocks is None:
            return rows
        counts = [self.schedule.counts_before(r) for r in self.blocks.row_starts]
        bases = [r for r in rows if isinstance(r, SourceRows)]
        assert len(bases) == len(rows)  # packed concatenate sources (checked)
        return list(phased_sources(bases, counts, self.blocks.blocks))

    def _new_cursor(self) -> Cursor:
        if self.blocks is None:
            return Cursor("Mixture", index_key="row", version=2)
        return Cursor("Mixture", index_key="token", version=3)

    def _packed_rows(self) -> list[SourceStream]:
        if self.packing.is_best_fit:
            return list(
                build_best_fit_rows(
                    self.sources,
                    packing=self.packing,
                    block=self.block,
                    seed=self.seed,
                    boundary_id=self.boundary_id,
                    pad_id=self.pad_id,
                    order=self.order,
                    plan_store=self.plan_store,
                )
            )
        return list(
            build_rows(
                self.sources,
                block=self.block,
                seed=self.seed,
                boundary_id=self.boundary_id,
                pad_id=self.pad_id,
                order=self.order,
                plan_store=self.plan_store,
            )
        )

    def reordered(self, order: OrderOptions) -> Mixture:
        """The same packed mixture with every source in ``order``, its cursor at row 0
        (how a run resumes a state saved with another order: the schedule, the weights
        and the accounting do not depend on the order).

        Raises
        ------
        ArgumentError
            The mixture is of windows (they have no document order), or ``order``'s
            sizes do not fit a source.
        """
        if self.objective == "windows":
            raise ArgumentError("a windows mixture has no document order to change.")
        view = object.__new__(Mixture)
        view.__dict__.update(self.__dict__)
        view.order = order
        view.rows = view._phased(view._packed_rows())
        view._cursor = view._new_cursor()
        return view

    # ------------------------------------------------------------------ reading
    @property
    def names(self) -> list[str]:
        return [s.name for s in self.sources]

    @property
    def global_batch_size(self) -> int:
        return self.shard.global_batch_size

    def rows_at(self, begin: int, end: int) -> SeedBatch:
        """Global rows ``[begin, end)`` as the seed-style tuple (see the class docstring)."""
        return self.read_rows(begin, end).as_tuple()

    def read_rows(self, begin: int, end: int) -> Batch:
        """Global rows ``[begin, end)`` as a :class:`~mixle.data.Batch`."""
        begin = nonnegative_int("begin", begin)
        end = nonnegative_int("end", end)
        if end < begin:
            raise ArgumentError(f"`end` must be >= `begin` ({begin}). Got {end} instead.")
        if self.blocks is not None:
            self.blocks.check_rows(begin, end)
        return self._gather(np.arange(begin, end, dtype=np.int64))

    def _gather(self, rows: np.ndarray) -> Batch:
        """The batch of the ascending global rows ``rows`` (int64).

        Each source's rows among them are ascending rows of its own stream (the
        schedule hands every source its rows in order); each run of consecutive ones is
        read with one call, so reading many batches at once costs a few calls per source.
        """
        count = len(rows)
        sources, local = self.schedule.lookup(rows)
        order = np.argsort(sources, kind="stable")
        ordered = local[order]
        # Cut where the source changes or the source's row index jumps.
        cuts = np.flatnonzero((np.diff(sources[order]) != 0) | (np.diff(ordered) != 1)) + 1
        outputs: list[np.ndarray] = []
        for run in np.split(np.arange(count), cuts):
            if not len(run):
                continue
            where = order[run]
            source = int(sources[where[0]])
            parts = self.rows[source].read(int(ordered[run[0]]), len(run), self.document_ids)
            if not outputs:
                outputs = [np.empty((count, *p.shape[1:]), dtype=p.dtype) for p in parts]
            for out, part in zip(outputs, parts, strict=True):
                out[where] = part
        if not outputs:  # no rows: the shapes from one row
            outputs = [part[:0] for part in self.rows[0].read(0, 1, self.document_ids)]
        if self.objective == "windows":
            context, next_tokens = outputs
            return Batch(context, next_tokens, source_ids=sources)
        tokens, mask = outputs[:2]
        document_ids, position_ids = outputs[2:4] if self.document_ids else (None, None)
        batch = Batch(tokens[:, :-1], tokens[:, 1:], mask, document_ids, position_ids, sources)
        return with_attention_boundaries(batch) if self.attention_boundaries else batch

    def read(self, epoch: int, row: int) -> Batch:
        """The batch iteration yields at cursor ``(0, row)``: this rank's part of the
        global batch that starts at global row ``row`` (with a ``block_schedule``, at
        run token ``row``: a multiple of the tokens per global batch).

        Raises
        ------
        ArgumentError
            ``epoch`` is not 0 (a mixture's stream is one endless epoch), or a token
            that does not start a global batch.
        """
        if nonnegative_int("epoch", epoch) != 0:
            raise ArgumentError(f"`epoch` must be 0: a mixture has only epoch 0. Got {epoch}.")
        if self.blocks is not None:
            first, rows = self.blocks.rank_rows(nonnegative_int("token", row), self.rank)
            return self.read_rows(first, first + rows)
        first = nonnegative_int("row", row) + self.rank * self.batch_size
        return self.read_rows(first, first + self.batch_size)

    def batch_at_row(self, row: int) -> SeedBatch:
        """This rank's part of the global batch that starts at global row ``row``
        (the tuple of :meth:`read` ``(0, row)``)."""
        return self.read(0, row).as_tuple()

    def __iter__(self) -> Iterator[SeedBatch]:
        """The seed-style tuples of :meth:`batches`."""
        return map(Batch.as_tuple, self.batches())

    def batches(self) -> Iterator[Batch]:
        """Endless: this rank's batches from the cursor row on, advancing the cursor
        (moved before each batch is handed out)."""
        if self.blocks is not None:
            yield from phased_batches(
                self._gather, self._cursor, self.blocks, self.rank, self.world_size
            )
            return
        cursor, size, ahead = self._cursor, self.global_batch_size, 1
        mine = np.arange(self.batch_size, dtype=np.int64) + self.rank * self.batch_size
        while True:
            first = cursor.index
            # This rank's rows of the next `ahead` global batches, read together.
            starts = first + size * np.arange(ahead, dtype=np.int64)
            batches = self._gather((starts[:, None] + mine).ravel())
            for k in range(ahead):
                part = slice(k * self.batch_size, (k + 1) * self.batch_size)
                cursor.move(0, first + (k + 1) * size)
                yield batches.rows(part)
            # One batch first (a resumed run's first batch comes fast), then doubling.
            ahead = min(2 * ahead, _READ_AHEAD)

    # ------------------------------------------------------------------ block schedule
    @property
    def largest_block(self) -> int:
        """The longest row of any phase (``block`` without a block schedule): what a
        model must be built for."""
        return self.block if self.blocks is None else max(self.blocks.blocks)

    @property
    def step_size(self) -> int:
        """How far the cursor moves per global batch: ``global_batch_size`` rows, or
        with a block schedule the tokens per global batch."""
        return self.global_batch_size if self.blocks is None else self.blocks.tokens_per_batch

    def cursor_row(self, index: int) -> int:
        """The global row at cursor index ``index`` (itself without a block schedule;
        with one, the first row at or after run token ``index``)."""
        index = nonnegative_int("index", index)
        return index if self.blocks is None else self.blocks.row_at(index)

    def phase_at(self, epoch: int, index: int) -> tuple[int, int]:
        """``(phase, block)`` of the global batch at cursor ``(epoch, index)``: the
        ``block_schedule`` phase (0 without one) and its rows' block."""
        nonnegative_int("epoch", epoch)
        if self.blocks is None:
            return 0, self.block
        phase = self.blocks.phase_of_token(nonnegative_int("index", index))
        return phase, self.blocks.blocks[phase]

    # ------------------------------------------------------------------ cursor
    @property
    def cursor(self) -> tuple[int, int]:
        """``(0, row)``: the first global row of the next global batch."""
        return self._cursor.position

    def epoch_size(self, epoch: int) -> int:
        """Where the cursor's row ends: never (:data:`ENDLESS`); only epoch 0 exists."""
        nonnegative_int("epoch", epoch)
        return ENDLESS

    def steps_left(self, epoch: int, row: int) -> int:
        """Steps left in the stream from ``(epoch, row)``: :data:`ENDLESS`."""
        return ENDLESS

    def next_cursor(self, epoch: int, row: int, steps: int) -> tuple[int, int] | None:
        """The cursor ``steps`` global batches after ``(0, row)``: ``(0, row + steps * G)``
        (``G`` the :attr:`step_size`)."""
        return 0, nonnegative_int("row", row) + nonnegative_int("steps", steps) * self.step_size

    def seek(self, row: int) -> None:
        """Move the cursor to global row ``row`` (O(1)), at most :data:`MAX_ROW` (with a
        block schedule, to run token ``row``, a multiple of the tokens per batch)."""
        row = nonnegative_int("row", row)
        if row > MAX_ROW:
            raise ArgumentError(f"`row` must be at most {MAX_ROW} (2**62). Got {row} instead.")
        if self.blocks is not None:
            self.blocks.check_token(row)
        self._cursor.move(0, row)

    def stream_identity(self) -> dict[str, Any]:
        """The mixture identity saved in ``state_dict``: sources' names, fingerprints,
        rounded weights and ``max_epochs``, the phases, seed, block, pad and boundary
        (and the mixing rule, unless it is the default)."""
        identity: dict[str, Any] = {
            "mixture_sources": self.names,
            "seed": self.seed,
            "block": self.block,
            "pad_id": self.pad_id,
            "boundary_id": self.boundary_id,
            "layout": "global",
        }
        if self.objective == "windows":  # packed states predate the field: absent = packed
            identity["objective"] = "windows"
        if self.packing.is_best_fit:  # concatenate states predate the field: absent = concatenate
            identity["packing"] = self.packing.identity()
        for source, rows in zip(self.sources, self.rows, strict=True):
            identity[f"source {source.name!r} fingerprint"] = rows.fingerprint
            identity[f"source {source.name!r} num_documents"] = rows.num_documents
            identity[f"source {source.name!r} max_epochs"] = source.max_epochs
            order = self._order_field(rows)
            if order is not None:  # permutation states predate the field: absent = permutation
                identity[source_order_key(source.name)] = order
        identity["phases"] = self._phase_identity()
        rule = rule_identity(self.schedule_rule)
        if rule is not None:  # default states predate the field: absent = exact
            identity["schedule"] = rule
        if self.block_schedule is not None and self.blocks is not None:
            # States without a schedule predate the fields: absent = one block.
            identity["block_schedule"] = self.block_schedule.identity()
            identity["tokens_per_batch"] = self.blocks.tokens_per_batch
        return identity

    def _order_field(self, rows: SourceStream) -> dict[str, Any] | None:
        """A packed source's ``order`` identity field (windows have none)."""
        if self.objective == "windows":
            return None
        return self.order.identity(rows.num_documents)

    def _phase_identity(self) -> list[list[Any]]:
        """``[[start_row, [n_0, ..., n_k]], ...]``: every phase's rounded counts."""
        return [
            [start, list(schedule.counts)]
            for start, schedule in zip(self.schedule.starts, self.schedule.phases, strict=True)
        ]

    def state_dict(self) -> dict[str, Any]:
        """``{"version": 2, "epoch": 0, "row", "stream": identity}`` (JSON-able); with a
        block schedule ``{"version": 3, "epoch": 0, "token", "stream": identity}``."""
        return self._cursor.state_dict(self.stream_identity())

    def load_state_dict(self, state: Any) -> None:
        """Resume at a saved row, O(1) in the row, with any world size or batch size.

        The saved mixture may differ from this one only by phases appended after the
        saved row (how weights change between runs).

        Raises
        ------
        StateMismatchError
            Malformed state (a ``row`` beyond :data:`MAX_ROW` included), or any other
            change (each differing field named with both values; a changed or inserted
            phase named as ``phases``).
        """
        identity = self.stream_identity()
        saved = state.get("stream") if isinstance(state, Mapping) else None
        index = self._cursor.index_key
        if isinstance(saved, Mapping):
            check_saved_schedule(self.block_schedule, saved)
        if isinstance(saved, Mapping) and isinstance(state.get(index), int):
            own = identity["phases"]
            kept = saved.get("phases")
            if (
                isinstance(kept, list)
                and 0 < len(kept) < len(own)
                and own[: len(kept)] == kept
                and own[len(kept)][0] >= self.cursor_row(max(state[index], 0))
            ):
                identity = {**identity, "phases": kept}  # phases appended after the row
        if (
            isinstance(saved, Mapping)
            and saved.get("mixture_sources") == self.names
            and saved.get("objective") == identity.get("objective")
        ):
            for name in self.names:
                # Only a source of the same documents: another corpus is named as such.
                same = (f"source {name!r} fingerprint", f"source {name!r} num_documents")
                if all(saved.get(key) == identity.get(key) for key in same):
                    key = source_order_key(name)
                    check_order_field(saved.get(key), identity.get(key), "Mixture", key)
        self._cursor.check(state, identity)
        if state["epoch"] != 0:
            raise StateMismatchError(
                f"Mixture state has epoch {state['epoch']}; a mixture has only epoch 0."
            )
        if state[index] > MAX_ROW:
            raise StateMismatchError(
                f"Mixture state field `{index}` must be at most {MAX_ROW} (2**62). "
                f"Got {state[index]} instead."
            )
        if self.blocks is not None:
            self.blocks.check_saved_token(state[index])
        self._cursor.move(0, state[index])

    # ------------------------------------------------------------------ planning
    def run_rows(
        self, *, rows: int | None = None, tokens: int | None = None, steps: int | None = None
    ) -> int:
        """Global rows of a run given as rows, tokens (target positions) or steps."""
        given = [
            (n, v)
            for n, v in (("rows", rows), ("tokens", tokens), ("steps", steps))
            if v is not None
        ]
        if len(given) != 1:
            raise ArgumentError("give the run length as exactly one of rows=, tokens= or steps=.")
        name, value = given[0]
        value = nonnegative_int(name, value)
        if name == "rows":
            return value
        if self.blocks is not None:
            return self.blocks.row_at(value if name == "tokens" else value * self.step_size)
        if name == "tokens":
            return -(-value // self.block)
        return value * self.global_batch_size

    def budget(self, **length: int | None) -> list[SourceBudget]:
        """Rows, real tokens and epochs each source needs for a run (see :meth:`run_rows`)."""
        total = self.run_rows(**length)
        counts = self.schedule.counts_before(total).tolist()
        return [
            SourceBudget(s.name, n, r.real_tokens(n), source_epochs(r, n), s.max_epochs)
            for s, r, n in zip(self.sources, self.rows, counts, strict=True)
        ]

    def check_budget(self, **length: int | None) -> list[SourceBudget]:
        """:meth:`budget`, raising if a source would exceed its ``max_epochs``.

        Raises
        ------
        ArgumentError
            Names the source, the epochs needed and the allowed maximum.
        """
        budget = self.budget(**length)
        for entry in budget:
            if entry.max_epochs is not None and entry.epochs > entry.max_epochs:
                raise ArgumentError(
                    f"source {entry.name!r} needs {entry.epochs:.4g} epochs for this run "
                    f"({entry.rows} rows, {entry.tokens} tokens), but max_epochs is "
                    f"{entry.max_epochs}. Lower its weight, shorten the run, raise max_epochs "
                    "or add documents."
                )
        return budget

    def accounting(self, row: int) -> list[SourceAccount]:
        """Per source, over global rows ``[0, row)``, in closed form (no replay)."""
        row = nonnegative_int("row", row)
        counts = self.schedule.counts_before(row).tolist()
        targets = self.schedule.target_rows(row)
        tokens = [r.real_tokens(n) for r, n in zip(self.rows, counts, strict=True)]
        total = sum(tokens)
        return [
            SourceAccount(
                s.name,
                n,
                t,
                source_epochs_started(r, n),
                t / total if total else 0.0,
                float(target / row) if row else 0.0,
            )
            for s, r, n, t, target in zip(
                self.sources, self.rows, counts, tokens, targets, strict=True
            )
        ]

    def rounding(self) -> list[dict[str, Any]]:
        """Per phase and source: the normalised float weight and the exact rational used."""
        return [
            {
                "start_row": start,
                "source": name,
                "weight": share,
                "used": f"{used.numerator}/{used.denominator}",
                "error": float(used) - share,
            }
            for start, schedule in zip(self.schedule.starts, self.schedule.phases, strict=True)
            for name, (share, used) in zip(self.names, schedule.rounding, strict=True)
        ]


def _checked_sources(sources: Any) -> list[MixtureSource]:
    if isinstance(sources, str | bytes) or not isinstance(sources, Sequence):
        raise ArgumentTypeError(
            f"`sources` must be a sequence of MixtureSource. Got {type(sources).__name__}."
        )
    checked = list(sources)
    if not checked:
        raise ArgumentError("a mixture needs at least one source.")
    for source in checked:
        if not isinstance(source, MixtureSource):
            raise ArgumentTypeError(
                f"every source must be a MixtureSource. Got {type(source).__name__}."
            )
    check_unique_names((s.name for s in checked), "the mixture")
    return checked


def _checked_phases(phases: Any, names: list[str]) -> list[MixturePhase]:
    checked: list[MixturePhase] = []
    previous = 0
    for index, phase in enumerate(phases, 1):
        if not isinstance(phase, MixturePhase):
            start, weights = phase
            phase = MixturePhase(start, weights)
        start = nonnegative_int(f"start_row of phase {index}", phase.start_row)
        if start <= previous:
            raise ArgumentError(
                f"phase {index} starts at row {start}, not after the previous phase (row {previous}); "
                "phases must start at strictly increasing rows, the first after row 0."
            )
        if not isinstance(phase.weights, Mapping):
            raise ArgumentTypeError(f"weights of phase {index} must map source names to weights.")
        for name, weight in phase.weights.items():
            if name not in names:
                raise ArgumentError(
                    f"phase {index} names unknown source {name!r}; the sources are {', '.join(map(repr, names))}."
                )
            check_weight(weight, f"source {name!r} in phase {index}")
        checked.append(MixturePhase(start, dict(phase.weights)))
        previous = start
    return checked
