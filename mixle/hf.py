"""Hugging Face ``datasets`` / ``accelerate`` adapter: the *global* row stream, safely.

Hand accelerate the **global** row stream, never a per-rank one. When
``num_processes > 1``, ``accelerate.data_loader.prepare_data_loader`` slices whatever
dataset it gets: it wraps a torch ``IterableDataset`` in ``IterableDatasetShard``
(``dispatch_batches=False``), which groups ``batch_size * num_processes`` items
(``batch_size`` with ``split_batches=True``) and keeps process ``p``'s contiguous
``p``-th share, or it iterates the dataset on process 0 only and sends process ``p`` the
``p``-th share of each step (``dispatch_batches=True``, its default for iterable
datasets). Either way accelerate does the sharding. A dataset that is already sharded
per rank (``StreamingCorpus(layout="per-rank")``, ``StreamingDataset``, or a
``split_dataset_by_node`` result) is sharded a second time: process ``p`` keeps only
the ``p``-th share of *its own* shard and the rest of the data is never trained on
(accelerate issue #3547).

:class:`GlobalRowDataset` yields every row of every global batch of a
``StreamingCorpus(layout="global")``, in order, one row per item, from a state that
does not depend on the rank. Global batch ``k`` is ``G = world_size * batch_size``
consecutive items, and the last global batch of an epoch is completed with fully
masked rows, so accelerate's slicing never has to wrap around (wrapping would repeat
rows). With a per-process DataLoader ``batch_size = b`` (``G`` with
``split_batches=True``) process ``p`` receives rows ``[k*G + p*b, k*G + (p+1)*b)``:
exactly the batch rank ``p`` reads from ``StreamingCorpus(layout="global", rank=p,
world_size=W, batch_size=b)``. Its state is the corpus's version-2 row cursor, so a
state loads into either object, with any ``(world_size, batch_size)``, in O(1) seeks.

:func:`to_iterable_dataset` gives the same row stream as a ``datasets.IterableDataset``
(one shard, so accelerate slices it by rows too, never by shards).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from mixle._checks import nonnegative_int, positive_int
from mixle._optional import import_optional
from mixle.data._attention_torch import flex_document_mask, padding_free_collate
from mixle.data._cursor import Cursor
from mixle.data._options import ShardOptions
from mixle.data._streaming import StreamingCorpus
from mixle.errors import ArgumentError, ArgumentTypeError, MissingBackendError

__all__ = [
    "ROW_FIELDS",
    "GlobalRowDataset",
    "flex_document_mask",
    "padding_free_collate",
    "to_iterable_dataset",
]

#: The keys of one row item, in order; the last two only with ``document_ids=True``.
ROW_FIELDS = ("context", "targets", "loss_mask", "document_ids", "position_ids")

Row = dict[str, torch.Tensor]


class GlobalRowDataset(IterableDataset[Row]):
    """The global row stream of a global-layout corpus, one row per item, for accelerate.

    Parameters
    ----------
    corpus
        A ``StreamingCorpus(layout="global")``. Only its stream (documents, seed, block,
        ids, selector) and ``global_batch_size`` are used, never its rank: every process
        builds the same dataset. Iteration starts at its cursor (``corpus.cursor``, e.g.
        after ``corpus.load_state_dict``); the corpus itself is not advanced.
    num_epochs
        Stop before epoch ``num_epochs`` (an absolute epoch number); ``None`` runs until
        an epoch without rows.

    Each item is a dict of ``(block,)`` tensors: ``context`` and ``targets`` (int64),
    ``loss_mask`` (bool), plus ``document_ids`` and ``position_ids`` (int64) when the
    corpus has ``document_ids=True``. Items come in global batches of
    ``global_batch_size`` rows, the last one of each epoch completed with fully masked
    rows; the DataLoader's default collation stacks them into ``(b, block)`` batches.
    Apply ``loss_mask`` to the loss.

    DataLoader workers: worker ``w`` of ``n`` produces global batches ``w, w + n, ...``
    counted from the start, so with accelerate's ``IterableDatasetShard``
    (``dispatch_batches=False``) or ``split_batches=True`` the stream is the same for
    every ``num_workers``. With ``dispatch_batches=True`` and ``split_batches=False``
    the base loader's batch is one process's share, not a global batch: keep
    ``num_workers=0`` there.

    Resuming: ``state_dict()`` is the row cursor of the next row this process's latest
    iteration would yield (the start when it has not iterated); a DataLoader that reads
    ahead (accelerate does) or runs workers makes it run ahead of training, so in a
    training loop save ``state_after(steps)`` instead. ``load_state_dict`` sets the
    start of the next iteration. Both are the ``StreamingCorpus`` version-2 state.
    """

    def __init__(self, corpus: StreamingCorpus, *, num_epochs: int | None = None) -> None:
        super().__init__()
        if not isinstance(corpus, StreamingCorpus):
            raise ArgumentTypeError(
                f"`corpus` must be a StreamingCorpus. Got {type(corpus).__name__} instead."
            )
        if corpus.layout != "global":
            raise ArgumentError(
                "`corpus` must use layout='global': accelerate shards the stream it is given, "
                "so a per-rank stream would be sharded twice and lose data. Got "
                f"layout={corpus.layout!r} instead."
            )
        self.num_epochs = None if num_epochs is None else positive_int("num_epochs", num_epochs)
        self.global_batch_size = corpus.global_batch_size
        # Rank 0 of 1 with one global batch per batch: batch_at_row(e, r) is global batch
        # [r, r + G) whole, padded past the epoch's end exactly as every rank pads it.
        self._rows = corpus.reshaped(ShardOptions(0, 1, self.global_batch_size, "global"))
        self._fields = ROW_FIELDS if corpus.document_ids else ROW_FIELDS[:3]
        self._start = Cursor("GlobalRowDataset", index_key="row", version=2)
        self._start.move(*corpus.cursor)
        self._next = Cursor("GlobalRowDataset", index_key="row", version=2)
        self._next.move(*corpus.cursor)

    def _advance(self, position: tuple[int, int], steps: int) -> tuple[int, int] | None:
        """``steps`` global batches after ``position``; ``None`` past the last epoch."""
        following = self._rows.next_cursor(*position, steps)
        if following is None or (self.num_epochs is not None and following[0] >= self.num_epochs):
            return None
        return following

    def _after_rows(self, epoch: int, row: int, consumed: int) -> tuple[int, int]:
        """The cursor after ``consumed`` rows of the global batch at ``(epoch, row)``."""
        following = row + consumed
        return (epoch, following) if following < self._rows.num_rows(epoch) else (epoch + 1, 0)

    def __iter__(self) -> Iterator[Row]:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (int(info.id), int(info.num_workers))
        position = self._advance(self._start.position, worker)
        self._next.move(*self._start.position)
        while position is not None:
            epoch, row = position
            parts = self._rows.read(epoch, row).to_torch().to_dict()
            for index in range(self.global_batch_size):
                self._next.move(*self._after_rows(epoch, row, index + 1))
                yield {name: part[index] for name, part in parts.items()}
            position = self._advance(position, workers)

    def stream_identity(self) -> dict[str, Any]:
        """The identity saved in states: the global corpus's (no rank, world or batch size)."""
        return self._rows.stream_identity()

    def state_dict(self) -> dict[str, Any]:
        """``{"version": 2, "epoch", "row", "stream"}``: the next row of the latest iteration
        in this process (the start before any), loadable into any global ``StreamingCorpus``."""
        return self._next.state_dict(self.stream_identity())

    def state_after(self, steps: int) -> dict[str, Any]:
        """The row cursor after ``steps`` global batches from the start; O(epochs crossed).

        Every process of an accelerate run computes the same value from its step count,
        so rank 0 alone may save it. ``num_epochs`` does not bound it; past the end of
        the stream it is row 0 of the first epoch without rows.
        """
        steps = nonnegative_int("steps", steps)
        cursor = Cursor("GlobalRowDataset", index_key="row", version=2)
        following = self._rows.next_cursor(*self._start.position, steps)
        if following is None:  # an empty epoch ends the stream: stay at its start
            epoch = self._start.epoch
            while self._rows.num_rows(epoch):
                epoch += 1
            following = (epoch, 0)
        cursor.move(*following)
        return cursor.state_dict(self.stream_identity())

    def load_state_dict(self, state: Any) -> None:
        """Start the next iteration at a saved row cursor (this dataset's or a global
        ``StreamingCorpus``'s, saved with any ``world_size``/``batch_size``).

        A seek, not a replay: O(documents) to plan the epoch once, O(log documents) per
        global batch. Nothing moves when the state is refused.

        Raises
        ------
        StateMismatchError
            The state is malformed, not a version-2 (global layout) state, from another
            stream (each differing field named with both values) or past the epoch's end.
        """
        cursor = Cursor("GlobalRowDataset", index_key="row", version=2)
        cursor.load(state, self.stream_identity(), epoch_size=self._rows.num_rows, unit="rows")
        self._start.move(*cursor.position)
        self._next.move(*cursor.position)


