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
from typing import TYPE_CHECKING, Any

import numpy as np

from mixle._checks import nonnegative_int
from mixle.data._attention import with_attention_boundaries
from mixle.data._batch import Batch
from mixle.data._block_schedule import BlockSchedule
from mixle.data._mesh import DpDims, place_from_mesh
from mixle.data._mixing_rule import MixingRule, RowSchedule, built_schedule, checked_rule
from mixle.data._mixture_checks import (
    check_objective,
    checked_phases,
    checked_sources,
    phase_weights,
)
from mixle.data._mixture_cursor import MixtureCursor
from mixle.data._mixture_phased import MixtureBlocks, check_schedulable, phased_batches
from mixle.data._mixture_planning import (
    check_budget,
    run_rows,
    source_accounts,
    source_budget,
    weight_rounding,
)
from mixle.data._mixture_records import (
    ENDLESS,
    MAX_ROW,
    OBJECTIVES,
    MixturePhase,
    SourceAccount,
    SourceBudget,
    SourceStream,
    source_order_key,
)
from mixle.data._mixture_source import MixtureSource
from mixle.data._mixture_state import load_mixture_state, mixture_identity
from mixle.data._mixture_streams import phased_streams, source_streams
from mixle.data._options import OrderOptions, PackOptions, ShardOptions, check_flag
from mixle.data._packing_options import PackingOptions, as_packing
from mixle.data._plan_store import PlanStore, checked_plan_store
from mixle.errors import ArgumentError

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

# The records live in _mixture_records; this module keeps their import path.
__all__ = [
    "ENDLESS",
    "MAX_ROW",
    "OBJECTIVES",
    "Mixture",
    "MixturePhase",
    "SourceAccount",
    "SourceBudget",
    "SourceStream",
    "source_order_key",
]

SeedBatch = tuple[np.ndarray, ...]
# Iteration reads this many global batches' rows of the rank at once (MAX_ROW leaves room).
_READ_AHEAD = 64


class Mixture(MixtureCursor):
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
    order, block_documents, window_blocks, order_version
        Every source's epoch order (packed only), as for
        :class:`~mixle.data.StreamingCorpus`: ``"blocks"`` (``None``, the default:
        planned window by window, O(documents / block) per source epoch; its newest
        version unless ``order_version`` names one) or ``"permutation"`` (the order of
        mixtures saved before this option); the sizes apply to every source and must
        fit each. Part of the stream identity (one
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
        order_version: int | None = None,
        packing: str | PackingOptions = "concatenate",
        attention_boundaries: bool = False,
        block_schedule: BlockSchedule | None = None,
    ) -> None:
        rank, world_size = place_from_mesh(mesh, dp_dims, rank, world_size)
        self.packing = as_packing(packing)
        self.attention_boundaries = check_flag("attention_boundaries", attention_boundaries)
        self.sources = checked_sources(sources)
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
        check_objective(
            objective,
            self.packing,
            document_ids=document_ids,
            attention_boundaries=attention_boundaries,
            order=(order, block_documents, window_blocks, order_version),
        )
        self.objective = objective
        self.order = OrderOptions(order or "blocks", block_documents, window_blocks, order_version)
        self.phases = checked_phases(phases, [s.name for s in self.sources])
        weights = phase_weights(self.sources, self.phases)
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
        rows = source_streams(self)
        self.schedule: RowSchedule = built_schedule(
            self.schedule_rule,
            [0, *(p.start_row for p in self.phases)],
            weights,
            [r.real_tokens(r.rows_per_epoch) for r in rows],
        )
        self.rows = phased_streams(rows, self.schedule, self.blocks)
        self._cursor = self._new_cursor()

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
        view.rows = phased_streams(source_streams(view), view.schedule, view.blocks)
        view._cursor = view._new_cursor()
        return view

    # ------------------------------------------------------------------ reading
    @property
    def names(self) -> list[str]:
        return [s.name for s in self.sources]

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

    def stream_identity(self) -> dict[str, Any]:
        """The mixture identity saved in ``state_dict``: sources' names, fingerprints,
        rounded weights and ``max_epochs``, the phases, seed, block, pad and boundary
        (and the mixing rule, unless it is the default; :func:`mixture_identity`)."""
        return mixture_identity(self)

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
        load_mixture_state(self, self._cursor, state)

    # ------------------------------------------------------------------ planning
    def run_rows(
        self, *, rows: int | None = None, tokens: int | None = None, steps: int | None = None
    ) -> int:
        """Global rows of a run given as rows, tokens (target positions) or steps."""
        return run_rows(self, rows, tokens, steps)

    def budget(self, **length: int | None) -> list[SourceBudget]:
        """Rows, real tokens and epochs each source needs for a run (see :meth:`run_rows`)."""
        return source_budget(self, self.run_rows(**length))

    def check_budget(self, **length: int | None) -> list[SourceBudget]:
        """:meth:`budget`, raising if a source would exceed its ``max_epochs``.

        Raises
        ------
        ArgumentError
            Names the source, the epochs needed and the allowed maximum.
        """
        return check_budget(self.budget(**length))

    def accounting(self, row: int) -> list[SourceAccount]:
        """Per source, over global rows ``[0, row)``, in closed form (no replay)."""
        return source_accounts(self, row)

    def rounding(self) -> list[dict[str, Any]]:
        """Per phase and source: the normalised float weight and the exact rational used."""
        return weight_rounding(self)
