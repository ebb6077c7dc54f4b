"""OLMo-core adapter: :class:`OlmoDataLoader`, a ``StreamingCorpus`` as OLMo-core's data loader.

OLMo-core's ``Trainer`` drives any ``olmo_core.data.TextDataLoaderBase``: before each
epoch (1-based) it calls ``reshuffle(epoch)``, iterates the loader (the base class
counts ``batches_processed`` as batches reach the train module), calls ``reset()``
after the epoch, and saves ``data_loader.state_dict()`` in each rank's trainer state
(``<checkpoint>/train/rank<r>.pt``; a rank with no file of its own, after a world-size
change, loads ``rank0.pt``). It restores with ``load_state_dict`` before the first
``reshuffle``. A batch is a dict with ``input_ids`` of ``rank_batch_size`` tokens in
all (``global_batch_size`` is in tokens) and, here, ``labels`` aligned with
``input_ids`` (OLMo-core's convention: ``labels[t]`` is the target of position ``t``),
``-100`` where the loss mask is off.

The saved state is the corpus cursor after the batches trained on, in the corpus's own
units: ``{"version": 1, "epoch", "batch" | "row", "stream"}`` (the mixle epoch, 0-based;
``row`` counts global rows in the global layout). A global-layout state is the same on
every rank and resumes on any data-parallel size whose global batch divides the rows
consumed; a per-rank one only on the rank and size that saved it (the identity check
names ``rank``/``world_size``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from mixle._checks import nonnegative_int, positive_int
from mixle._optional import import_optional
from mixle.data._cursor import Cursor
from mixle.data._streaming import StreamingCorpus
from mixle.data.torch import StreamingDataset, StreamLoader
from mixle.errors import ArgumentTypeError, MissingBackendError, StateMismatchError

__all__ = ["LABEL_IGNORE_INDEX", "OlmoDataLoader"]

if TYPE_CHECKING:
    from olmo_core.data import DataCollator, TextDataLoaderBase
else:
    _olmo_data = import_optional("olmo_core.data", "olmo", error=MissingBackendError)
    DataCollator, TextDataLoaderBase = _olmo_data.DataCollator, _olmo_data.TextDataLoaderBase

#: The label OLMo-core's losses ignore (its ``label_ignore_index`` default).
LABEL_IGNORE_INDEX = -100


def _olmo_batch(
    context: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor | None
) -> dict[str, torch.Tensor]:
    """OLMo-core's batch: ``labels`` are the targets, ignored where the mask is off."""
    labels = targets if mask is None else targets.masked_fill(~mask, LABEL_IGNORE_INDEX)
    return {"input_ids": context, "labels": labels}


