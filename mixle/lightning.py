"""Lightning adapter: :class:`StreamDataModule`, whose loader state rides in Lightning's checkpoint.

Lightning saves a data module's ``state_dict()`` in every checkpoint, under the key of
the module's class name (``checkpoint["StreamDataModule"]``), and hands it back to
``load_state_dict`` when ``trainer.fit(..., ckpt_path=...)`` resumes, before it asks
for ``train_dataloader()``. That is the hook used here.

Why the module counts batches itself rather than asking the DataLoader: Lightning's
fit loop fetches one batch ahead of the step it runs (its ``_PrefetchDataFetcher``
keeps one batch in hand to know when an epoch ends), and DataLoader workers read
further ahead. A loader state taken when a checkpoint is written (Lightning's
"stateful DataLoader" path saves ``train_dataloader.state_dict()`` then) names a batch
that was fetched but never trained on, and a resumed run skips it. The training loop
calls ``on_before_batch_transfer`` on exactly the batch it is about to train on, so
counting there makes the saved position "after the batches trained on", for any
``num_workers``.

The loader is a :class:`~mixle.data.torch.StreamLoader` (its workers hand over groups
of consecutive batches through shared memory, the main process paying torch's per-item
cost once per group), so a second worker adds throughput instead of main-process work.
Lightning sees that it is stateful and saves its ``state_dict()`` too (under the fit
loop's ``combined_loader``), then loads it into the new loader when it resumes; that
state *is* the module's (the position after the batches trained on, gathered as below),
never the loader's read-ahead position, so either entry resumes at the same batch.

The saved state has the shape of :class:`~mixle.data.DcpLoaderState`::

    {"version": 1, "layout": "global" | "per-rank", "dp_world_size": W,
     "global": "<json>"                      # global layout: one state for every rank
     "dp_rank_<r>": "<json>", ...}           # per-rank layout: every rank's state

where each JSON string is ``{"version": 1, "epoch", "index", "stream"}``: the stream
cursor after the batches trained on and the stream's identity. Lightning writes the
checkpoint on rank 0 only, so in the per-rank layout every rank's state is gathered to
rank 0 first (``all_gather_object``); the global-layout state is the same on every rank
and resumes on any data-parallel size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch.distributed as dist

from mixle._checks import nonnegative_int, positive_int
from mixle._optional import import_optional
from mixle.data import DcpLoaderState, ResumableStream
from mixle.data._cursor import Cursor
from mixle.data.torch import StreamDataset, StreamLoader
from mixle.errors import ArgumentTypeError, MissingBackendError, StateMismatchError

__all__ = ["StreamDataModule"]

if TYPE_CHECKING:
    from lightning.pytorch import LightningDataModule
else:
    LightningDataModule = import_optional(
        "lightning.pytorch", "lightning", error=MissingBackendError
    ).LightningDataModule

#: The version of :meth:`StreamDataModule.state_dict`.
STATE_VERSION = 1


class _TrainedPosition:
    """The stream cursor after the batches training has consumed, as a loader state.

    ``state_dict()`` is ``{"version": 1, "epoch", "index", "stream"}``; the identity is
    the stream's, so :class:`DcpLoaderState` sees the stream's layout.
    """

    def __init__(self, stream: ResumableStream) -> None:
        self.stream = stream
        self.cursor = Cursor("StreamDataModule", index_key="index")
        self.cursor.move(*stream.cursor)

    def stream_identity(self) -> dict[str, Any]:
        return self.stream.stream_identity()

    def consumed_one(self) -> None:
        """Step past one trained-on batch (past the end: the empty epoch that ends it)."""
        epoch, index = self.cursor.position
        self.cursor.move(*(self.stream.next_cursor(epoch, index, 1) or (epoch + 1, 0)))

    def state_dict(self) -> dict[str, Any]:
        return self.cursor.state_dict(self.stream_identity())

    def load_state_dict(self, state: Any) -> None:
        self.cursor.load(state, self.stream_identity(), epoch_size=self.stream.epoch_size)


class _TrainingLoader(StreamLoader):
    """The :class:`StreamLoader` of a :class:`StreamDataModule`: each iteration starts at
    the first batch not yet trained on, and its state is the module's.

    Lightning fetches batches ahead of the step it runs, so the base class's state (the
    next batch this loader yields) would name a batch never trained on; Lightning
    writes a checkpoint on rank 0 only, so a per-rank state of its own would be rank 0's
    on every rank. The module's state has neither problem: the loader saves and loads
    that one.
    """

    def __init__(self, module: StreamDataModule) -> None:
        super().__init__(
            module._dataset,
            num_workers=module.num_workers,
            batches_per_item=module.batches_per_item,
        )
        self._module = module

    def _dataset_start(self) -> tuple[int, int] | None:
        self._module._dataset.restart_at(self._module._position.cursor.position)
        return super()._dataset_start()

    def state_dict(self) -> dict[str, Any]:
        """:meth:`StreamDataModule.state_dict` (the position after the batches trained on)."""
        return self._module.state_dict()

    def load_state_dict(self, state: Any) -> None:
        """:meth:`StreamDataModule.load_state_dict`; the next iteration starts there."""
        self._module.load_state_dict(state)
        self._start = self._next = None


class StreamDataModule(LightningDataModule):
    """A resumable stream as Lightning's training data; its position rides in the checkpoint.

    Parameters
    ----------
    stream
        This rank's stream (``StreamingCorpus``, ``TokenStream``, ``Mixture``), built
        for the data-parallel place the trainer runs it at (e.g.
        ``StreamingCorpus.for_current_rank`` under ``torchrun``). Training starts at its
        cursor; the stream itself is not advanced.
    num_workers
        DataLoader worker processes; the batch sequence is the same for every value.
    batches_per_item
        Batches per worker item of the :class:`~mixle.data.torch.StreamLoader`
        (``None``: sized from the batch, 113 at 8 x 2048; see there).

    ``train_dataloader()`` is a :class:`~mixle.data.torch.StreamLoader` that yields the stream's batch tuples as tensors
    (``batch_size=None``: batching already happened), from the first batch not yet
    trained on, so a new Lightning epoch continues the stream instead of repeating it.
    Bound the run with ``max_steps`` (the stream runs across its own epochs until an
    empty one).

    Resuming: ``trainer.fit(model, datamodule=StreamDataModule(same stream),
    ckpt_path=...)`` continues at the batch after the last one the checkpoint's run
    trained on. A checkpoint without this module's state, or with the state of another
    stream or another data-parallel size (per-rank layout), is refused when it loads
    (:class:`~mixle.errors.StateMismatchError` naming the field), never restarted
    from the beginning.
    """

    def __init__(
        self,
        stream: ResumableStream,
        *,
        num_workers: int = 0,
        batches_per_item: int | None = None,
    ) -> None:
        if not isinstance(stream, ResumableStream):
            raise ArgumentTypeError(
                "`stream` must be a resumable stream (StreamingCorpus, TokenStream, Mixture). "
                f"Got {type(stream).__name__} instead."
            )
        super().__init__()
        self.stream = stream
        self.num_workers = nonnegative_int("num_workers", num_workers)
        self.batches_per_item = (
            None if batches_per_item is None else positive_int("batches_per_item", batches_per_item)
        )
        self._position = _TrainedPosition(stream)
        self._dataset = StreamDataset(stream)
        self._restored = False

    def _checkpoint_state(self) -> DcpLoaderState:
        """The position as this rank's entry of the checkpoint state (trainer's place)."""
        if self.trainer is None:
            return DcpLoaderState(self._position)
        return DcpLoaderState(
            self._position, dp_rank=self.trainer.global_rank, dp_world_size=self.trainer.world_size
        )

    def train_dataloader(self) -> StreamLoader:
        """A :class:`~mixle.data.torch.StreamLoader` over the stream; each iteration starts
        at the first batch not yet trained on. Its ``state_dict`` is this module's.

        Raises
        ------
        StateMismatchError
            The trainer resumes from a checkpoint that holds no state of this module.
        """
        trainer = self.trainer
        if trainer is not None and trainer.ckpt_path is not None and not self._restored:
            name = type(self).__qualname__
            raise StateMismatchError(
                f"checkpoint {trainer.ckpt_path} holds no `{name}` entry (the loader state "
                f"{name}.state_dict() saves): refusing to restart the stream from the beginning."
            )
        return _TrainingLoader(self)

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Count a batch the training loop is about to train on (not validation's)."""
        if self.trainer is not None and self.trainer.training:
            self._position.consumed_one()
        return batch

    def state_dict(self) -> dict[str, Any]:
        """``{"version": 1, "layout", "dp_world_size", "global" | "dp_rank_<r>"...}``.

        Called on every rank when Lightning writes a checkpoint; in the per-rank layout
        with more than one process it gathers every rank's entry (a collective).
        """
        local = self._checkpoint_state().state_dict()
        if local["layout"] == "per-rank" and dist.is_initialized() and dist.get_world_size() > 1:
            gathered: list[dict[str, Any] | None] = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, local)
            for entry in gathered:
                local.update(entry or {})
        return {"version": STATE_VERSION, **local}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume at the saved position (Lightning calls it before ``train_dataloader``).

        Raises
        ------
        StateMismatchError
            The entry has another version, lacks a field, was saved with another layout
            or (per-rank layout) data-parallel size, or belongs to another stream (each
            differing field named with both values). Nothing moves then.
        """
        if not isinstance(state_dict, dict) or state_dict.get("version") != STATE_VERSION:
            found = state_dict.get("version") if isinstance(state_dict, dict) else state_dict
            raise StateMismatchError(
                f"StreamDataModule state field `version` must be {STATE_VERSION}. "
                f"Got {found!r} instead."
            )
        self._checkpoint_state().load_state_dict(state_dict)
        self._restored = True
