"""``torch.utils.data.IterableDataset`` adapter: :class:`StreamDataset` over any stream of
the one resumable contract (``StreamingCorpus``, ``TokenStream``, ``Mixture``); the
names the docs use, :class:`StreamingDataset` (a corpus) and :class:`TokenStreamDataset`
(a token stream), are it.

The batch sequence a ``DataLoader(dataset, batch_size=None, num_workers=n)`` yields is
identical for every ``n``: worker ``w`` of ``n`` produces the batches whose position
``k`` in the across-epochs sequence (counted from the corpus cursor) satisfies
``k ≡ w (mod n)``, and the DataLoader's in-order round robin over workers puts them back
in order. Each worker seeks straight to its batches (a binary search), so no batch is
computed twice and none is skipped.

Resuming
--------
Both datasets are *stateful* in the sense of ``torchdata.stateful_dataloader``: they have
``state_dict()`` / ``load_state_dict()`` that save and restore the next batch of the
process they run in (each worker saves its own). With ``StatefulDataLoader`` the
supported order is::

    loader = StatefulDataLoader(dataset, batch_size=None, num_workers=n)
    loader.load_state_dict(saved)      # FIRST load ...
    for batch in loader: ...           # ... THEN create the iterator

Calling ``iter(loader)`` before ``load_state_dict`` creates an iterator that has already
read its (empty) state: that iterator starts from the beginning, silently.
``StatefulDataLoader`` itself refuses a state saved with another ``num_workers``;
``dataset.loader_state_for(saved, num_workers=m)`` rewrites a state saved with any
worker count (0 included) for ``m`` workers, continuing at the same next batch::

    loader = StatefulDataLoader(dataset, batch_size=None, num_workers=m)
    loader.load_state_dict(dataset.loader_state_for(saved, num_workers=m))

Worker processes may be forked or spawned; the corpus (and its ``documents``) must be
picklable for spawn.

Transport
---------
In a worker process each batch is handed to the DataLoader as one :class:`PackedBatch`:
all its arrays copied into one buffer. By default (``shared_memory=True``, Linux) that
buffer is a free slot of the worker's ring of shared-memory slots
(:mod:`mixle.data._slot_ring`, one anonymous ``memfd`` mapping per worker), and only the
slot's place and the arrays' layout (about 200 bytes) travel through the worker's result
pipe; the main process maps the ring once (its descriptor comes with the first batch),
copies the batch out of the slot into the list of tensors the DataLoader yields and frees
the slot. When no slot is free (the consumer fell behind), on other platforms, and with
``shared_memory=False`` the buffer's bytes are pickled through the pipe instead. Either
way the main process receives the same list ``default_convert`` makes of a tuple, each
tensor a contiguous view of one private buffer, bitwise equal to the in-process batch.
Tensors handed over one by one would cost torch a shared-memory segment, a socket
connection to the worker's ``resource_sharer`` and an authentication handshake *each*,
answered one at a time: that serialised the workers. A custom ``collate_fn`` running in
a worker receives the :class:`PackedBatch`; ``PackedBatch.unpack()`` gives its tensors.

Several batches per item
------------------------
torch's DataLoader still costs its main process 60-160 µs per item, as much as a worker
spends on a batch 8 x 2048, which caps what a second worker adds. :class:`StreamLoader`
(:mod:`mixle.data._stream_loader`) runs the DataLoader over a copy of the dataset whose
workers yield groups of consecutive batches (one slot, lent to the main process without
a copy) and yields them one batch per step: the same batches in the same order, with a
``state_dict`` that names the next batch, mid-group included.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from mixle._checks import nonnegative_int, positive_int
from mixle.data._batch import Batch
from mixle.data._batch_group import (
    ALIGN,
    GroupInfo,
    Layout,
    Stack,
    auto_group_size,
    group_bytes,
    nbytes_of,
    receive_group,
    stacked,
    tensors_of,
    unpack_group,
)
from mixle.data._cursor import Cursor
from mixle.data._loader_state import MAX_POSITION, saved_workers
from mixle.data._mesh import DpDims, PlacedStream, check_stream_place
from mixle.data._resumable import ResumableStream
from mixle.data._slot_group import ReadsRunsInto, SlotGroup, direct_group_bytes, read_direct_group
from mixle.data._slot_ring import FdHandle, SlotOwner, mapped_ring, worker_ring
from mixle.data._stream_loader import GroupedSource, StreamLoader
from mixle.data._streaming import StreamingCorpus
from mixle.data.stream_token_source import TokenStream
from mixle.errors import ArgumentTypeError, StateMismatchError

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = [
    "PackedBatch",
    "StreamDataset",
    "StreamLoader",
    "StreamingDataset",
    "TokenStreamDataset",
]


# Keys of the StatefulDataLoader main-process state that carry over to any worker count.
_MAIN_KEYS = (
    "_sampler_iter_state",
    "_index_sampler_state",
    "_sampler_iter_yielded",
    "_IterableDataset_len_called",
    "_shared_seed",
)


def _worker() -> tuple[int, int]:
    info = get_worker_info()
    return (0, 1) if info is None else (int(info.id), int(info.num_workers))


_ALIGN = ALIGN
_Layout = Layout
_unpack = tensors_of


def _receive(
    token: str, pid: int, handle: FdHandle | None, slot: int, sequence: int, layout: _Layout
) -> list[torch.Tensor]:
    """The tensors of a batch a worker left in shared slot ``slot`` (copied out, freed)."""
    return _unpack(mapped_ring(token, pid, handle).take(slot, sequence, nbytes_of(layout)), layout)


class PackedBatch(SlotOwner):
    """One batch as a DataLoader worker sends it: every array in one byte buffer.

    Pickling it produces a small layout (dtype, shape and offset of each array) and
    either the buffer as one bytes payload or, for a *shared* batch, only the place of
    the buffer in the worker's shared-memory ring (:mod:`mixle.data._slot_ring`: the
    main process maps the ring once and copies the batch out of its slot). Unpickling
    produces the ``list`` of tensors directly, so the DataLoader's main process never
    sees this class. Built only in worker processes.

    Parameters
    ----------
    parts
        The batch's arrays, in order (copied; C order, any shape, fixed-size dtypes);
        a :class:`~mixle.data._batch_group.Stack` of equal arrays is packed as one
        array with a leading axis (the same array of every batch of a group).
    shared
        Copy them into a free slot of this process's shared-memory ring when there is
        one (Linux; the ring is made for the first batch, and a larger batch or a full
        ring falls back to the bytes payload).
    """

    __slots__ = ("buffer", "group", "layout")

    def __init__(
        self,
        parts: tuple[np.ndarray | Stack, ...],
        *,
        shared: bool = False,
        group: GroupInfo | None = None,
    ) -> None:
        super().__init__(None)
        layout = []
        offset = 0
        for part in parts:
            layout.append((part.dtype.str, tuple(part.shape), offset))
            offset += -(-part.nbytes // _ALIGN) * _ALIGN
        ring = worker_ring(offset) if shared and offset else None
        acquired = None if ring is None else ring.acquire(offset)
        #: The bytes: a ``bytearray``, or a view of a shared slot.
        self.buffer: bytearray | np.ndarray
        if acquired is None:
            self.buffer = bytearray(offset)
            raw = np.frombuffer(self.buffer, dtype=np.uint8)
        else:
            raw = self.buffer = acquired[2]
        for part, (_, shape, start) in zip(parts, layout, strict=True):
            target = raw[start : start + part.nbytes].view(part.dtype).reshape(shape)
            if isinstance(part, Stack):
                for index, array in enumerate(part.arrays):
                    target[index] = array
            else:
                target[...] = part
        self.layout = tuple(layout)
        #: For a group of batches (:class:`~mixle.data.torch.StreamLoader`): the parts per
        #: batch and the position of each batch and of the one after them.
        self.group = group
        if ring is not None and acquired is not None:
            ring.publish(acquired[0], acquired[1])
            self._ring_slot = (ring, acquired[0], acquired[1])

    def unpack(self) -> list[torch.Tensor]:
        """The batch's tensors, as the DataLoader yields them.

        Views of :attr:`buffer`; a shared batch is first copied out of its slot and the
        slot freed (a ``collate_fn`` in the worker then owns the bytes).
        """
        if self._ring_slot is not None:
            self.buffer = bytearray(self.buffer)
            self._free()
        return _unpack(self.buffer, self.layout)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        if self.group is not None:
            if self._ring_slot is None:
                return (unpack_group, (self.buffer, self.layout, self.group))
            # The receiver's views free the slot when they go.
            return (receive_group, (self._hand_over(), self.layout, self.group))
        if self._ring_slot is None:
            return (_unpack, (self.buffer, self.layout))
        return (_receive, (*self._hand_over(), self.layout))  # the receiver frees it now


class StreamDataset(
    IterableDataset[tuple[torch.Tensor, ...] | PackedBatch | SlotGroup], GroupedSource
):
    """Any resumable stream's batches as tensors, worker-count invariant and resumable.

    Wraps the one resumable contract (:class:`~mixle.data._resumable.ResumableStream`:
    ``StreamingCorpus``, ``TokenStream``, ``Mixture``): a position is the stream's
    cursor ``(epoch, index)``; the batch at one is ``stream.read(epoch, index)`` and the
    next is ``stream.next_cursor``. The positions are split over DataLoader workers
    (worker ``w`` of ``n`` takes every ``n``-th from the origin, starting ``w`` after
    it) and each process saves/restores its own next position. The stream itself is
    not advanced.

    Parameters
    ----------
    stream
        The stream; iteration starts at its cursor at construction time.
    num_epochs
        Stop before epoch ``num_epochs`` (an absolute epoch number); ``None`` runs until
        the stream ends.
    mesh, dp_dims
        Optional ``torch.distributed.DeviceMesh`` and its data-parallel dimensions: the
        stream must have been built for this process's data-parallel place in it
        (``ArgumentError`` naming both places otherwise), the mistake being a stream
        built from the global rank under tensor/pipeline/context parallelism.
    shared_memory
        In DataLoader worker processes, hand batches to the main process through a
        ring of shared-memory slots per worker (Linux), sending only each batch's place
        through the result pipe; ``False`` sends every batch's bytes through the pipe
        (the transport on other platforms, and whenever the ring is full).

    Each item is the stream's batch tuple (:meth:`Batch.as_tuple`) as tensors. Use
    ``batch_size=None`` in the ``DataLoader``: batching already happened.
    """

    _kind = "StreamDataset"
    #: Whether a grouped view's workers read groups straight into their slots where the
    #: stream can (``False``: batch by batch, then copied; benchmarks compare the two).
    _direct_groups = True

    def __init__(
        self,
        stream: ResumableStream,
        *,
        num_epochs: int | None = None,
        mesh: DeviceMesh | None = None,
        dp_dims: DpDims = ("dp",),
        shared_memory: bool = True,
    ) -> None:
        if not isinstance(stream, ResumableStream):
            raise ArgumentTypeError(
                f"`stream` must be a resumable stream (StreamingCorpus, TokenStream, "
                f"Mixture). Got {type(stream).__name__} instead."
            )
        if mesh is not None:
            if not isinstance(stream, PlacedStream):
                raise ArgumentTypeError(
                    f"`mesh` needs a stream with shard options. Got {type(stream).__name__}."
                )
            place = (stream.shard.rank, stream.shard.world_size)
            check_stream_place(self._kind, place, mesh, dp_dims)
        super().__init__()
        self.stream = stream
        if not isinstance(shared_memory, bool):
            raise ArgumentTypeError(
                f"`shared_memory` must be True or False. Got {shared_memory!r} instead."
            )
        self.shared_memory = shared_memory
        self.num_epochs = None if num_epochs is None else positive_int("num_epochs", num_epochs)
        self._origin = self._from_cursor(stream.cursor)
        self._started = False
        self._next: tuple[int, int] | None = None
        self._loaded = False
        self._cursor = Cursor(self._kind, extra=("done",))
        # Batches per worker item: None, one batch per item (the plain DataLoader
        # contract); a StreamLoader's view groups k (0: sized from the first batch).
        self._group: int | None = None

    # -- positions: the stream's cursor, unless a subclass saves them in other units ------
    def _from_cursor(self, cursor: tuple[int, int]) -> tuple[int, int]:
        """The saved position of a stream cursor (the same pair by default)."""
        return cursor

    def _to_cursor(self, position: tuple[int, int]) -> tuple[int, int]:
        """The stream cursor of a saved position (the same pair by default)."""
        return position

    def _advance(self, position: tuple[int, int], steps: int) -> tuple[int, int] | None:
        """The position ``steps`` batches after ``position``; ``None`` past the end."""
        following = self.stream.next_cursor(*self._to_cursor(position), steps)
        return None if following is None else self._from_cursor(following)

    def _batch(self, position: tuple[int, int]) -> Batch:
        """The batch at ``position``."""
        return self.stream.read(*self._to_cursor(position))

    def _epoch_size(self, epoch: int) -> int:
        """Where the saved index ends in ``epoch``."""
        return self.stream.epoch_size(epoch)

    def stream_identity(self) -> dict[str, Any]:
        """The fields that define the underlying stream, and ``num_epochs``."""
        return {**self.stream.stream_identity(), "num_epochs": self.num_epochs}

    def _exhausted(self, position: tuple[int, int]) -> bool:
        """Whether iteration stops before ``position`` (the ``num_epochs`` bound)."""
        return self.num_epochs is not None and position[0] >= self.num_epochs

    # -- iteration and state -----------------------------------------------------------
    def _first(self, worker: int) -> tuple[int, int] | None:
        if self._loaded:
            return self._next
        return self._advance(self._origin, worker)

    # -- what StreamLoader needs (GroupedSource) ----------------------------------------
    def _loader_start(self) -> tuple[int, int] | None:
        return self._first(0)

    def _loader_view(self, start: tuple[int, int], batches_per_item: int) -> StreamDataset:
        return self._grouped(start, batches_per_item)

    def _loader_next(self) -> tuple[int, int] | None:
        return self._next

    def _loader_state(self, position: tuple[int, int] | None) -> dict[str, Any]:
        self._cursor.move(*((0, 0) if position is None else position))
        return self._cursor.state_dict(self._identity(0, 1), done=int(position is None))

    def _loader_position(self, state: Any) -> tuple[int, int] | None:
        saved = (self._next, self._loaded, self._started)
        try:
            self.load_state_dict(state)  # every check a subclass adds, in this process
            return self._next
        finally:
            self._next, self._loaded, self._started = saved

    def _grouped(self, start: tuple[int, int], group: int) -> StreamDataset:
        """A copy that starts at ``start`` and, in DataLoader workers, yields ``group``
        consecutive batches per item (``0``: as many as :func:`auto_group_size` allows
        for the batch at ``start``): the dataset a :class:`StreamLoader` iterates."""
        view = copy.copy(self)
        view._origin, view._group = start, group
        view._next, view._loaded, view._started = None, False, False
        view._cursor = Cursor(self._kind, extra=("done",))
        return view

    def _groups(self, worker: int, workers: int) -> Iterator[PackedBatch | SlotGroup]:
        """A worker's items in a grouped view: group ``g`` holds batches ``[g k, g k + k)``
        from the origin, worker ``w`` of ``n`` makes the groups ``g ≡ w (mod n)``, so the
        DataLoader's in-order round robin puts them back in sequence.

        Over a stream that reads runs of batches into buffers (:class:`ReadsRunsInto`)
        each group is read straight into a shared slot (:mod:`mixle.data._slot_group`);
        otherwise, and for a group it cannot read so, batch by batch and copied."""
        first = self._advance(self._origin, 0)
        if first is None or self._exhausted(first):
            return
        sample = self._batch(first).as_tuple()
        reader = self._direct_reader(first)
        size = self._group or auto_group_size(
            (None if reader is None else direct_group_bytes(sample, 1)) or group_bytes(sample)
        )
        full = None if reader is None else direct_group_bytes(sample, size)
        direct_groups = 0
        position = self._advance(first, worker * size) if worker else first
        while position is not None and not self._exhausted(position):
            positions: list[tuple[int, int] | None] = [position]
            at: tuple[int, int] | None = position
            while at is not None and not self._exhausted(at) and len(positions) <= size:
                at = self._advance(at, 1)
                positions.append(at)
            if at is None or self._exhausted(at):
                position = None  # this group ends the stream: no later group has batches
            else:
                position = self._advance(at, (workers - 1) * size) if workers > 1 else at
            self._next = position
            item = None
            if reader is not None and full is not None:
                runs = self._runs(positions)
                item = read_direct_group(
                    reader, runs, sample, tuple(positions), full, self.shared_memory
                )
                if item is None and not direct_groups:
                    full = None  # the stream's layout does not read into buffers
                direct_groups += item is not None
            if item is None:
                batches = [self._batch(p).as_tuple() for p in positions[:-1] if p is not None]
                parts, group = stacked(batches, tuple(positions))
                yield PackedBatch(parts, shared=self.shared_memory, group=group)
            else:
                yield item

    def _direct_reader(self, first: tuple[int, int]) -> ReadsRunsInto | None:
        """The stream, if it reads runs of batches into buffers from ``first`` on (asked
        with buffers it declines: nothing is read), else ``None``."""
        stream = self.stream
        if not self._direct_groups or not isinstance(stream, ReadsRunsInto):
            return None
        cursor = self._to_cursor(first)
        asked: list[int] = []

        def decline(counts: Sequence[int], block: int) -> None:
            asked.append(block)

        # Two batches where the epoch has them: a layout whose batches are not
        # consecutive rows (the global layout on several ranks) reads one only.
        stream.read_run_into(*cursor, min(2, stream.steps_left(*cursor)), decline)
        return stream if asked else None

    def _runs(self, positions: list[tuple[int, int] | None]) -> list[tuple[int, int, int]]:
        """``(epoch, cursor index, count)`` of the runs of batches ``positions[:-1]``,
        one per epoch (consecutive batches of one epoch are consecutive cursors)."""
        runs: list[tuple[int, int, int]] = []
        for position in positions[:-1]:
            assert position is not None  # only the last position may be the end
            if runs and runs[-1][0] == position[0]:
                epoch, index, count = runs[-1]
                runs[-1] = (epoch, index, count + 1)
            else:
                runs.append((*self._to_cursor(position), 1))
        return runs

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...] | PackedBatch | SlotGroup]:
        worker, workers = _worker()
        packed = get_worker_info() is not None  # a worker process: one payload per batch
        if packed and self._group is not None:
            self._started = True
            yield from self._groups(worker, workers)
            return
        position = self._first(worker)
        self._loaded = False
        self._started = True
        while position is not None:
            if self._exhausted(position):
                self._next = position
                return
            batch = self._batch(position)
            position = self._advance(position, workers)
            self._next = position
            if packed:
                yield PackedBatch(batch.as_tuple(), shared=self.shared_memory)
            else:
                yield batch.to_torch().as_tuple()

    def _identity(self, worker: int, workers: int) -> dict[str, Any]:
        return {
            **self.stream_identity(),
            "origin": list(self._origin),
            "worker": worker,
            "num_workers": workers,
        }

    def state_dict(self) -> dict[str, Any]:
        """The next batch this process (main or worker) will produce, JSON-serialisable.

        ``{"version", "epoch", "batch", "done", "stream"}``; ``done`` is 1 once the
        process has no batch left.
        """
        worker, workers = _worker()
        position = self._next if self._started else self._first(worker)
        self._cursor.move(*((0, 0) if position is None else position))
        return self._cursor.state_dict(self._identity(worker, workers), done=int(position is None))

    def load_state_dict(self, state: Any) -> None:
        """Resume this process at a saved next batch (call before iterating).

        Raises
        ------
        StateMismatchError
            The state is malformed or from another stream, worker or worker count.
        """
        worker, workers = _worker()
        epoch, index = self._cursor.check(state, self._identity(worker, workers))
        position: tuple[int, int] | None = None
        if not state["done"]:
            total = self._epoch_size(epoch)
            if index > total:
                raise self._cursor.past_end(epoch, index, total, "batches")
            position = (epoch, index)
        self._next = position
        self._loaded = True
        self._started = False

    def restart_at(self, cursor: tuple[int, int]) -> None:
        """Begin every later iteration at stream cursor ``cursor``, as if built there.

        For a consumer that counts the batches it trained on itself (a framework's data
        module): DataLoader workers started after this call split the batches from
        ``cursor`` on exactly as from the construction-time cursor. A loaded state is
        dropped; an iteration already running is not affected. ``cursor`` is not
        checked: pass one the stream computed (``next_cursor``) or validated.
        """
        self._origin = self._from_cursor(cursor)
        self._loaded = False
        self._started = False

    def loader_state_for(self, state: Any, num_workers: int) -> dict[str, Any]:
        """A ``StatefulDataLoader`` state for ``num_workers`` workers from one saved with any.

        In-order round robin hands batches out in sequence, so the loader's next batch
        is the earliest next position over the saved workers; worker ``w`` of the new
        loader starts ``w`` batches after it. Every saved worker state is validated
        against this dataset first (nothing is changed when one fails).

        Raises
        ------
        StateMismatchError
            ``state`` is not a ``StatefulDataLoader`` state of this dataset: a field
            missing or malformed (named, with its value), or the worker snapshots are not
            exactly workers ``0 .. n-1`` once each (the missing or repeated worker named).
        """
        workers = nonnegative_int("num_workers", num_workers)
        main, saved = saved_workers(self._kind, state, _MAIN_KEYS)
        positions: list[tuple[int, int]] = []
        for worker, count, item in saved:
            position = self._cursor.check(item, self._identity(worker, count))
            if item["done"] not in (0, 1) or max(position) > MAX_POSITION:
                raise StateMismatchError(
                    f"{self._kind} loader state of worker {worker}: `epoch` and `batch` must "
                    f"be at most {MAX_POSITION} and `done` 0 or 1. Got epoch {position[0]}, "
                    f"batch {position[1]}, done {item['done']!r}."
                )
            if not item["done"]:
                positions.append(position)
        following = min(positions) if positions else None
        yielded = int(main["_sampler_iter_yielded"])

        def worker_state(worker: int, count: int) -> dict[str, Any]:
            start = None if following is None else self._advance(following, worker)
            self._cursor.move(*((0, 0) if start is None else start))
            return self._cursor.state_dict(self._identity(worker, count), done=int(start is None))

        if workers == 0:
            return {
                **{key: main[key] for key in _MAIN_KEYS},
                "_num_yielded": yielded,
                "fetcher_state": {"dataset_iter_state": None, "fetcher_ended": False},
                "dataset_state": worker_state(0, 1),
                "_iterator_finished": False,
            }
        return {
            "_snapshot": {
                "_snapshot_step": yielded,
                "_last_yielded_worker_id": workers - 1,
                "_main_snapshot": {
                    **{key: main[key] for key in _MAIN_KEYS},
                    "_num_workers": workers,
                    "_base_seed": main.get("_base_seed", 0),
                },
                "_worker_snapshots": {
                    f"worker_{w}": {
                        "worker_id": w,
                        "dataset_state": worker_state(w, workers),
                        "fetcher_state": {"fetcher_ended": False, "dataset_iter_state": None},
                    }
                    for w in range(workers)
                },
            },
            "_steps_since_snapshot": 0,
            "_iterator_finished": False,
        }


class StreamingDataset(StreamDataset):
    """:class:`StreamDataset` over a :class:`StreamingCorpus` (the name docs use).

    Parameters
    ----------
    corpus
        The rank's corpus view. Iteration starts at its cursor at construction time
        (``corpus.cursor``, e.g. after ``corpus.load_state_dict``); the corpus itself is
        not advanced.
    num_epochs
        Stop before epoch ``num_epochs`` (an absolute epoch number); ``None`` runs until
        an epoch without batches.
    mesh, dp_dims
        As for :class:`StreamDataset`: checked against the corpus's place.
    shared_memory
        As for :class:`StreamDataset`: the worker-to-main transport.

    Each item is the corpus's batch tuple as tensors: ``(context, targets, loss_mask)``
    (int64, int64, bool, ``(b, block)``), plus ``(document_ids, position_ids)`` when the
    corpus was built with ``document_ids=True``. Use ``batch_size=None`` in the
    ``DataLoader``: batching already happened.
    """

    _kind = "StreamingDataset"

    def __init__(
        self,
        corpus: StreamingCorpus,
        *,
        num_epochs: int | None = None,
        mesh: DeviceMesh | None = None,
        dp_dims: DpDims = ("dp",),
        shared_memory: bool = True,
    ) -> None:
        if not isinstance(corpus, StreamingCorpus):
            raise ArgumentTypeError(
                f"`corpus` must be a StreamingCorpus. Got {type(corpus).__name__} instead."
            )
        self.corpus = corpus
        super().__init__(
            corpus, num_epochs=num_epochs, mesh=mesh, dp_dims=dp_dims, shared_memory=shared_memory
        )


class TokenStreamDataset(StreamDataset):
    """:class:`StreamDataset` over a :class:`TokenStream` (the name docs use).

    Parameters
    ----------
    stream
        The stream; its cursor (``stream.state_dict()``) when the dataset is built is
        where the batches begin, and iteration ends after its ``epochs``. The stream
        itself is not advanced: resume a DataLoader through this dataset's
        ``state_dict`` (``StatefulDataLoader``), or call ``stream.advance(m)`` after
        consuming ``m`` batches.
    mesh, dp_dims, shared_memory
        As for :class:`StreamDataset`.

    Each item is ``(context (b, block), next_tokens (b,))`` as int64 tensors. Every
    worker seeks straight to its own batches (random access by epoch and batch index);
    no worker reads a batch that another one yields. Without ``world_size`` the saved
    positions count batches (the stream's cursor counts windows).
    """

    _kind = "TokenStreamDataset"

    def __init__(
        self,
        stream: TokenStream,
        *,
        mesh: DeviceMesh | None = None,
        dp_dims: DpDims = ("dp",),
        shared_memory: bool = True,
    ) -> None:
        if not isinstance(stream, TokenStream):
            raise ArgumentTypeError(
                f"`stream` must be a TokenStream. Got {type(stream).__name__} instead."
            )
        # A global stream's positions are (epoch, first global window) as in its cursor.
        self._global = stream.world_size is not None
        super().__init__(stream, mesh=mesh, dp_dims=dp_dims, shared_memory=shared_memory)
        self.stream: TokenStream = stream

    def _from_cursor(self, cursor: tuple[int, int]) -> tuple[int, int]:
        epoch, index = cursor
        return cursor if self._global else (epoch, index // self.stream.batch_size)

    def _to_cursor(self, position: tuple[int, int]) -> tuple[int, int]:
        epoch, index = position
        return position if self._global else (epoch, index * self.stream.batch_size)

    def load_state_dict(self, state: Any) -> None:
        """Resume at a saved next batch; refuses every cursor ``TokenStream`` refuses.

        Raises
        ------
        StateMismatchError
            As for the base class, and when the cursor lies past the stream's
            ``epochs`` or at a batch the epoch does not have (nothing is changed).
        """
        previous = (self._next, self._loaded, self._started)
        super().load_state_dict(state)
        if self._next is None:
            return
        epoch, index = self._next
        per_epoch = self.stream.num_batches()
        if epoch >= self.stream.epochs or index >= per_epoch:
            self._next, self._loaded, self._started = previous
            raise StateMismatchError(
                f"{self._kind} state is at epoch {epoch}, batch {index}; this stream has "
                f"{self.stream.epochs} epoch(s) of {per_epoch} batches (a finished cursor "
                "has done=1)."
            )

    def _epoch_size(self, epoch: int) -> int:
        return self.stream.num_windows if self._global else self.stream.num_batches()

    def stream_identity(self) -> dict[str, Any]:
        return {**self.stream.stream_identity(), "epochs": self.stream.epochs}