class OlmoDataLoader(TextDataLoaderBase):
    """A ``StreamingCorpus`` as an OLMo-core ``TextDataLoaderBase``, resumable exactly.

    Parameters
    ----------
    corpus
        This rank's view (its ``rank``/``world_size`` are the data-parallel place; any
        layout). Epoch ``e`` of OLMo-core (1-based) is the corpus's epoch ``e - 1``;
        the corpus itself is not advanced.
    work_dir
        A local directory (OLMo-core's loaders keep files there; this one writes none).
    num_workers
        ``0`` (default): batches are read in the training process. ``n > 0``: read by
        ``n`` DataLoader worker processes through a
        :class:`~mixle.data.torch.StreamLoader` (groups of consecutive batches per worker
        item, in shared memory), the same batches in the same order; the position saved
        is still the one OLMo-core counts (batches processed), so a state resumes with any
        worker count.
    batches_per_item
        Batches per worker item of that ``StreamLoader`` (``None``: sized from the batch).

    ``global_batch_size`` is ``corpus.global_batch_size * corpus.block`` tokens. Each
    batch: ``input_ids`` (the context, int64 ``(batch_size, block)``) and ``labels``
    (the targets, :data:`LABEL_IGNORE_INDEX` where ``loss_mask`` is off).
    """

    def __init__(
        self,
        corpus: StreamingCorpus,
        *,
        work_dir: str | Path,
        num_workers: int = 0,
        batches_per_item: int | None = None,
    ) -> None:
        if not isinstance(corpus, StreamingCorpus):
            raise ArgumentTypeError(
                f"`corpus` must be a StreamingCorpus. Got {type(corpus).__name__} instead."
            )
        super().__init__(
            collator=DataCollator(pad_token_id=corpus.pad_id),
            work_dir=work_dir,
            global_batch_size=corpus.global_batch_size * corpus.block,
            dp_world_size=corpus.world_size,
            dp_rank=corpus.rank,
        )
        self.corpus = corpus
        self.num_workers = nonnegative_int("num_workers", num_workers)
        self.batches_per_item = (
            None if batches_per_item is None else positive_int("batches_per_item", batches_per_item)
        )
        self._cursor = Cursor("OlmoDataLoader", index_key=corpus.cursor_key)

    @property
    def _current_epoch(self) -> int:
        """The OLMo-core epoch (1-based): the first before any ``reshuffle``."""
        return self._epoch or 1

    @property
    def total_batches(self) -> int:
        """Batches in the current epoch."""
        return self.batches_in_epoch(self._current_epoch)

    def batches_in_epoch(self, epoch: int) -> int:
        """Batches in OLMo-core epoch ``epoch`` (1-based)."""
        return self.corpus.steps_left(positive_int("epoch", epoch) - 1, 0)

    def reshuffle(self, epoch: int | None = None, **kwargs: Any) -> None:
        """Start OLMo-core epoch ``epoch`` (default: the next). The corpus's order is a
        pure function of its seed and epoch: nothing is computed or written here."""
        del kwargs
        following = 1 if self._epoch is None else self._epoch + 1
        self._epoch = positive_int("epoch", following if epoch is None else epoch)

    def _index_after(self, batches: int) -> int:
        """The cursor index after ``batches`` batches of the current epoch."""
        epoch = self._current_epoch - 1
        return min(batches * self.corpus.cursor_step, self.corpus.epoch_size(epoch))

    def _iter_batches(self) -> Iterator[dict[str, torch.Tensor]]:
        epoch = self.epoch - 1
        if self.num_workers:
            yield from self._worker_batches(epoch)
            return
        for step in range(self.batches_processed, self.batches_in_epoch(self.epoch)):
            batch = self.corpus.read(epoch, self._index_after(step)).to_torch()
            yield _olmo_batch(batch.context, batch.targets, batch.loss_mask)

    def _worker_batches(self, epoch: int) -> Iterator[dict[str, torch.Tensor]]:
        """The rest of ``epoch`` from worker processes: a ``StreamLoader`` over the corpus
        from the first batch not processed, stopped before the next epoch."""
        dataset = StreamingDataset(self.corpus, num_epochs=epoch + 1)
        dataset.restart_at((epoch, self._index_after(self.batches_processed)))
        loader = StreamLoader(
            dataset, num_workers=self.num_workers, batches_per_item=self.batches_per_item
        )
        for parts in loader:
            yield _olmo_batch(parts[0], parts[1], parts[2])

    def get_mock_batch(self) -> dict[str, torch.Tensor]:
        """A batch of the real shape (the corpus's first), for OLMo-core's dry run."""
        batch = self.corpus.read(0, 0).to_torch()
        return {"input_ids": batch.context, "labels": batch.targets}

    def state_dict(self) -> dict[str, Any]:
        """``{"version": 1, "epoch", "batch" | "row", "stream"}``: the corpus cursor after
        the batches processed in the current epoch (the corpus's 0-based epoch)."""
        self._cursor.move(self._current_epoch - 1, self._index_after(self.batches_processed))
        return self._cursor.state_dict(self.corpus.stream_identity())

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume after the batches a saved state counts (call before ``reshuffle``).

        Raises
        ------
        StateMismatchError
            The state is malformed, of another version, from another stream (each
            differing field named with both values, e.g. ``rank`` after a world-size
            change in the per-rank layout), past its epoch's end, or between two of this
            loader's global batches. Nothing changes then.
        """
        epoch, index = self._cursor.check(state_dict, self.corpus.stream_identity())
        total, step = self.corpus.epoch_size(epoch), self.corpus.cursor_step
        if index > total:
            raise self._cursor.past_end(epoch, index, total, self.corpus.cursor_key + "s")
        if index % step and index != total:
            raise StateMismatchError(
                f"OlmoDataLoader state `{self.corpus.cursor_key}` {index} is not a multiple of "
                f"this loader's {step} per batch: resume with a global batch that divides it."
            )
        self._epoch = epoch + 1
        self.batches_processed = -(-index // step)
        self.tokens_processed = self.batches_processed * self.global_batch_size