def _hf_rows(rows: GlobalRowDataset) -> Iterator[dict[str, np.ndarray]]:
    for item in rows:
        yield {name: value.numpy() for name, value in item.items()}


def to_iterable_dataset(rows: GlobalRowDataset) -> Any:
    """The same global row stream as a one-shard ``datasets.IterableDataset``.

    One shard on purpose: accelerate shards a ``datasets.IterableDataset`` with
    ``n_shards >= num_processes`` by whole shards (``.shard``), which would not give the
    global batches; with one shard it slices the rows like any torch dataset. Do not call
    ``split_dataset_by_node`` on it before handing it to accelerate (that shards twice).
    Items are dicts of numpy arrays; the dataset is formatted ``"torch"``. To resume in
    O(1), ``rows.load_state_dict(state)`` first and build the dataset after: the
    ``datasets`` object's own ``state_dict`` resumes by skipping rows one by one.

    Raises
    ------
    MissingBackendError
        ``datasets`` is not installed (the message says ``pip install 'mixle[hf]'``).
    """
    if not isinstance(rows, GlobalRowDataset):
        raise ArgumentTypeError(
            f"`rows` must be a GlobalRowDataset. Got {type(rows).__name__} instead."
        )
    datasets = import_optional("datasets", "datasets", error=MissingBackendError)
    int64, boolean = datasets.Value("int64"), datasets.Value("bool")
    kinds = {"loss_mask": boolean}
    features = datasets.Features(
        {name: datasets.Sequence(kinds.get(name, int64)) for name in rows._fields}
    )
    dataset = datasets.IterableDataset.from_generator(
        _hf_rows, gen_kwargs={"rows": rows}, features=features
    )
    return dataset.with_format("torch")
