""":class:`StreamLoader`: a DataLoader over a :class:`StreamDataset` whose workers hand
over several batches per item, yielding one batch per step, resumable at any batch.

torch's DataLoader costs its main process a fixed 60-160 µs per item (index queue,
result pipe, in-order bookkeeping), as much as making a batch 8 x 2048 costs a worker:
with one batch per item a second worker cannot double the rate. The loader's workers
yield groups of ``batches_per_item`` consecutive batches in one shared-memory slot
(:mod:`mixle.data._batch_group`); the main process splits them, the batches' tensors
being views of the slot (freed when the last of them is gone), so the per-item cost is
paid once per group.

Positions: each group carries the position of every batch in it and of the batch after
it, so the loader always knows the next batch it will yield; :meth:`state_dict` is that
position in the format of the dataset's own (in-process) state, and a checkpoint taken
after any batch, mid-group included, resumes at the next batch with any worker count.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from mixle._checks import nonnegative_int, positive_int
from mixle.data._batch_group import BatchGroup, Position
from mixle.errors import ArgumentTypeError

__all__ = ["GroupedSource", "StreamLoader"]


class GroupedSource(ABC):
    """What :class:`StreamLoader` needs of a dataset (``StreamDataset`` implements it):
    positions, a grouped copy to iterate, and the position <-> state mapping."""

    @abstractmethod
    def _loader_start(self) -> Position | None:
        """Where an iteration from the dataset's start begins (``None``: nothing left)."""

    @abstractmethod
    def _loader_view(self, start: Position, batches_per_item: int) -> IterableDataset[Any]:
        """A copy that starts at ``start`` and, in DataLoader workers, yields groups of
        ``batches_per_item`` batches (``0``: sized automatically) as :class:`BatchGroup`
        items; in process, one batch per item (read :meth:`_loader_next` after each)."""

    @abstractmethod
    def _loader_next(self) -> Position | None:
        """In process: the position after the batch this (view) yielded last."""

    @abstractmethod
    def _loader_state(self, position: Position | None) -> dict[str, Any]:
        """The state naming ``position`` as the next batch (the in-process format)."""

    @abstractmethod
    def _loader_position(self, state: Any) -> Position | None:
        """The next batch a state names, checked as ``load_state_dict`` checks it (raises
        ``StateMismatchError``); nothing is changed."""


