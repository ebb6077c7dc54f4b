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
Both datasets are *stateful* in the sense of ``torchdata.stateful_dataloader``: they have
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


class _WorkerSplitDataset(IterableDataset[tuple[torch.Tensor, ...]]):
    """Worker-count-invariant, resumable iteration over batches addressed by position.

    A position is ``(epoch, batch index)``. Subclasses say how to step a position, how
    to produce the batch at one, and what identifies their stream; this base splits
    the positions over DataLoader workers (worker ``w`` of ``n`` takes every ``n``-th
    from the origin, starting ``w`` after it) and saves/restores each process's next
    position.
    """

    _kind = "dataset"

    def __init__(self, origin: tuple[int, int]) -> None:
        super().__init__()
        self._origin = origin
        self._started = False
        self._next: tuple[int, int] | None = None
        self._loaded = False

    # -- what subclasses define ------------------------------------------------------
    def _advance(self, position: tuple[int, int], steps: int) -> tuple[int, int] | None:
        """The position ``steps`` batches after ``position``; ``None`` past the end."""
        raise NotImplementedError

    def _batch(self, position: tuple[int, int]) -> tuple[np.ndarray, ...]:
        """The batch at ``position``."""
        raise NotImplementedError

    def _epoch_size(self, epoch: int) -> int:
        """The number of batches in ``epoch``."""
        raise NotImplementedError

    def _stream_identity(self) -> dict[str, Any]:
        """The fields that define the underlying stream (see ``check_state``)."""
        raise NotImplementedError

    def _exhausted(self, position: tuple[int, int]) -> bool:
        """Whether iteration stops before ``position`` (an epoch bound)."""
        return False

    # -- iteration and state -----------------------------------------------------------
    def _first(self, worker: int) -> tuple[int, int] | None:
        if self._loaded:
            return self._next
        return self._advance(self._origin, worker)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        worker, workers = _worker()
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
            yield tuple(torch.from_numpy(np.ascontiguousarray(part)) for part in batch)

    def _identity(self, worker: int, workers: int) -> dict[str, Any]:
        return {
            **self._stream_identity(),
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
        epoch, index = (0, 0) if position is None else position
        return {
            "version": _STATE_VERSION,
            "epoch": epoch,
            "batch": index,
            "done": int(position is None),
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
            kind=self._kind,
            version=_STATE_VERSION,
            stream=self._identity(worker, workers),
            cursor_fields=("epoch", "batch", "done"),
        )
        position: tuple[int, int] | None = None
        if not state["done"]:
            epoch, index = int(state["epoch"]), int(state["batch"])
            total = self._epoch_size(epoch)
            if index > total:
                raise StateMismatchError(
                    f"{self._kind} state points at batch {index} of epoch {epoch}, which "
                    f"has only {total} batches."
                )
            position = (epoch, index)
        self._next = position
        self._loaded = True
        self._started = False


class StreamingDataset(_WorkerSplitDataset):
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

    _kind = "StreamingDataset"

    def __init__(self, corpus: StreamingCorpus, *, num_epochs: int | None = None) -> None:
        if not isinstance(corpus, StreamingCorpus):
            raise ArgumentTypeError(
                f"`corpus` must be a StreamingCorpus. Got {type(corpus).__name__} instead."
            )
        self.corpus = corpus
        self.num_epochs = None if num_epochs is None else positive_int("num_epochs", num_epochs)
        super().__init__(corpus.cursor)

    def _advance(self, position: tuple[int, int], steps: int) -> tuple[int, int] | None:
        return self.corpus.advance(*position, steps)

    def _batch(self, position: tuple[int, int]) -> tuple[np.ndarray, ...]:
        return self.corpus.batch_at(*position)

    def _epoch_size(self, epoch: int) -> int:
        return self.corpus.num_batches(epoch)

    def _exhausted(self, position: tuple[int, int]) -> bool:
        return self.num_epochs is not None and position[0] >= self.num_epochs

    def _stream_identity(self) -> dict[str, Any]:
        return {**self.corpus.stream_identity(), "num_epochs": self.num_epochs}


class TokenStreamDataset(_WorkerSplitDataset):
    """Yield a :class:`TokenStream`'s batches as int64 tensors, worker- and resume-aware.

    Parameters
    ----------
    stream
        The stream; its cursor (``stream.state_dict()``) when the dataset is built is
        where the batches begin, and iteration ends after its ``epochs``. The stream
        itself is not advanced: resume a DataLoader through this dataset's
        ``state_dict`` (``StatefulDataLoader``), or call ``stream.advance(m)`` after
        consuming ``m`` batches.

    Each item is ``(context (b, block), next_tokens (b,))`` as int64 tensors. Every
    worker seeks straight to its own batches (random access by epoch and batch index);
    no worker reads a batch that another one yields.
    """

    _kind = "TokenStreamDataset"

    def __init__(self, stream: TokenStream) -> None:
        if not isinstance(stream, TokenStream):
            raise ArgumentTypeError(
                f"`stream` must be a TokenStream. Got {type(stream).__name__} instead."
            )
        self.stream = stream
        state = stream.state_dict()
        super().__init__((int(state["epoch"]), int(state["position"]) // stream.batch_size))

    def _advance(self, position: tuple[int, int], steps: int) -> tuple[int, int] | None:
        per_epoch = self.stream.num_batches()
        if per_epoch == 0:
            return None
        epoch, index = divmod(position[0] * per_epoch + position[1] + steps, per_epoch)
        return None if epoch >= self.stream.epochs else (epoch, index)

    def _batch(self, position: tuple[int, int]) -> tuple[np.ndarray, ...]:
        return self.stream.batch(*position)

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
        return self.stream.num_batches()

    def _stream_identity(self) -> dict[str, Any]:
        return {**self.stream.state_dict()["stream"], "epochs": self.stream.epochs}
