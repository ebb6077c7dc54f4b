"""``StreamingCorpus``: one rank's shuffled, packed, batched view of a corpus, resumable.

The corpus holds the documents, the options (:class:`~mixle.data._options.ShardOptions`,
:class:`~mixle.data._options.PackOptions`) and the cursor; *which* rows a rank reads and
what the cursor counts is its row plan (:mod:`~mixle.data._row_plan`: the per-rank and
the global layout, or a registered one), so nothing here depends on the layout; which
documents an epoch packs is its order (:class:`~mixle.data._options.OrderOptions`:
the seed's permutation, or the global layout's default, the hierarchical blocks order
of :mod:`~mixle.data._order_windows`). Holds the epoch plan of the two most recent
epochs (with the permutation O(documents) int64 metadata: the order and cumulative
lengths; with the blocks order O(documents / block) block totals and the windows a
batch touches) and O(batch_size x block) tokens per batch; it never packs a whole
shard.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from types import BuiltinFunctionType, FunctionType, MethodType
from typing import TYPE_CHECKING, Any

import numpy as np

from mixle._checks import nonnegative_int, positive_int
from mixle.data import _plan_global, _plan_per_rank  # noqa: F401  (register the layouts)
from mixle.data._attention import with_attention_boundaries
from mixle.data._batch import Batch
from mixle.data._block_schedule import BlockSchedule
from mixle.data._curriculum_state import SELECTOR_KEY, StatefulSelector, selector_state
from mixle.data._cursor import Cursor
from mixle.data._documents import as_documents, offset_reader, supports_prefetch
from mixle.data._epoch_plans import EpochPlans
from mixle.data._hints import HINT_BATCHES
from mixle.data._mesh import DpDims, place_from_mesh
from mixle.data._options import LAYOUTS, OrderOptions, PackOptions, ShardOptions, check_flag
from mixle.data._order import SequenceSelector
from mixle.data._order_state import check_saved_order
from mixle.data._packing_options import PackingOptions, as_packing
from mixle.data._plan_global_best_fit import packed_row_plan
from mixle.data._plan_per_rank_phased import PhasedPerRankPlan, per_rank_phased_plan
from mixle.data._plan_phased import PhasedGlobalPlan, phased_row_plan
from mixle.data._plan_store import (
    PlanStore,
    checked_plan_store,
)
from mixle.data._ranks import current_rank_and_world_size
from mixle.data._row_plan import (
    EpochPlan,
    RowPlan,
    RunBuffers,
    WindowedRowPlan,
    check_plan_state,
)
from mixle.data._seed_views import SeedViews, StreamOptionFields
from mixle.errors import ArgumentError, ArgumentTypeError

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["LAYOUTS", "StreamingCorpus", "current_rank_and_world_size"]

_NAMED_CALLABLES = (FunctionType, BuiltinFunctionType, MethodType, type)
# Batches of consecutive rows read with one call while iterating (after 1, 2, 4, ...):
# the per-call work is most of a batch's cost at a few dozen documents a batch
# (tools/bench_peers.py), and 8 batches of 8 x 2048 int64 tokens are 1 MiB.
READ_AHEAD_BATCHES = 8


def _callable_name(function: Any) -> str | None:
    """``module.qualname`` of a function, method or class; of its type for other callables."""
    if function is None:
        return None
    named = function if isinstance(function, _NAMED_CALLABLES) else type(function)
    return f"{named.__module__}.{named.__qualname__}"


class StreamingCorpus(SeedViews, StreamOptionFields):
    """One rank's view of a corpus: shuffled by ``(seed, epoch)``, packed, batched.

    Epoch ``e`` consumes ``global_document_order(len(documents), seed, e, selector)``;
    this rank takes every ``world_size``-th document of it starting at ``rank``, packs
    that stream exactly as :func:`pack_documents` would (rows of ``block + 1`` tokens at
    stride ``block``, ``boundary_id`` between documents, padding only at the end), and
    cuts the rows into batches of ``batch_size`` rows (the last batch may be smaller).
    Batch ``k`` starts at stream token ``k * batch_size * block``, so starting anywhere is
    a binary search over cumulative document lengths, never a replay. (That is the
    default per-rank layout; the global layout packs the whole order into one row
    stream, by default in the blocks order: see ``layout`` and ``order``.)

    Parameters
    ----------
    documents
        Any sequence of 1-D integer token arrays (list, tuple, lazy/mmap collection). It
        is only indexed, document by document; its optional ``lengths``,
        ``fingerprint`` and ``prefetch`` capabilities are used when present.
    rank, world_size
        ``0 <= rank < world_size``: this process's data-parallel place. Required unless
        ``mesh`` is given.
    mesh, dp_dims
        A ``torch.distributed.DeviceMesh`` and the names of its data-parallel
        dimensions (one name, or several such as ``("dp_replicate", "dp_shard")``), in
        place of ``rank``/``world_size``: the place is
        :func:`~mixle.data.data_parallel_place` ``(mesh, dp_dims)``, so tensor-,
        pipeline- and context-parallel peers get identical batches.
    block, batch_size
        Positive integers: tokens per row input, rows per batch.
    seed
        Nonnegative integer keying the shuffle.
    pad_id, boundary_id
        Exact int64 integers; ``boundary_id=None`` inserts no boundary.
    sequence_selector
        Optional curriculum hook, see :func:`global_document_order`.
    even_batches
        Per-rank layout: if True (default), every rank yields the same number of
        batches per epoch, the smallest per-rank count (see
        :mod:`~mixle.data._plan_per_rank`); with False each rank yields its whole stream
        (what :func:`pack_documents` gives).
    document_ids
        If True, batches carry two more ``(b, block)`` int64 arrays: the global index of
        the document each input token belongs to (a boundary token belongs to the
        document before it; padding is -1) and its position inside that document
        (restarting at 0 for every document; 0 on padding).
    prefetch
        If True (default) and ``documents`` has ``prefetch(indices)``, the documents of
        the coming batches are hinted in read order, 32 batches per call, issued while 16
        or more hinted batches are still ahead (``mixle.data._documents.prefetch_hint``),
        so a cold or remote corpus reads ahead. Each document is hinted once; the
        batches are the same with or without hints.
    layout
        The row plan (:mod:`~mixle.data._row_plan`). ``"per-rank"`` (default): rank
        ``r`` packs its own round-robin share of the order, as described above; the
        cursor is ``(epoch, batch)`` and resumes only with the same ``(world_size,
        batch_size)`` (:mod:`~mixle.data._plan_per_rank`). ``"global"``: one row
        stream of the whole order; global batch ``k`` is rows ``[k * G, (k + 1) * G)``,
        ``G = world_size * batch_size``, rank ``r`` reads its contiguous
        ``batch_size`` of them, the last one completed with fully masked rows; the
        cursor counts global rows (``{"version": 2, "epoch", "row", "stream"}``) and
        resumes with any ``world_size`` and ``batch_size``
        (:mod:`~mixle.data._plan_global`). Or a name given to ``register_layout``.
    order
        The epoch order: ``"blocks"`` (the hierarchical order of
        :mod:`~mixle.data._order_windows`: the documents in blocks of
        ``block_documents``, the blocks shuffled, the documents shuffled inside each
        window of ``window_blocks`` blocks; planned in O(documents / block) and read a
        window at a time) or ``"permutation"`` (the seed's permutation of every
        document, :func:`global_document_order`; O(documents)). ``None`` (default):
        ``"blocks"`` for ``layout="global"`` without a ``sequence_selector``,
        ``"permutation"`` otherwise (the per-rank layout, a selector and registered
        layouts take only the permutation). The order is part of the stream identity:
        a state resumes only with the order it was saved with (states saved before
        this option are ``"permutation"``).
    block_documents, window_blocks
        The ``"blocks"`` order's sizes (positive, at most the corpus's documents and
        blocks); ``None``: 4096 documents per block, 64 blocks per window, capped by
        the corpus (see docs/streaming.md for why).
    order_version
        The ``"blocks"`` order's version (1 or 2); ``None``: the newest, 2. Part of the
        stream identity: a state saved with version 1 resumes with ``order_version=1``.
    plan_store
        Optional :class:`~mixle.data._plan_store.PlanStore` (e.g.
        ``mixle.corpus.storage.plan_cache.PlanFiles``): each epoch plan is loaded from
        it by its identity (the stream identity and the epoch) and, when missing or
        inconsistent, built and saved to it, so a restarted process skips the O(documents)
        planning (the ``"blocks"`` order's plans are never stored: they are
        O(documents / block)). Batches are the same with or without it. Ignored with a
        ``sequence_selector`` (whose behaviour its name does not pin). With a store,
        the documents' lengths are read (and in-memory documents' shapes checked) when
        a plan is built, not in the constructor.

    packing
        ``"concatenate"`` (default): the order is one stream cut into rows, as above.
        ``"best_fit"`` (``layout="global"`` only): windows of the order are packed by
        best-fit decreasing, so only documents longer than a row are cut; a row holds
        whole documents (each followed by ``boundary_id`` when set) and padding, and
        trains only the pairs inside each document
        (:mod:`~mixle.data._plan_global_best_fit`). A :class:`PackingOptions` sets the
        window size and truncation. Part of the stream identity: a state of one packing
        does not load into the other.
    attention_boundaries
        If True, batches also carry ``cu_seqlens``, ``max_seqlen`` and ``sequence_ids``
        (:mod:`~mixle.data._attention`), for either packing, and the ``document_ids`` and
        ``position_ids`` they are computed from (as with ``document_ids=True``).
    block_schedule
        Optional :class:`~mixle.data.BlockSchedule` (concatenate packing): context
        length per phase. ``block`` and ``batch_size`` are phase 0's; a later phase
        cuts the same token stream, from the token where the previous phase stopped,
        into rows of its own block, as many per global batch as keep the tokens per
        global batch constant, and every rank switches at the same step. The cursor
        then counts tokens; the schedule is part of the stream identity. Global layout
        (:mod:`~mixle.data._plan_phased`): state version 3, ``{"epoch", "token",
        "stream"}`` (tokens of the one row stream), resumes with any world size and
        batch size of the same tokens per global batch. Per-rank layout
        (:mod:`~mixle.data._plan_per_rank_phased`): state version 4 (tokens of the
        rank's own stream), resumes on the same shape only; needs ``even_batches``
        on more than one rank and no stateful ``sequence_selector``.

    Raises
    ------
    ArgumentTypeError, ArgumentError
        Any argument is invalid (checked here, eagerly, with the argument's name), or a
        document is not one-dimensional. Token ids are checked as each document is read,
        before any of its tokens reaches a batch.

    Notes
    -----
    Iterating the object yields batches from its cursor ``(epoch, batch)`` onward,
    across epochs, and advances the cursor; ``state_dict`` saves it. Iteration stops at
    the first epoch with no batches (an empty corpus would otherwise spin).
    """

    def __init__(
        self,
        documents: Sequence[Any],
        *,
        rank: int | None = None,
        world_size: int | None = None,
        block: int,
        batch_size: int,
        seed: int = 0,
        pad_id: int = 0,
        boundary_id: int | None = None,
        sequence_selector: SequenceSelector | None = None,
        even_batches: bool = True,
        document_ids: bool = False,
        prefetch: bool = True,
        layout: str = "per-rank",
        plan_store: PlanStore | None = None,
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
        if rank is None or world_size is None:
            raise ArgumentError(
                "StreamingCorpus needs `rank` and `world_size`, or `mesh` (with `dp_dims`). "
                f"Got rank={rank!r}, world_size={world_size!r}."
            )
        self.shard = ShardOptions(rank, world_size, batch_size, layout)
        self.pack = PackOptions(block, pad_id, boundary_id, document_ids)
        self.packing = as_packing(packing)
        self.attention_boundaries = check_flag("attention_boundaries", attention_boundaries)
        if block_schedule is not None and not isinstance(block_schedule, BlockSchedule):
            raise ArgumentTypeError(
                "`block_schedule` must be a BlockSchedule (e.g. BlockSchedule.parse("
                f"'2048:0.9,8192')) or None. Got {type(block_schedule).__name__} instead."
            )
        self.block_schedule = block_schedule
        # The boundaries are computed from the document ids and positions: read them.
        self._read_pack = PackOptions(
            block, self.pad_id, self.boundary_id, document_ids or self.attention_boundaries
        )
        self.seed = nonnegative_int("seed", seed)
        if sequence_selector is not None and not callable(sequence_selector):
            raise ArgumentTypeError(
                "`sequence_selector` must be callable (order, seed, epoch) -> order or None. "
                f"Got {type(sequence_selector).__name__} instead."
            )
        self.sequence_selector = sequence_selector
        self.even_batches = check_flag("even_batches", even_batches)
        self.documents = as_documents(documents)
        self._num_documents = len(self.documents)
        self.prefetch = check_flag("prefetch", prefetch)
        self._supports_prefetch = self.prefetch and supports_prefetch(self.documents)
        plan_store = checked_plan_store(plan_store)
        self.plan_store = None if sequence_selector is not None else plan_store
        self._cut(self.shard)
        self.order = self._order_options(order, block_documents, window_blocks, order_version)
        self._plans = EpochPlans(
            self.documents,
            self._row_plan,
            seed=self.seed,
            sequence_selector=sequence_selector,
            block=self.block,
            has_boundary=self.boundary_id is not None,
            order=self.order,
            plan_store=self.plan_store,
        )
        if self.order.name == "blocks":
            if offset_reader(self.documents) is None:
                # In-memory documents: read (and check) every length now.
                self._plans.offsets(np.array([self._num_documents]))
        elif self.plan_store is None:
            # Read (and, for in-memory documents, check) every length now; with a plan
            # store they are read only when a plan is built, so a restart stays O(batch).
            self._plans.lengths()

    def _order_options(
        self,
        order: str | None,
        block_documents: int | None,
        window_blocks: int | None,
        order_version: int | None,
    ) -> OrderOptions:
        """The validated order (see the class docstring), its sizes checked against the
        corpus."""
        if order is None:
            windowed = self.layout == "global" and self.sequence_selector is None
            order = "blocks" if windowed else "permutation"
        options = OrderOptions(order, block_documents, window_blocks, order_version)
        if options.name == "blocks":
            if not isinstance(self._row_plan, WindowedRowPlan):
                raise ArgumentError(
                    f"order='blocks' needs a layout that plans by windows ('global'); "
                    f"layout={self.layout!r} takes order='permutation'."
                )
            if self.sequence_selector is not None:
                raise ArgumentError(
                    "a `sequence_selector` reorders the whole permutation: it takes "
                    "order='permutation' (or leave `order` out)."
                )
            options.sizes(self._num_documents)
        return options

    def _cut(self, shard: ShardOptions) -> None:
        """Take ``shard``: its row plan, and a cursor of that plan at the start."""
        self.shard = shard
        self._row_plan: RowPlan
        if self.block_schedule is None:
            self._row_plan = packed_row_plan(
                shard, self.even_batches, self.packing, block=self.block, seed=self.seed
            )
        elif shard.layout == "per-rank":
            self._row_plan = per_rank_phased_plan(
                shard,
                self.block_schedule,
                self.packing,
                self.block,
                even_batches=self.even_batches,
                stateful_selector=isinstance(self.sequence_selector, StatefulSelector),
            )
        else:
            self._row_plan = phased_row_plan(shard, self.block_schedule, self.packing, self.block)
        plan = self._row_plan
        self._cursor = Cursor(
            "StreamingCorpus", index_key=plan.index_key, version=plan.cursor_version
        )
        self.last_packing_efficiency: float | None = None

    @classmethod
    def for_current_rank(
        cls,
        documents: Sequence[Any],
        *,
        mesh: DeviceMesh | None = None,
        dp_dims: DpDims = ("dp",),
        **kwargs: Any,
    ) -> StreamingCorpus:
        """Build the view for this process's data-parallel place: the mesh's over
        ``dp_dims`` when ``mesh`` is given, else :func:`current_rank_and_world_size`
        (``torch.distributed``, else torchrun's environment, else rank 0 of 1); every
        other argument is passed to the constructor.

        Without a mesh the global rank is the data-parallel rank: under tensor, pipeline
        or context parallelism pass the mesh, or peers would get different batches.
        """
        for name in ("rank", "world_size"):
            if name in kwargs:
                raise ArgumentError(
                    f"`{name}` is read from the mesh or the environment by for_current_rank."
                )
        if mesh is not None:
            return cls(documents, mesh=mesh, dp_dims=dp_dims, **kwargs)
        rank, world_size = current_rank_and_world_size()
        return cls(documents, rank=rank, world_size=world_size, **kwargs)

    def reshaped(self, shard: ShardOptions) -> StreamingCorpus:
        """The same stream with other shard options: a new corpus view sharing the
        documents, the pack options, the seed, the selector and the plan store; its
        cursor is at the start and its plans are built afresh.

        Raises
        ------
        ArgumentTypeError
            ``shard`` is not a :class:`~mixle.data._options.ShardOptions`.
        """
        if not isinstance(shard, ShardOptions):
            raise ArgumentTypeError(f"`shard` must be ShardOptions. Got {type(shard).__name__}.")
        view = object.__new__(StreamingCorpus)
        view.__dict__.update(self.__dict__)
        view._cut(shard)
        view._plans = self._plans.recut(view._row_plan)
        return view

    def _plan(self, epoch: int) -> EpochPlan:
        return self._plans.get(epoch, self.stream_identity)

    def epoch_plan(self, epoch: int) -> EpochPlan:
        """Epoch ``epoch``'s plan for this rank (its row layout, rows and batches; the
        two most recent are kept), as the batches are cut from it: for inspection
        (:func:`~mixle.data.sightings` inverts it)."""
        return self._plan(nonnegative_int("epoch", epoch))

    def num_rows(self, epoch: int) -> int:
        """Rows of the epoch's row stream (the rank's stream in the per-rank layout)."""
        return self._plan(nonnegative_int("epoch", epoch)).rows

    def rank_document_indices(self, epoch: int) -> np.ndarray:
        """The documents of the row stream this rank reads from, in packing order (int64
        copy; in the global layout the whole epoch order: O(documents), window by window
        for the ``"blocks"`` order)."""
        return self._plan(nonnegative_int("epoch", epoch)).layout.document_order().copy()

    def num_batches(self, epoch: int) -> int:
        """Number of batches ``epoch_batches(epoch)`` yields (after ``even_batches``)."""
        return self._plan(nonnegative_int("epoch", epoch)).num_batches

    def epoch_size(self, epoch: int) -> int:
        """Where the cursor's index ends in ``epoch`` (batches; rows in the global layout)."""
        return self._row_plan.epoch_size(self._plan(nonnegative_int("epoch", epoch)))

    # ------------------------------------------------------------------ batches
    def _make_batch(self, plan: EpochPlan, first_row: int) -> tuple[Batch, int]:
        """This rank's batch whose first row is ``first_row``, and its real target count
        (the row plan says how many rows it reads; rows past the stream are padding)."""
        count = self._row_plan.batch_rows(plan, first_row)
        batch, real = plan.read_rows(self.documents, first_row, count, self._read_pack)
        if self.attention_boundaries:
            batch = with_attention_boundaries(batch)
        return batch, real

    def read(self, epoch: int, index: int) -> Batch:
        """The batch iteration yields at cursor ``(epoch, index)`` (see :attr:`cursor`):
        per-rank, batch ``index``; global, this rank's part of the global batch whose
        first row is ``index`` (any row). O(log documents) to find the first document;
        reads only the documents the batch overlaps.

        Raises
        ------
        ArgumentError
            ``index >= epoch_size(epoch)`` (or either argument is negative).
        """
        plan_kind = self._row_plan
        epoch = nonnegative_int("epoch", epoch)
        index = nonnegative_int(plan_kind.index_name, index)
        plan = self._plan(epoch)
        total = plan_kind.epoch_size(plan)
        if index >= total:
            raise ArgumentError(
                f"`{plan_kind.index_name}` must be smaller than {plan_kind.size_name}({epoch}) "
                f"= {total}. Got {index} instead."
            )
        batch, _ = self._make_batch(plan, plan_kind.first_row(index))
        return batch

    def read_run_into(
        self,
        epoch: int,
        index: int,
        count: int,
        buffers: RunBuffers,
    ) -> list[Batch] | None:
        """The ``count`` batches from cursor ``(epoch, index)`` on, in one epoch
        (``[read(epoch, index + k * cursor_step) for k in range(count)]``, bitwise), read
        together into the caller's buffers; ``None`` (nothing read) where the layout
        cannot (rows of their own: best-fit, a block schedule; batches whose rows do not
        follow each other) or ``buffers`` declines.

        ``buffers(counts, block)`` is asked once, with each batch's row count: it gives
        the batches' token buffers, one flat mask array and the id arrays, as for
        :meth:`~mixle.data._row_plan.EpochPlan.read_batches_into`; each batch's
        ``context`` and ``targets`` are views of its buffer, its ``loss_mask`` a view of
        the mask array. How a DataLoader worker writes a group of batches straight into
        its shared-memory slot (:class:`~mixle.data.torch.StreamLoader`).

        Raises
        ------
        ArgumentError
            A batch of the run lies past the end of ``epoch``.
        """
        plan_kind = self._row_plan
        epoch = nonnegative_int("epoch", epoch)
        index = nonnegative_int(plan_kind.index_name, index)
        count = positive_int("count", count)
        plan = self._plan(epoch)
        total = plan_kind.epoch_size(plan)
        step = plan_kind.step
        last = index + (count - 1) * step
        if last >= total:
            raise ArgumentError(
                f"`{plan_kind.index_name}` + (count - 1) x {step} must be smaller than "
                f"{plan_kind.size_name}({epoch}) = {total}. Got {last} instead."
            )
        first_rows = [plan_kind.first_row(index + k * step) for k in range(count)]
        counts = [plan_kind.batch_rows(plan, row) for row in first_rows]
        read = plan.read_batches_into(self.documents, first_rows, counts, self._read_pack, buffers)
        if read is None:
            return None
        if self.attention_boundaries:
            return [with_attention_boundaries(batch) for batch, _ in read]
        return [batch for batch, _ in read]

    def phase_at(self, epoch: int, index: int) -> tuple[int, int]:
        """``(phase, block)`` of the batch at cursor ``(epoch, index)``: its
        ``block_schedule`` phase (0 without a schedule) and its rows' block."""
        epoch = nonnegative_int("epoch", epoch)
        index = nonnegative_int(self._row_plan.index_name, index)
        if isinstance(self._row_plan, PhasedGlobalPlan | PhasedPerRankPlan):
            return self._row_plan.phase_at(self._plan(epoch), index)
        return 0, self.block

    @property
    def cursor_key(self) -> str:
        """What the cursor's index counts, its state-dict key: ``"batch"`` or ``"row"``."""
        return self._row_plan.index_key

    @property
    def cursor_step(self) -> int:
        """Cursor units one batch moves the cursor: 1 (a batch), or the global batch
        size in the global layout (rows)."""
        return self._row_plan.step

    def next_cursor(self, epoch: int, index: int, steps: int) -> tuple[int, int] | None:
        """The cursor ``steps`` batches after ``(epoch, index)`` in the across-epochs order.

        Returns ``None`` when an epoch with no batches is reached first (where iteration
        stops). ``(epoch, index)`` with ``index == epoch_size(epoch)`` is read as
        ``(epoch + 1, 0)``.
        """
        steps = nonnegative_int("steps", steps)
        step = self._row_plan.step
        while True:
            total = self.epoch_size(epoch)
            if total == 0:
                return None
            left = -(-(total - index) // step) if index < total else 0
            if steps < left:
                return epoch, index + steps * step
            steps -= left
            epoch, index = epoch + 1, 0

    def _hint(self, indices: np.ndarray | None) -> None:
        if indices is not None and indices.size:
            self.documents.prefetch(indices)

    def iter_epoch(self, epoch: int, *, start_batch: int = 0) -> Iterator[Batch]:
        """:meth:`epoch_batches` as :class:`~mixle.data.Batch` es (the same checks)."""
        epoch = nonnegative_int("epoch", epoch)
        start_batch = nonnegative_int("start_batch", start_batch)
        plan = self._plan(epoch)
        if start_batch > plan.num_batches:
            raise ArgumentError(
                f"`start_batch` must be at most num_batches({epoch}) = {plan.num_batches}. "
                f"Got {start_batch} instead."
            )
        step = self._row_plan.step
        self.last_packing_efficiency = None
        return self._generate(plan, range(start_batch * step, plan.num_batches * step, step))

    def _generate(self, plan: EpochPlan, indices: range) -> Iterator[Batch]:
        """The batches at the cursor indices ``indices`` of one epoch, hinting ahead."""
        plan_kind = self._row_plan
        stride = plan_kind.row_stride
        first = plan_kind.first_row(indices.start)
        first_rows = range(first, first + len(indices) * stride, stride)
        hints = plan_kind.hint_windows(plan, first_rows, self.block)
        real_total = 0
        target_total = 0
        hinted = 1  # batches before this one are hinted (or being read)
        # Consecutive batches (this rank's rows follow each other) are read in groups:
        # one batch first (a resumed run's first batch comes fast), then doubling.
        grouped = plan_kind.row_stride == self.batch_size
        ahead: int = 1
        ready: Iterator[tuple[Batch, int]] = iter(())
        for position, first_row in enumerate(first_rows):
            if self._supports_prefetch and hinted - position <= HINT_BATCHES // 2:
                self._hint(next(hints, None))
                hinted += HINT_BATCHES
            if not grouped:
                batch, real = self._make_batch(plan, first_row)
            else:
                item = next(ready, None)
                if item is None:
                    group = first_rows[position : position + ahead]
                    counts = [plan_kind.batch_rows(plan, row) for row in group]
                    read = plan.read_batches(self.documents, group, counts, self._read_pack)
                    ready = iter(read)
                    ahead = min(2 * ahead, READ_AHEAD_BATCHES)
                    item = next(ready)
                batch, real = item
                if self.attention_boundaries:
                    batch = with_attention_boundaries(batch)
            real_total += real
            target_total += batch.context.size
            self.last_packing_efficiency = real_total / target_total if target_total else 0.0
            yield batch

    # ------------------------------------------------------------------ cursor
    def batches(self) -> Iterator[Batch]:
        """Yield :class:`~mixle.data.Batch` es from the cursor on, across epochs,
        advancing the cursor.

        The cursor moves before each batch is handed out, so ``state_dict()`` taken after
        receiving ``k`` batches resumes with batch ``k + 1``. One iteration at a time.
        Iteration stops at the first epoch with no batches.
        """
        cursor, plan_kind = self._cursor, self._row_plan
        step = plan_kind.step
        while True:
            epoch, start = cursor.position
            plan = self._plan(epoch)
            total = plan_kind.epoch_size(plan)
            if total == 0:
                return
            indices = range(start, total, step)
            self.last_packing_efficiency = None
            for index, batch in zip(indices, self._generate(plan, indices), strict=True):
                following = index + step
                cursor.move(*((epoch, following) if following < total else (epoch + 1, 0)))
                yield batch
            if cursor.position == (epoch, start):  # start == total: nothing left
                cursor.move(epoch + 1, 0)

    @property
    def cursor(self) -> tuple[int, int]:
        """``(epoch, batch)`` of the next batch iteration yields; ``(epoch, row)`` (its
        first global row) in the global layout."""
        return self._cursor.position

    def seek(self, epoch: int, index: int) -> None:
        """Move the cursor to ``(epoch, index)`` (:attr:`cursor` units; no replay).

        Raises
        ------
        ArgumentError
            ``index`` lies past the end of ``epoch``.
        """
        epoch = nonnegative_int("epoch", epoch)
        index = nonnegative_int(self._row_plan.index_name, index)
        total = self.epoch_size(epoch)
        if index > total:
            raise ArgumentError(
                f"`{self._row_plan.index_name}` must be at most "
                f"{self._row_plan.size_name}({epoch}) = {total}. Got {index} instead."
            )
        self._cursor.move(*((epoch, index) if index < total else (epoch + 1, 0)))

    def steps_left(self, epoch: int, index: int) -> int:
        """Batches from cursor ``(epoch, index)`` to the end of ``epoch`` (index as in
        :attr:`cursor`: a batch, or a global row in the global layout)."""
        return max(-(-(self.epoch_size(epoch) - index) // self._row_plan.step), 0)

    def stream_identity(self) -> dict[str, Any]:
        """Everything that defines this rank's stream, as saved in ``state_dict``.

        The corpus fingerprint is ``documents.fingerprint``: O(1) for a sharded corpus;
        an in-memory sequence hashes every document once (O(corpus)) and caches it. The
        row plan decides which fields it holds (the global layout leaves out the rank,
        world size and batch size: any shape resumes it).
        """
        return self._row_plan.identity(
            {
                "fingerprint": self.documents.fingerprint,
                "num_documents": self._num_documents,
                "seed": self.seed,
                "block": self.block,
                "pad_id": self.pad_id,
                "boundary_id": self.boundary_id,
                "even_batches": self.even_batches,
                "sequence_selector": _callable_name(self.sequence_selector),
                "order": self.order.identity(self._num_documents),
            }
        )

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable cursor.

        Per-rank layout: ``{"version": 1, "epoch", "batch", "stream"}`` (tied to this
        rank, world size and batch size). Global layout: the row cursor
        ``{"version": 2, "epoch", "row", "stream"}``, where ``row`` counts global rows
        consumed in the epoch; it is the same on every rank and loads into any
        ``(world_size, batch_size)``.
        """
        state = self._cursor.state_dict(self.stream_identity())
        if isinstance(self.sequence_selector, StatefulSelector):
            state[SELECTOR_KEY] = self.sequence_selector.state_dict()
        return state

    def load_state_dict(self, state: Any) -> None:
        """Move the cursor to a saved ``(epoch, batch)``; the next batch is the saved one.

        O(documents) for the epoch's order plus O(log documents) to seek — no replay.

        Raises
        ------
        StateMismatchError
            ``state`` is malformed, of another version, from a different stream (each
            differing field named with both values), or points past the epoch's end.
        """
        identity = self.stream_identity()
        layout = self.layout if self.block_schedule is None else f"{self.layout} (block_schedule)"
        check_plan_state(state, identity, layout=layout, version=self._cursor.version)
        check_saved_order(state, identity, "StreamingCorpus")
        if isinstance(self.sequence_selector, StatefulSelector):
            self.sequence_selector.load_state_dict(selector_state(state))
            self._plans = self._plans.recut(self._row_plan)  # plans of the old weights
        self._cursor.load(state, identity, epoch_size=self.epoch_size, unit=self._row_plan.unit)
