"""``torch.utils.data.IterableDataset`` adapters: :class:`StreamingDataset` over a
:class:`StreamingCorpus` and :class:`TokenStreamDataset` over a ``TokenStream``.

The batch sequence a ``DataLoader(dataset, batch_size=None, num_workers=n)`` yields is
identical for every ``n``: worker ``w`` of ``n`` produces the batches whose position
``k`` in the across-epochs sequence (counted from the corpus cursor) satisfies
``k ≡ w (mod n)``, and the DataLoader's in-order round robin over workers puts them back
in order. Each worker seeks straight to its batches (a binary search), so no batch is
computed twice and none is skipped.

Resuming
--------
The dataset is *stateful* in the sense of ``torchdata.stateful_dataloader``: it has
``state_dict()`` / ``load_state_dict()`` that save and restore the next batch of the
process they run in (each worker saves its own). With ``StatefulDataLoader`` the
supported order is::

    loader = StatefulDataLoader(dataset, batch_size=None, num_workers=n)
    loader.load_state_dict(saved)      # FIRST load ...
    for batch in loader: ...           # ... THEN create the iterator

Calling ``iter(loader)`` before ``load_state_dict`` creates an iterator that has already
read its (empty) state: that iterator starts from the beginning, silently. The state
also pins the worker count: restore with the same ``num_workers``.

Worker processes may be forked or spawned; the corpus (and its ``documents``) must be
picklable for spawn.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from mixle._checks import positive_int
from mixle.data._state import check_state
from mixle.data._streaming import StreamingCorpus
from mixle.data.stream_token_source import TokenStream
from mixle.errors import ArgumentTypeError, StateMismatchError

__all__ = ["StreamingDataset", "TokenStreamDataset"]

_STATE_VERSION = 1


def _worker() -> tuple[int, int]:
    info = get_worker_info()
    return (0, 1) if info is None else (int(info.id), int(info.num_workers))


class StreamingDataset(IterableDataset[tuple[torch.Tensor, ...]]):
    """Yield a :class:`StreamingCorpus`'s batches as tensors, worker- and resume-aware.

    Parameters
    ----------
    corpus
        The rank's corpus view. Iteration starts at its cursor at construction time
        (``corpus.cursor``, e.g. after ``corpus.load_state_dict``); the corpus itself is
        not advanced.
    num_epochs
        Stop before epoch ``num_epochs`` (an absolute epoch number); ``None`` runs until
        an epoch without batches.

    Each item is the corpus's batch tuple as tensors: ``(context, targets, loss_mask)``
    (int64, int64, bool, ``(b, block)``), plus ``(document_ids, position_ids)`` when the
    corpus was built with ``document_ids=True``. Use ``batch_size=None`` in the
    ``DataLoader``: batching already happened.
    """

    def __init__(self, corpus: StreamingCorpus, *, num_epochs: int | None = None) -> None:
        if not isinstance(corpus, StreamingCorpus):
            raise ArgumentTypeError(
                f"`corpus` must be a StreamingCorpus. Got {type(corpus).__name__} instead."
            )
        self.corpus = corpus
        self.num_epochs = None if num_epochs is None else positive_int("num_epochs", num_epochs)
        self._origin = corpus.cursor
        self._started = False
        self._next: tuple[int, int] | None = None
        self._loaded = False

    def _first(self, worker: int) -> tuple[int, int] | None:
        if self._loaded:
            return self._next
        return self.corpus.advance(*self._origin, worker)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        worker, workers = _worker()
        position = self._first(worker)
        self._loaded = False
        self._started = True
        while position is not None:
            epoch, index = position
            if self.num_epochs is not None and epoch >= self.num_epochs:
                self._next = position
                return
            batch = self.corpus.batch_at(epoch, index)
            position = self.corpus.advance(epoch, index, workers)
            self._next = position
            yield tuple(torch.from_numpy(np.ascontiguousarray(part)) for part in batch)

    def _identity(self, worker: int, workers: int) -> dict[str, Any]:
        return {
            **self.corpus.stream_identity(),
            "origin": list(self._origin),
            "num_epochs": self.num_epochs,
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
        done = position is None
        epoch, index = (0, 0) if position is None else position
        return {
            "version": _STATE_VERSION,
            "epoch": epoch,
            "batch": index,
            "done": int(done),
            "stream": self._identity(worker, workers),
        }

    def load_state_dict(self, state: Any) -> None:
        """Resume this process at a saved next batch (call before iterating).

        Raises
        ------
        StateMismatchError
            The state is malformed or from another stream, worker or worker count.
        """
        worker, workers = _worker()
        check_state(
            state,
            kind="StreamingDataset",
            version=_STATE_VERSION,
            stream=self._identity(worker, workers),
            cursor_fields=("epoch", "batch", "done"),
        )
        position: tuple[int, int] | None = None
        if not state["done"]:
            epoch, index = int(state["epoch"]), int(state["batch"])
            total = self.corpus.num_batches(epoch)
            if index > total:
                raise StateMismatchError(
                    f"StreamingDataset state points at batch {index} of epoch {epoch}, which "
                    f"has only {total} batches."
                )
            position = (epoch, index)
        self._next = position
        self._loaded = True
        self._started = False


class TokenStreamDataset(IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    """Yield a :class:`TokenStream`'s batches as int64 tensors, worker-count invariant.

    Parameters
    ----------
    stream
        The stream; its cursor (``stream.state_dict()``) when iteration starts is where
        the batches begin. Each worker process gets a copy, so the cursor of ``stream``
        in the main process does not advance: after consuming ``m`` batches from a
        DataLoader, resume with ``stream.advance(m)`` on a stream restored to the
        starting state (or count batches and build the state yourself).

    Notes
    -----
    Every worker seeks straight to its own batches (random access by epoch and batch
    index); no worker reads a batch that another one yields.
    """

    def __init__(self, stream: TokenStream) -> None:
        super().__init__()
        self.stream = stream

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        info = get_worker_info()
        workers, worker = (1, 0) if info is None else (info.num_workers, info.id)
        stream = self.stream
        per_epoch = stream.num_batches()
        state = stream.state_dict()
        epoch, first = state["epoch"], state["position"] // stream.batch_size
        # Global batch g (0 = the cursor's batch) belongs to this worker iff g % workers
        # == worker; within an epoch that is every workers-th batch from some start.
        done = 0  # global index of the first batch of `epoch` from the cursor
        while epoch < stream.epochs and per_epoch:
            offset = (worker - done) % workers
            for context, target in stream.epoch_batches(
                epoch, start_batch=first + offset, step=workers
            ):
                yield torch.from_numpy(context), torch.from_numpy(target)
            done += per_epoch - first
            epoch, first = epoch + 1, 0
