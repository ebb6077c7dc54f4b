"""Exact resume of a :class:`~mixle.hf.GlobalRowDataset` inside ``transformers.Trainer``.

``Trainer`` saves no data-loader state. On ``resume_from_checkpoint`` it fast-forwards
an ``IterableDataset`` by drawing and discarding ``global_step × gradient_accumulation``
batches (``skip_first_batches``: a replay, O(steps) reads), and its
``accelerator_config`` has no stateful-dataloader option that would change that
(transformers 5.24 passes only ``split_batches``, ``dispatch_batches``, ``even_batches``
and ``use_seedable_sampler`` to accelerate; accelerate's ``use_stateful_dataloader``
is saved only by ``Accelerator.save_state``, which ``Trainer`` does not call).

:class:`LoaderStateCallback` puts the loader's row cursor into the checkpoint
instead, as an ``ExportableState`` callback: ``trainer_state.json`` holds it under
``stateful_callbacks["LoaderStateCallback"]["attributes"]`` (``loader_state``, the
``GlobalRowDataset`` version-2 state, and ``global_step``, the step it belongs to),
written with the rest of the trainer state. On resume ``Trainer`` restores the callback
and the callback seeks the dataset before the first batch is drawn. The
:data:`TRAINER_SETTINGS` make ``Trainer`` cooperate::

    from mixle.hf import GlobalRowDataset
    from mixle.hf.trainer import TRAINER_SETTINGS, LoaderStateCallback, causal_lm_collate

    rows = GlobalRowDataset(StreamingCorpus(..., layout="global",
                                            world_size=W, batch_size=per_device))
    args = TrainingArguments(output_dir, per_device_train_batch_size=per_device,
                             max_steps=..., save_steps=..., **TRAINER_SETTINGS)
    trainer = Trainer(model, args, train_dataset=rows, data_collator=causal_lm_collate,
                      callbacks=[LoaderStateCallback()])
    trainer.train(resume_from_checkpoint=checkpoint_or_None)

The state counts global rows, so a checkpoint resumes with another world size or
per-device batch size too: the next row after the checkpoint is the first row of the
resumed run's first global batch (build the dataset for the new ``W × batch_size``).
"""

from __future__ import annotations

from typing import Any

import torch

from mixle._optional import install_hint
from mixle.errors import ArgumentError, ArgumentTypeError, MissingBackendError, StateMismatchError
from mixle.hf._global_rows import GlobalRowDataset, Row

try:
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
    from transformers.trainer_callback import ExportableState
    from transformers.trainer_pt_utils import AcceleratorConfig
except ImportError as missing:  # an optional extra: say how to install it
    raise MissingBackendError(
        "mixle.hf.trainer needs the optional package `transformers`; install it with: "
        f"{install_hint('transformers')}"
    ) from missing

__all__ = ["IGNORE_INDEX", "TRAINER_SETTINGS", "LoaderStateCallback", "causal_lm_collate"]

#: The ``TrainingArguments`` exact resume needs: no replay on resume (the callback
#: seeks instead), the callback's state restored from the checkpoint, and the rows'
#: fields kept for :func:`causal_lm_collate` (``Trainer`` would drop every field the
#: model's ``forward`` does not name, before collation).
TRAINER_SETTINGS: dict[str, bool] = {
    "ignore_data_skip": True,
    "restore_callback_states_from_checkpoint": True,
    "remove_unused_columns": False,
}

#: The label of a position without a target (``loss_mask`` false): HF losses skip it.
IGNORE_INDEX = -100


def causal_lm_collate(rows: list[Row]) -> dict[str, torch.Tensor]:
    """Stack rows into a causal-LM batch for a ``transformers`` model.

    ``input_ids`` is ``context``; ``shift_labels`` is ``targets`` with
    :data:`IGNORE_INDEX` where ``loss_mask`` is false. The targets are already shifted
    (position ``t`` predicts ``targets[t]``), so they go in as ``shift_labels``, which
    ``transformers``' causal-LM loss takes unshifted: every target of the row counts,
    the last one included. ``labels`` carries the same tensor because models compute a
    loss only when ``labels`` is given (its values are not read when ``shift_labels``
    is there). ``position_ids`` are passed when the rows have them (``document_ids=True``).
    """
    if not rows:
        raise ArgumentError("`rows` must hold at least one row. Got an empty list.")
    stacked = {name: torch.stack([row[name] for row in rows]) for name in rows[0]}
    labels = stacked["targets"].masked_fill(~stacked["loss_mask"], IGNORE_INDEX)
    batch = {"input_ids": stacked["context"], "labels": labels, "shift_labels": labels}
    if "position_ids" in stacked:
        batch["position_ids"] = stacked["position_ids"]
    return batch


