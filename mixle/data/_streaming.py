"""``StreamingCorpus``: one rank's shuffled, packed, batched view of a corpus, resumable.

Holds O(documents) int64 metadata per epoch (the order and the rank's cumulative
lengths) and O(batch_size x block) tokens per batch; it never packs a whole shard.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import BuiltinFunctionType, FunctionType, MethodType
from typing import Any

import numpy as np

from mixle._checks import exact_int, nonnegative_int, positive_int
from mixle.data._batch import Batch
from mixle.data._cursor import Cursor, identity_differences
from mixle.data._documents import as_documents, supports_prefetch
from mixle.data._order import SequenceSelector, global_document_order, length_table
from mixle.data._packed_rows import read_packed_rows
from mixle.data._packing import StreamLayout, rows_for_stream
from mixle.data._plan_store import (
    PLAN_FORMAT,
    PlanStore,
    checked_plan_store,
    plan_arrays,
    plan_from_arrays,
    sampled_lengths,
    stored_or_built,
)
from mixle.errors import ArgumentError, ArgumentTypeError, StateMismatchError

__all__ = ["LAYOUTS", "StreamingCorpus"]

LAYOUTS = ("per-rank", "global")
# Identity fields that tie a per-rank state to its shape: a global-layout state has none.
_SHAPE_FIELDS = ("rank", "world_size", "batch_size")

SeedBatch = tuple[np.ndarray, ...]
# Prefetch hints cover this many batches per call, issued while at least half of the
# previous window is still ahead: one call (and one vectorised pass in the corpus) per
# window instead of one per batch, and every document is hinted once.
_HINT_BATCHES = 32
# Global-layout hint windows are located up to this many at a time (one vectorised
# pass), as long as a pass stays under about this many documents.
_HINT_CHUNK = 16
_HINT_CHUNK_DOCUMENTS = 1 << 16
_NAMED_CALLABLES = (FunctionType, BuiltinFunctionType, MethodType, type)


@dataclass(frozen=True, slots=True)
class _EpochPlan:
    layout: StreamLayout
    rows: int
    num_batches: int


def _ceil_div(a: np.ndarray | int, b: int) -> Any:
    return -(-a // b)


def _even_batch_count(
    ordered_lengths: np.ndarray, world_size: int, has_boundary: bool, block: int, batch_size: int
) -> int:
    """Smallest per-rank batch count of the epoch, from every rank's document lengths.

    ``ordered_lengths[i]`` is the length of the ``i``-th document of the epoch's order;
    rank ``r`` holds positions ``r, r + W, ...``, i.e. column ``r`` of a ``(-1, W)`` view.
    """
    count = len(ordered_lengths)
    full = count - count % world_size
    tokens = ordered_lengths[:full].reshape(-1, world_size).sum(axis=0, dtype=np.int64)
    tokens[: count - full] += ordered_lengths[full:]
    documents = np.maximum(count - np.arange(world_size) + world_size - 1, 0) // world_size
    if has_boundary:
        tokens = tokens + np.maximum(documents - 1, 0)
    rows = np.where(tokens >= 2, _ceil_div(tokens - 1, block), 0)
    return int(_ceil_div(rows, batch_size).min())


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"`{name}` must be True or False. Got {value!r} instead.")
    return value


def _callable_name(function: Any) -> str | None:
    """``module.qualname`` of a function, method or class; of its type for other callables."""
    if function is None:
        return None
    named = function if isinstance(function, _NAMED_CALLABLES) else type(function)
    return f"{named.__module__}.{named.__qualname__}"


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ArgumentError(
            f"environment variable {name} must be an integer. Got {raw!r} instead."
        ) from None


def current_rank_and_world_size() -> tuple[int, int]:
    """``(rank, world_size)`` from an initialised ``torch.distributed``, else torchrun's env.

    Falls back to ``(0, 1)`` when neither is present.

    Raises
    ------
    ArgumentError
        Only one of ``RANK``/``WORLD_SIZE`` is set, or either is not an integer.
    """
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    rank, world_size = _env_int("RANK"), _env_int("WORLD_SIZE")
    if rank is None and world_size is None:
        return 0, 1
    if rank is None or world_size is None:
        raise ArgumentError(
            "environment variables RANK and WORLD_SIZE must be set together (torchrun sets "
            f"both). Got RANK={os.environ.get('RANK')!r}, WORLD_SIZE={os.environ.get('WORLD_SIZE')!r}."
        )
    return rank, world_size


class StreamingCorpus:
    """One rank's view of a corpus: shuffled by ``(seed, epoch)``, packed, batched.

    Epoch ``e`` consumes ``global_document_order(len(documents), seed, e, selector)``;
    this rank takes every ``world_size``-th document of it starting at ``rank``, packs
    that stream exactly as :func:`pack_documents` would (rows of ``block + 1`` tokens at
    stride ``block``, ``boundary_id`` between documents, padding only at the end), and
    cuts the rows into batches of ``batch_size`` rows (the last batch may be smaller).
    Batch ``k`` starts at stream token ``k * batch_size * block``, so starting anywhere is
    a binary search over cumulative document lengths, never a replay.

    Parameters
    ----------
    documents
        Any sequence of 1-D integer token arrays (list, tuple, lazy/mmap collection). It
        is only indexed, document by document; its optional ``lengths``,
        ``fingerprint`` and ``prefetch`` capabilities are used when present.
    rank, world_size
        ``0 <= rank < world_size``.
    block, batch_size
        Positive integers: tokens per row input, rows per batch.
    seed
        Nonnegative integer keying the shuffle.
    pad_id, boundary_id
        Exact int64 integers; ``boundary_id=None`` inserts no boundary.
    sequence_selector
        Optional curriculum hook, see :func:`global_document_order`.
    even_batches
        If True (default), every rank yields the same number of batches per epoch: the
        smallest per-rank count, computed locally from the lengths of every rank's
        documents (no communication). Rank ``r`` then drops its last
        ``rows_r - min(rows_r, E * batch_size)`` rows, where ``E`` is that count; with a
        shuffled round-robin split this is about the spread of per-rank token counts
        divided by ``block`` plus at most ``batch_size - 1`` rows. With False each rank
        yields its whole stream (what :func:`pack_documents` gives).
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
        ``"per-rank"`` (default): rank ``r`` packs its own round-robin share of the
        order, as described above; the cursor is ``(epoch, batch)`` and resumes only
        with the same ``(world_size, batch_size)``. ``"global"``: the epoch's whole
        order is packed into one row stream; global batch ``k`` is rows
        ``[k * G, (k + 1) * G)`` with ``G = world_size * batch_size``, and rank ``r``
        reads rows ``[k * G + r * batch_size, k * G + (r + 1) * batch_size)``, reading
        only the documents those rows overlap. The last global batch is completed
        with fully masked rows, so every batch has ``batch_size`` rows, every rank
        takes ``ceil(rows / G)`` steps and every real target of the epoch is trained
        on exactly once (``even_batches`` does not apply). The concatenation over
        ranks of step ``k`` is bitwise the same for every factorisation of ``G``; the
        cursor counts global rows (``{"version": 2, "epoch", "row", "stream"}``) and
        resumes with any ``world_size`` and ``batch_size``.
    plan_store
        Optional :class:`~mixle.data._plan_store.PlanStore` (e.g.
        ``mixle.corpus.storage.plan_cache.PlanFiles``): each epoch plan is loaded from
        it by its identity (the stream identity and the epoch) and, when missing or
        inconsistent, built and saved to it, so a restarted process skips the O(documents)
        planning. Batches are the same with or without it. Ignored with a
        ``sequence_selector`` (whose behaviour its name does not pin). With a store,
        the documents' lengths are read (and in-memory documents' shapes checked) when
        a plan is built, not in the constructor.

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
        rank: int,
        world_size: int,
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
    ) -> None:
        if layout not in LAYOUTS:
            raise ArgumentError(
                f"`layout` must be one of {', '.join(map(repr, LAYOUTS))}. Got {layout!r} instead."
            )
        self.layout = layout
        self.world_size = positive_int("world_size", world_size)
        self.rank = nonnegative_int("rank", rank)
        if self.rank >= self.world_size:
            raise ArgumentError(
                f"`rank` must be smaller than `world_size` ({self.world_size}). Got {self.rank} instead."
            )
        self.block = positive_int("block", block)
        self.batch_size = positive_int("batch_size", batch_size)
        self.seed = nonnegative_int("seed", seed)
        self.pad_id = exact_int("pad_id", pad_id)
        self.boundary_id = None if boundary_id is None else exact_int("boundary_id", boundary_id)
        if sequence_selector is not None and not callable(sequence_selector):
            raise ArgumentTypeError(
                "`sequence_selector` must be callable (order, seed, epoch) -> order or None. "
                f"Got {type(sequence_selector).__name__} instead."
            )
        self.sequence_selector = sequence_selector
        self.even_batches = _flag("even_batches", even_batches)
        self.document_ids = _flag("document_ids", document_ids)
        self.documents = as_documents(documents)
        self._num_documents = len(self.documents)
        self._lengths_array: np.ndarray | None = None
        self.prefetch = _flag("prefetch", prefetch)
        self._supports_prefetch = self.prefetch and supports_prefetch(self.documents)
        self._plans: dict[int, _EpochPlan] = {}
        plan_store = checked_plan_store(plan_store)
        self.plan_store = None if sequence_selector is not None else plan_store
        if self.plan_store is None:
            # Read (and, for in-memory documents, check) every length now; with a plan
            # store they are read only when a plan is built, so a restart stays O(batch).
            self._lengths()
        self._cursor = (
            Cursor("StreamingCorpus", index_key="row", version=2)
            if layout == "global"
            else Cursor("StreamingCorpus")
        )
        self.last_packing_efficiency: float | None = None

    @classmethod
    def for_current_rank(cls, documents: Sequence[Any], **kwargs: Any) -> StreamingCorpus:
        """Build the view for this process's rank, from ``torch.distributed`` or torchrun.

        Uses ``torch.distributed.get_rank()/get_world_size()`` when a process group is
        initialised, else the ``RANK``/``WORLD_SIZE`` environment variables torchrun sets,
        else rank 0 of 1. Every other argument is passed to the constructor.
        """
        for name in ("rank", "world_size"):
            if name in kwargs:
                raise ArgumentError(f"`{name}` is read from the environment by for_current_rank.")
        rank, world_size = current_rank_and_world_size()
        return cls(documents, rank=rank, world_size=world_size, **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        # Epoch plans are O(documents) and cheap to rebuild: never ship them to workers.
        state = {slot: value for slot, value in self.__dict__.items() if slot != "_plans"}
        state["_plans"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    # ------------------------------------------------------------------ planning
    def _plan(self, epoch: int) -> _EpochPlan:
        plan = self._plans.get(epoch)
        if plan is not None:
            return plan
        store = self.plan_store
        if store is None:
            return self._keep(epoch, self._build_plan(epoch))
        identity = {**self.stream_identity(), "epoch": epoch, "plan_format": PLAN_FORMAT}

        def build() -> tuple[_EpochPlan, dict[str, np.ndarray]]:
            built = self._build_plan(epoch)
            return built, plan_arrays(built.layout, built.rows, built.num_batches)

        return self._keep(epoch, stored_or_built(store, identity, self._stored_plan, build))

    def _lengths(self) -> np.ndarray:
        """Every document's length (a :func:`length_table`), read on first use."""
        if self._lengths_array is None:
            self._lengths_array = length_table(self.documents.lengths)
        return self._lengths_array

    def _sampled_lengths(self, indices: np.ndarray) -> np.ndarray:
        return sampled_lengths(self.documents, self._lengths_array, indices)

    def _stored_plan(self, arrays: Mapping[str, np.ndarray]) -> _EpochPlan | None:
        """A loaded plan, or ``None`` when it fails the checks."""
        loaded = plan_from_arrays(
            arrays, self._num_documents, self._sampled_lengths, self.boundary_id is not None
        )
        if loaded is None:
            return None
        layout, rows, num_batches = loaded
        if rows != rows_for_stream(layout.stream_tokens, self.block):
            return None
        if self.layout == "global":  # the global plan is shared by every batch shape
            num_batches = int(_ceil_div(rows, self.global_batch_size))
        return _EpochPlan(layout, rows, num_batches)

    def _build_plan(self, epoch: int) -> _EpochPlan:
        order = global_document_order(
            self._num_documents,
            seed=self.seed,
            epoch=epoch,
            sequence_selector=self.sequence_selector,
        )
        # One random gather of the lengths serves this rank's layout and every rank's
        # total (`take` of the narrow table: about 30% cheaper than int64 fancy indexing).
        ordered_lengths = self._lengths().take(order)
        has_boundary = self.boundary_id is not None
        if self.layout == "global":
            # One row stream for all ranks: global batch k is rows [kG, (k+1)G).
            layout = StreamLayout.build(order, ordered_lengths, has_boundary)
            rows = rows_for_stream(layout.stream_tokens, self.block)
            return _EpochPlan(layout, rows, int(_ceil_div(rows, self.global_batch_size)))
        # A copy: a strided view would keep every rank's order (world_size times the
        # rank's share) alive in the plan for the whole epoch.
        own = order[self.rank :: self.world_size].copy()
        layout = StreamLayout.build(
            own, ordered_lengths[self.rank :: self.world_size], has_boundary
        )
        rows = rows_for_stream(layout.stream_tokens, self.block)
        batches = int(_ceil_div(rows, self.batch_size))
        if self.even_batches and self.world_size > 1:
            batches = _even_batch_count(
                ordered_lengths, self.world_size, has_boundary, self.block, self.batch_size
            )
        return _EpochPlan(layout, rows, batches)

    def _keep(self, epoch: int, plan: _EpochPlan) -> _EpochPlan:
        if len(self._plans) >= 2:  # keep the current and the next epoch
            self._plans.pop(next(iter(self._plans)))
        self._plans[epoch] = plan
        return plan

    @property
    def global_batch_size(self) -> int:
        """Rows of one step over all ranks: ``world_size * batch_size``."""
        return self.world_size * self.batch_size

    def num_rows(self, epoch: int) -> int:
        """Rows of the epoch's row stream (the rank's stream in the per-rank layout)."""
        return self._plan(nonnegative_int("epoch", epoch)).rows

    def _first_row(self, index: int) -> int:
        """This rank's first row of batch ``index`` of an epoch (counted from row 0)."""
        if self.layout == "global":
            return index * self.global_batch_size + self.rank * self.batch_size
        return index * self.batch_size

    def rank_document_indices(self, epoch: int) -> np.ndarray:
        """This rank's document indices for ``epoch``, in packing order (int64 copy).

        In the global layout this is the whole epoch order: every rank's rows are cut
        from the one stream of all documents.
        """
        return self._plan(nonnegative_int("epoch", epoch)).layout.indices.copy()

    def num_batches(self, epoch: int) -> int:
        """Number of batches ``epoch_batches(epoch)`` yields (after ``even_batches``)."""
        return self._plan(nonnegative_int("epoch", epoch)).num_batches

    # ------------------------------------------------------------------ batches
    def _make_batch(self, plan: _EpochPlan, first_row: int) -> tuple[Batch, int]:
        """This rank's batch whose first row is ``first_row``, and its real target count.

        Per-rank layout: up to ``batch_size`` rows (fewer at the end of the stream).
        Global layout: always ``batch_size`` rows; rows past the stream's last row are
        fully masked padding, which completes the epoch's last global batch.
        """
        if self.layout == "global":
            n_rows = self.batch_size
        else:
            n_rows = min(first_row + self.batch_size, plan.rows) - first_row
        rows = read_packed_rows(
            self.documents,
            plan.layout,
            first_row,
            n_rows,
            block=self.block,
            pad_id=self.pad_id,
            boundary_id=self.boundary_id,
            document_ids=self.document_ids,
        )
        batch = Batch(rows.context, rows.targets, rows.mask, rows.document_ids, rows.position_ids)
        return batch, rows.real

    def read(self, epoch: int, index: int) -> Batch:
        """The batch iteration yields at cursor ``(epoch, index)`` (see :attr:`cursor`).

        Per-rank layout: batch ``index`` of the epoch (:meth:`batch_at`). Global layout:
        this rank's part of the global batch whose first row is ``index``
        (:meth:`batch_at_row`).
        """
        if self.layout == "global":
            return self._batch_at_row(epoch, index)
        return self._batch_at(epoch, index)

    def batch_at(self, epoch: int, index: int) -> SeedBatch:
        """The batch ``epoch_batches(epoch)`` yields at position ``index``, by seeking.

        O(log documents) to find the first document, then reads only the documents the
        batch overlaps; the epoch's layout is cached (the two most recent epochs).

        Raises
        ------
        ArgumentError
            ``index >= num_batches(epoch)`` (or either argument is negative).
        """
        return self._batch_at(epoch, index).as_tuple()

    def _batch_at(self, epoch: int, index: int) -> Batch:
        epoch = nonnegative_int("epoch", epoch)
        index = nonnegative_int("index", index)
        plan = self._plan(epoch)
        if index >= plan.num_batches:
            raise ArgumentError(
                f"`index` must be smaller than num_batches({epoch}) = {plan.num_batches}. "
                f"Got {index} instead."
            )
        batch, _ = self._make_batch(plan, self._first_row(index))
        return batch

    def batch_at_row(self, epoch: int, row: int) -> SeedBatch:
        """Global layout: this rank's part of the global batch that starts at ``row``.

        Rows ``[row + rank * batch_size, row + (rank + 1) * batch_size)`` of the epoch's
        row stream; rows past its end are fully masked. Any ``0 <= row < num_rows(epoch)``
        is valid (a resumed run's global batches need not start at a multiple of the
        global batch size).

        Raises
        ------
        ArgumentError
            The corpus uses the per-rank layout, or ``row`` is outside the epoch.
        """
        if self.layout != "global":
            raise ArgumentError("`batch_at_row` needs layout='global'; use batch_at.")
        return self._batch_at_row(epoch, row).as_tuple()

    def _batch_at_row(self, epoch: int, row: int) -> Batch:
        epoch = nonnegative_int("epoch", epoch)
        row = nonnegative_int("row", row)
        plan = self._plan(epoch)
        if row >= plan.rows:
            raise ArgumentError(
                f"`row` must be smaller than num_rows({epoch}) = {plan.rows}. Got {row} instead."
            )
        batch, _ = self._make_batch(plan, row + self.rank * self.batch_size)
        return batch

    def advance(self, epoch: int, batch: int, steps: int) -> tuple[int, int] | None:
        """The cursor ``steps`` batches after ``(epoch, batch)`` in the across-epochs order.

        Returns ``None`` when an epoch with no batches is reached first (where iteration
        stops). ``(epoch, batch)`` with ``batch == num_batches(epoch)`` is read as
        ``(epoch + 1, 0)``.
        """
        steps = nonnegative_int("steps", steps)
        if self.layout == "global":
            return self._advance_rows(epoch, batch, steps)
        while True:
            total = self.num_batches(epoch)
            if total == 0:
                return None
            if batch + steps < total:
                return epoch, batch + steps
            steps -= total - batch
            epoch, batch = epoch + 1, 0

    def _advance_rows(self, epoch: int, row: int, steps: int) -> tuple[int, int] | None:
        """Global layout: the row cursor ``steps`` global batches after ``(epoch, row)``."""
        size = self.global_batch_size
        while True:
            total = self.num_rows(epoch)
            if total == 0:
                return None
            left = int(_ceil_div(total - row, size)) if row < total else 0
            if steps < left:
                return epoch, row + steps * size
            steps -= left
            epoch, row = epoch + 1, 0

    def _hint_windows(self, plan: _EpochPlan, first_rows: range) -> Iterator[np.ndarray]:
        """Document indices to hint, per window of :data:`_HINT_BATCHES` batches.

        ``first_rows`` are this rank's first rows of the batches to be read, in order; the
        windows start with its second batch (the first is read at once). Each yields the
        documents the window's batches overlap, in read order, each once over all the
        windows; per-rank, the document shared with the batch before the window (hinted
        already, or being read) is left out.

        Per-rank rows are contiguous, so a window is one slice of the layout. Global rows
        are one range per batch, so up to :data:`_HINT_CHUNK` windows are located with one
        ``searchsorted`` pair and gathered in one vectorised pass (which costs about the
        same for 32 batches as for 512): the first pass covers one window (a restart's
        first batch waits for it), later ones double while they stay under
        :data:`_HINT_CHUNK_DOCUMENTS` documents.
        """
        layout, block = plan.layout, self.block
        span = self.batch_size * block
        count = len(layout.indices)
        first_rows = first_rows[1:]
        if self.layout != "global":
            for at in range(0, len(first_rows), _HINT_BATCHES):
                window = first_rows[at : at + _HINT_BATCHES]
                end = min(window[-1] * block + span + 1, layout.stream_tokens)
                low, high = layout.documents_between(window[0] * block, end)
                yield layout.indices[low + 1 : high]
            return
        previous = 0  # end of the documents hinted so far, in `layout.indices`
        at, windows = 0, 1  # the first pass locates one window: a restart waits for it
        while at < len(first_rows):
            rows = first_rows[at : at + windows * _HINT_BATCHES]
            at += len(rows)
            begins = np.arange(rows.start, rows.stop, rows.step, dtype=np.int64) * block
            lows = np.maximum(layout.starts.searchsorted(begins, side="right") - 1, 0)
            highs = np.minimum(layout.starts.searchsorted(begins + span + 1, side="left"), count)
            # A document shared by consecutive ranges is hinted with the first.
            lows[0] = max(int(lows[0]), previous)
            lows[1:] = np.maximum(lows[1:], highs[:-1])
            counts = np.maximum(highs - lows, 0)
            ends = np.cumsum(counts)
            # Positions lows[k] .. highs[k] - 1 for every k, in one pass.
            chunk = layout.indices.take(
                np.arange(int(ends[-1])) - np.repeat(ends - counts - lows, counts)
            )
            bounds = [0, *ends[_HINT_BATCHES - 1 :: _HINT_BATCHES].tolist()]
            if len(rows) % _HINT_BATCHES:
                bounds.append(int(ends[-1]))
            for first, stop in itertools.pairwise(bounds):
                yield chunk[first:stop]
            previous = max(previous, int(highs[-1]))
            # Grow the passes while they stay small (short documents fill them fast).
            fits = _HINT_CHUNK_DOCUMENTS * windows // max(chunk.shape[0], 1)
            windows = max(1, min(2 * windows, _HINT_CHUNK, fits))

    def _hint(self, indices: np.ndarray | None) -> None:
        if indices is not None and indices.size:
            self.documents.prefetch(indices)

    def epoch_batches(self, epoch: int, *, start_batch: int = 0) -> Iterator[SeedBatch]:
        """Yield this rank's batches of ``epoch`` from batch ``start_batch`` on.

        Each batch is ``(context, targets, loss_mask)`` — ``(b, block)`` int64, int64 and
        bool, ``b <= batch_size`` (only the last batch may be smaller) — plus
        ``(document_ids, position_ids)`` when ``document_ids=True``. ``context`` and
        ``targets`` are views of one buffer of ``b * block + 1`` tokens (``targets`` is
        ``context`` shifted by one), int64, never downcast. ``loss_mask`` is False only on
        padding targets of the final row of the stream: callers must apply it before
        averaging the loss. With ``even_batches=False`` the batches are exactly
        ``pack_documents(documents, rank_document_indices(epoch), block, ...)`` cut into
        groups of ``batch_size`` rows, bitwise; with True they are a prefix of those.

        Seeking to ``start_batch`` is a binary search (O(log documents)); each batch reads
        only the documents it overlaps. Sets ``last_packing_efficiency`` (the real
        fraction of the target positions yielded by this call) as batches are produced.

        Raises
        ------
        ArgumentTypeError, ArgumentError
            ``epoch``/``start_batch`` invalid, or ``start_batch > num_batches(epoch)``
            (raised here, before the first batch is requested).
        TokenIdError
            A document read for a batch holds an invalid token id.
        """
        return (batch.as_tuple() for batch in self.iter_epoch(epoch, start_batch=start_batch))

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
        self.last_packing_efficiency = None
        return self._generate(plan, start_batch)

    def _generate(self, plan: _EpochPlan, start_batch: int) -> Iterator[Batch]:
        real_total = 0
        target_total = 0
        stride = self.global_batch_size if self.layout == "global" else self.batch_size
        first_rows = range(self._first_row(start_batch), self._first_row(plan.num_batches), stride)
        hints = self._hint_windows(plan, first_rows)
        hinted = start_batch + 1  # batches before this one are hinted (or being read)
        for index, first_row in enumerate(first_rows, start_batch):
            if self._supports_prefetch and hinted - index <= _HINT_BATCHES // 2:
                self._hint(next(hints, None))
                hinted += _HINT_BATCHES
            batch, real = self._make_batch(plan, first_row)
            real_total += real
            target_total += batch.context.size
            self.last_packing_efficiency = real_total / target_total if target_total else 0.0
            yield batch

    # ------------------------------------------------------------------ cursor
    def __iter__(self) -> Iterator[SeedBatch]:
        """The seed's tuples of :meth:`batches` (``Batch.as_tuple()`` of each)."""
        return (batch.as_tuple() for batch in self.batches())

    def batches(self) -> Iterator[Batch]:
        """Yield :class:`~mixle.data.Batch` es from the cursor on, across epochs,
        advancing the cursor.

        The cursor moves before each batch is handed out, so ``state_dict()`` taken after
        receiving ``k`` batches resumes with batch ``k + 1``. One iteration at a time.
        """
        if self.layout == "global":
            yield from self._iterate_rows()
            return
        cursor = self._cursor
        while True:
            epoch, start = cursor.position
            total = self.num_batches(epoch)
            if total == 0:
                return
            for index, batch in enumerate(self.iter_epoch(epoch, start_batch=start), start):
                cursor.move(*((epoch, index + 1) if index + 1 < total else (epoch + 1, 0)))
                yield batch
            if cursor.position == (epoch, start):  # start == total: nothing left
                cursor.move(epoch + 1, 0)

    def _iterate_rows(self) -> Iterator[Batch]:
        """Global layout: global batches from the row cursor on, across epochs."""
        cursor, size = self._cursor, self.global_batch_size
        offset = self.rank * self.batch_size
        while True:
            epoch, start = cursor.position
            plan = self._plan(epoch)
            if plan.rows == 0:
                return
            firsts = range(start, plan.rows, size)
            hints = self._hint_windows(plan, range(start + offset, plan.rows + offset, size))
            hinted = 1  # positions in `firsts` before this one are hinted (or being read)
            for position, first in enumerate(firsts):
                if self._supports_prefetch and hinted - position <= _HINT_BATCHES // 2:
                    self._hint(next(hints, None))
                    hinted += _HINT_BATCHES
                batch, _ = self._make_batch(plan, first + offset)
                following = first + size
                cursor.move(*((epoch, following) if following < plan.rows else (epoch + 1, 0)))
                yield batch
            if cursor.position == (epoch, start):  # start == rows: nothing left
                cursor.move(epoch + 1, 0)

    @property
    def cursor(self) -> tuple[int, int]:
        """``(epoch, batch)`` of the next batch iteration yields; ``(epoch, row)`` (its
        first global row) in the global layout."""
        return self._cursor.position

    def steps_left(self, epoch: int, index: int) -> int:
        """Batches from cursor ``(epoch, index)`` to the end of ``epoch`` (index as in
        :attr:`cursor`: a batch, or a global row in the global layout)."""
        if self.layout == "global":
            return max(int(_ceil_div(self.num_rows(epoch) - index, self.global_batch_size)), 0)
        return max(self.num_batches(epoch) - index, 0)

    def stream_identity(self) -> dict[str, Any]:
        """Everything that defines this rank's stream, as saved in ``state_dict``.

        The corpus fingerprint is ``documents.fingerprint``: O(1) for a sharded corpus;
        an in-memory sequence hashes every document once (O(corpus)) and caches it.
        """
        if self.layout == "global":
            # Rank, world size and batch size are not part of it: any shape resumes it.
            return {
                "fingerprint": self.documents.fingerprint,
                "num_documents": self._num_documents,
                "seed": self.seed,
                "block": self.block,
                "pad_id": self.pad_id,
                "boundary_id": self.boundary_id,
                "sequence_selector": _callable_name(self.sequence_selector),
                "layout": "global",
            }
        return {
            "fingerprint": self.documents.fingerprint,
            "num_documents": self._num_documents,
            "seed": self.seed,
            "block": self.block,
            "batch_size": self.batch_size,
            "rank": self.rank,
            "world_size": self.world_size,
            "pad_id": self.pad_id,
            "boundary_id": self.boundary_id,
            "even_batches": self.even_batches,
            "sequence_selector": _callable_name(self.sequence_selector),
        }

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable cursor.

        Per-rank layout: ``{"version": 1, "epoch", "batch", "stream"}`` (tied to this
        rank, world size and batch size). Global layout: the row cursor
        ``{"version": 2, "epoch", "row", "stream"}``, where ``row`` counts global rows
        consumed in the epoch; it is the same on every rank and loads into any
        ``(world_size, batch_size)``.
        """
        return self._cursor.state_dict(self.stream_identity())

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
        self._check_layout(state, identity)
        if self.layout == "global":
            self._cursor.load(state, identity, epoch_size=self.num_rows, unit="rows")
        else:
            self._cursor.load(state, identity, epoch_size=self.num_batches)

    def _check_layout(self, state: Any, identity: dict[str, Any]) -> None:
        """Refuse a state of the other layout, or a per-rank state of another shape,
        with a message that names the global layout as the way to resume elastically."""
        if not isinstance(state, dict):
            return
        version, expected = state.get("version"), self._cursor.version
        if version in (1, 2) and version != expected:
            saved_layout = "global" if version == 2 else "per-rank"
            raise StateMismatchError(
                f"StreamingCorpus state is a version-{version} ({saved_layout} layout) state; "
                f"this stream uses layout={self.layout!r} and reads version {expected}. "
                f"layout in checkpoint: {saved_layout!r} / in stream: {self.layout!r}."
            )
        saved = state.get("stream")
        if self.layout == "per-rank" and version == 1 and isinstance(saved, dict):
            differences = identity_differences(saved, identity)
            if differences and all(d.split(" ", 1)[0] in _SHAPE_FIELDS for d in differences):
                raise StateMismatchError(
                    "StreamingCorpus per-rank state resumes only with the same rank, "
                    "world_size and batch_size: " + "; ".join(differences) + ". Build the "
                    "stream with layout='global' to resume on another number of ranks or "
                    "with another batch size."
                )
