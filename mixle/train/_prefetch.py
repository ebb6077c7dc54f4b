"""Overlapped input: a bounded background thread produces batches ahead of the step.

:class:`PrefetchedBatches` wraps a :class:`~mixle.train._sources.BatchSource`. One
daemon thread iterates the source and puts each batch into a queue of at most
``depth`` batches, together with the source's ``cursor`` and ``state_dict()`` taken
right after that batch was produced. The wrapper reports the cursor and state of the
last batch the *trainer* took, never of the batches waiting in the queue, so a
checkpoint taken after step ``k`` resumes at batch ``k + 1`` exactly as without
prefetching; the batches themselves are the source's, unchanged and in order.

With a ``prepare`` function the thread also applies it to every batch (the trainer
passes :func:`~mixle.train._staging.stage_batch`: parsing, and pinning on CUDA), and
:attr:`PrefetchedBatches.prepared` is its result for the last batch taken; an error
it raises is that batch's error.

The thread stops when the source is exhausted, when :meth:`close` is called (the
trainer calls it in a ``finally``) and when producing a batch raises; that exception is
re-raised in the trainer's thread at the position of the failed batch.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from mixle._checks import positive_int
from mixle.data._batch import Batch
from mixle.train._sources import BatchId, BatchSource

__all__ = ["PrefetchedBatches"]

# How long the producer waits on a full queue before checking whether it was closed.
_POLL_SECONDS = 0.05


class _End:
    """Queue item: the source is exhausted (``error is None``) or raised ``error``."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


class PrefetchedBatches:
    """A :class:`BatchSource` whose batches are read ``depth`` steps ahead in a thread.

    Parameters
    ----------
    source
        The wrapped source. Position it (``load_state_dict``) before the first
        ``iter``; from then on only the producer thread touches it.
    depth
        Positive number of batches produced ahead of the one being trained on.
    prepare
        Optional function applied to each batch in the producer thread; its result
        for the last batch taken is :attr:`prepared`.
    """

    def __init__(
        self, source: BatchSource, depth: int, prepare: Callable[[Batch], Any] | None = None
    ) -> None:
        self.source = source
        self.depth = positive_int("prefetch", depth)
        self._prepare = prepare
        self._prepared: Any = None
        self._cursor = source.cursor
        self._state = source.state_dict()
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=self.depth)
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def cursor(self) -> BatchId:
        """``(epoch, index)`` of the next batch the trainer will take."""
        return self._cursor

    @property
    def prepared(self) -> Any:
        """``prepare(batch)`` of the last batch taken (``None`` without ``prepare``)."""
        return self._prepared

    def steps_in_epoch(self, epoch: int) -> int:
        return self.source.steps_in_epoch(epoch)

    def steps_left(self, epoch: int, index: int) -> int:
        return self.source.steps_left(epoch, index)

    def state_dict(self) -> dict[str, Any]:
        """The source's state as it was right after the last batch the trainer took."""
        return self._state

    def load_state_dict(self, state: Any) -> None:
        """Position the source; only before iteration has started."""
        if self._thread is not None:
            raise RuntimeError("PrefetchedBatches: load_state_dict after iteration started.")
        self.source.load_state_dict(state)
        self._cursor = self.source.cursor
        self._state = self.source.state_dict()

    def _produce(self) -> None:
        source, prepare = self.source, self._prepare
        try:
            for item in source:
                prepared = None if prepare is None else prepare(item[0])
                if not self._put((item, prepared, source.cursor, source.state_dict())):
                    return
        except BaseException as error:  # re-raised in the trainer's thread
            self._put(_End(error))
            return
        self._put(_End(None))

    def _put(self, item: Any) -> bool:
        """Queue ``item``; False when the wrapper was closed while waiting for room."""
        while not self._closed.is_set():
            try:
                self._queue.put(item, timeout=_POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Iterator[tuple[Batch, BatchId]]:
        """Yield the source's batches in order; one iteration per wrapper."""
        if self._thread is not None:
            raise RuntimeError("PrefetchedBatches can be iterated once.")
        self._thread = threading.Thread(target=self._produce, name="mixle-prefetch", daemon=True)
        self._thread.start()
        return self._consume()

    def _consume(self) -> Iterator[tuple[Batch, BatchId]]:
        while True:
            item = self._queue.get()
            if isinstance(item, _End):
                self.close()
                if item.error is not None:
                    raise item.error
                return
            batch_and_id, self._prepared, self._cursor, self._state = item
            yield batch_and_id

    def close(self) -> None:
        """Stop the producer thread and wait for it; idempotent."""
        self._closed.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