def _rows_of(loader: object) -> GlobalRowDataset:
    """The :class:`GlobalRowDataset` behind a ``Trainer``'s (accelerate-wrapped) loader."""
    dataset = getattr(loader, "dataset", None)
    while dataset is not None and not isinstance(dataset, GlobalRowDataset):
        dataset = getattr(dataset, "dataset", None)  # accelerate's IterableDatasetShard
    if dataset is None:
        raise ArgumentTypeError(
            "LoaderStateCallback needs `train_dataset` to be a mixle.hf.GlobalRowDataset. "
            f"Got a loader over {type(getattr(loader, 'dataset', None)).__name__} instead."
        )
    return dataset


def _check_arguments(args: TrainingArguments, rows: GlobalRowDataset) -> None:
    """Refuse settings under which ``Trainer`` would replay or drop data (named)."""
    for name, wanted in TRAINER_SETTINGS.items():
        if getattr(args, name) != wanted:
            raise ArgumentError(
                f"LoaderStateCallback needs TrainingArguments({name}={wanted}) "
                f"(pass **mixle.hf.trainer.TRAINER_SETTINGS). Got {name}={getattr(args, name)}."
            )
    per_device, world = int(args.per_device_train_batch_size), int(args.world_size)
    config = args.accelerator_config  # an AcceleratorConfig once TrainingArguments is built
    split = isinstance(config, AcceleratorConfig) and bool(config.split_batches)
    expected = per_device if split else per_device * world
    if rows.global_batch_size != expected:
        how = (
            f"per_device_train_batch_size {per_device} (split_batches=True)"
            if split
            else f"per_device_train_batch_size {per_device} × world_size {world}"
        )
        raise ArgumentError(
            f"the GlobalRowDataset's global batch ({rows.global_batch_size} rows) must equal "
            f"{how} = {expected}: build its corpus with batch_size={per_device} and "
            f"world_size={world}."
        )


class LoaderStateCallback(TrainerCallback, ExportableState):
    """Saves the row cursor of the ``Trainer``'s :class:`GlobalRowDataset` in each
    checkpoint and seeks the dataset to it on ``resume_from_checkpoint``.

    Takes no arguments: it finds the dataset behind the train loader when training
    begins (``Trainer`` restores the callback from the checkpoint by re-creating it, so
    it holds only JSON). Every process computes the same state from its step count
    (``GlobalRowDataset.state_after``), so the one ``trainer_state.json`` process 0
    writes serves every rank.

    Attributes
    ----------
    loader_state
        The dataset's state after ``global_step`` (``None`` before the first step of a
        fresh run); what a checkpoint holds.
    global_step
        The ``Trainer`` step ``loader_state`` belongs to.

    Raises (when training begins)
    ------
    ArgumentError
        A :data:`TRAINER_SETTINGS` value is not set, or the dataset's global batch is
        not ``per_device_train_batch_size × world_size`` (both named).
    ArgumentTypeError
        ``train_dataset`` is not a ``GlobalRowDataset``.
    StateMismatchError
        Resuming from a checkpoint without a loader state (or one of another step),
        or with a loader state of another stream (the differing field named, both values).
    """

    def __init__(self) -> None:
        self.loader_state: dict[str, Any] | None = None
        self.global_step = 0
        self._rows: GlobalRowDataset | None = None
        self._origin = 0
        self._batches_per_step = 1

    def state(self) -> dict[str, Any]:
        """``{"args": {}, "attributes": {"loader_state", "global_step"}}`` (``ExportableState``)."""
        if self._rows is not None:
            steps = self.global_step - self._origin
            self.loader_state = self._rows.state_after(steps * self._batches_per_step)
        return {
            "args": {},
            "attributes": {"loader_state": self.loader_state, "global_step": self.global_step},
        }

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Check the settings, find the dataset and, when resuming, seek it."""
        rows = _rows_of(kwargs.get("train_dataloader"))
        _check_arguments(args, rows)
        if state.global_step:
            if self.loader_state is None:
                raise StateMismatchError(
                    f"resuming at step {state.global_step} from a checkpoint without a mixle "
                    "loader state (trainer_state.json has no stateful_callbacks"
                    "['LoaderStateCallback']): it was saved without LoaderStateCallback, or "
                    "restore_callback_states_from_checkpoint is off. Refusing to restart the "
                    "data from the beginning."
                )
            if self.global_step != state.global_step:
                raise StateMismatchError(
                    f"LoaderStateCallback global_step in checkpoint: {self.global_step} / "
                    f"trainer step: {state.global_step}."
                )
            rows.load_state_dict(self.loader_state)
        self._rows = rows
        self._origin = self.global_step = int(state.global_step)
        self._batches_per_step = int(args.gradient_accumulation_steps)

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Follow the step count (the state is computed from it when a checkpoint is saved)."""
        self.global_step = int(state.global_step)