class StreamLoader:
    """Batches of a :class:`StreamDataset` from ``num_workers`` DataLoader workers, several
    batches per worker item, one batch per step; resumable at any batch.

    Iterating yields exactly what ``DataLoader(dataset, batch_size=None,
    num_workers=n)`` yields (each batch a ``list`` of tensors, bitwise equal, in the same
    order for every ``n``), from the dataset's start (its construction-time cursor, or a
    state loaded with :meth:`load_state_dict`). With workers, each DataLoader item is a
    group of ``batches_per_item`` consecutive batches; worker ``w`` of ``n`` makes the
    groups ``g ≡ w (mod n)``.

    Parameters
    ----------
    dataset
        The dataset (``StreamDataset``, ``StreamingDataset``, ``TokenStreamDataset``);
        it is not advanced (each iteration works on a copy).
    num_workers
        DataLoader worker processes; ``0`` iterates in this process.
    batches_per_item
        Batches per worker item. ``None`` (default): as many as fit in 16 MiB, at most 128,
        decided by each worker from the batch at the start and how it is handed over
        (a ``StreamingCorpus``'s concatenated rows, read straight into the slot: 113 at
        batch 8 x 2048, 28 at 32 x 2048; batch by batch and copied, e.g. best-fit rows,
        a ``TokenStream``, a mixture: 60 at 8 x 2048; 1 above 8 MiB per batch). ``1``:
        one batch per item, as a plain DataLoader
        transport. Larger groups cost the main process less per batch, and cost each
        worker ``6 x batches_per_item`` batches of shared memory and a first batch
        ``batches_per_item`` batches later.
    pin_memory, prefetch_factor, multiprocessing_context, worker_init_fn, timeout
        As for ``torch.utils.data.DataLoader`` (``prefetch_factor`` counts items).

    Notes
    -----
    Worker batches are views of a worker's shared-memory slot, writable and private to
    this process, each tensor's storage only its own array (as ``torch.from_numpy`` of
    it); the slot is reused once every tensor of its group is gone, so a kept batch is
    never overwritten, and keeping many old batches alive makes the workers send the
    later ones through the pipe (correct, slower). Over a ``StreamingCorpus`` with
    concatenated rows, a batch's ``context`` and ``targets`` are views of one token
    buffer, as in the in-process batch (:mod:`mixle.data._slot_group`). ``state_dict()`` between steps is the next batch's position: the
    batches yielded so far are exactly the ones before it.
    """

    def __init__(
        self,
        dataset: GroupedSource,
        *,
        num_workers: int = 0,
        batches_per_item: int | None = None,
        pin_memory: bool = False,
        prefetch_factor: int | None = None,
        multiprocessing_context: Any = None,
        worker_init_fn: Callable[[int], None] | None = None,
        timeout: float = 0,
    ) -> None:
        if not isinstance(dataset, GroupedSource):
            raise ArgumentTypeError(
                f"`dataset` must be a StreamDataset (StreamingDataset, TokenStreamDataset). "
                f"Got {type(dataset).__name__} instead."
            )
        self.dataset = dataset
        self.num_workers = nonnegative_int("num_workers", num_workers)
        self.batches_per_item = (
            None if batches_per_item is None else positive_int("batches_per_item", batches_per_item)
        )
        self._options: dict[str, Any] = {
            "pin_memory": pin_memory,
            "multiprocessing_context": multiprocessing_context,
            "worker_init_fn": worker_init_fn,
            "timeout": timeout,
        }
        if num_workers and prefetch_factor is not None:
            self._options["prefetch_factor"] = prefetch_factor
        # The start of the next iteration, once loaded (None: the dataset's start).
        self._start: tuple[Position | None] | None = None
        # The next batch of the current (or last) iteration (None: not started).
        self._next: tuple[Position | None] | None = None

    def _dataset_start(self) -> Position | None:
        return self.dataset._loader_start()

    def __iter__(self) -> Iterator[list[torch.Tensor]]:
        start = self._start[0] if self._start is not None else self._dataset_start()
        self._start = None
        self._next = (start,)
        if start is None:
            return
        group = 0 if self.batches_per_item is None else self.batches_per_item
        view = self.dataset._loader_view(start, group)
        loader = DataLoader(view, batch_size=None, num_workers=self.num_workers, **self._options)
        if not self.num_workers:
            assert isinstance(view, GroupedSource)
            for batch in loader:
                self._next = (view._loader_next(),)
                yield batch
            return
        for item in loader:
            if not isinstance(item, BatchGroup):
                raise RuntimeError(  # never expected: a grouped view yields groups only
                    f"StreamLoader: a worker sent a {type(item).__name__}, not a BatchGroup."
                )
            batches, positions = item.batches, item.positions
            del item
            for index in range(len(batches)):
                batch, batches[index] = batches[index], []  # the slot goes with the batches
                self._next = (positions[index + 1],)
                yield batch
                del batch

    def state_dict(self) -> dict[str, Any]:
        """The next batch this loader will yield, as the dataset's in-process state.

        ``{"version", "epoch", "batch", "done", "stream"}`` with the identity of worker 0
        of 1: the same state the dataset itself saves when iterated without workers (either
        loads into the other), whatever ``num_workers`` this loader has.
        """
        if self._next is None:
            position = self._start[0] if self._start is not None else self._dataset_start()
        else:
            position = self._next[0]
        return self.dataset._loader_state(position)

    def load_state_dict(self, state: Any) -> None:
        """Make the next iteration start at a saved next batch (any worker count).

        Accepts a :meth:`state_dict` of a loader over the same dataset, or the state
        of the dataset iterated in-process. An iterator created before this call but
        not yet advanced starts here too.

        Raises
        ------
        StateMismatchError
            As ``dataset.load_state_dict`` (malformed, another stream, past the end);
            nothing is changed.
        """
        self._start = (self.dataset._loader_position(state),)
        self._next = None
