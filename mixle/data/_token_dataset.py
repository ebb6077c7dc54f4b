"""A torch ``IterableDataset`` over a :class:`~mixle.data.stream_token_source.TokenStream`.

With ``DataLoader(dataset, batch_size=None, num_workers=n)``, worker ``w`` produces the
batches ``k`` with ``k % n == w`` (``k`` counted from the stream's cursor across epochs)
and the DataLoader takes one batch from each worker in turn, so the sequence it yields
is the same for every ``n`` — and equal to iterating the ``TokenStream`` itself.

Kept apart from ``mixle.data.torch`` (the ``StreamingCorpus`` adapter) so that the two
can later be unified behind one module; torch is imported only here.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import IterableDataset, get_worker_info

from mixle.data.stream_token_source import TokenStream

__all__ = ["TokenStreamDataset"]


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
