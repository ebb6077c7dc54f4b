"""Long-running language-model training over a sharded corpus, crash-safe and resumable.

``mixle train CORPUS`` is a thin wrapper over :func:`train`: it streams
:class:`~mixle.data.StreamingCorpus` rows (or ``TokenStream`` windows) into the
streaming transformer leaf of :mod:`mixle.models`, single-process or under ``torchrun``,
writes atomic checkpoints (:mod:`mixle.train.checkpoint`) and a JSONL metrics log
(:mod:`mixle.train.metrics`), and resumes bitwise-exactly on CPU. See
``docs/training.md``.

Importing this package does not import torch: :func:`train` (the only name that needs
it) is loaded from :mod:`mixle.train._trainer` on first access, so torch-free readers
of runs (``mixle show``: configs, checkpoint metadata, batch sources) start fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mixle.train._config import (
    OBJECTIVES,
    CheckpointConfig,
    DataConfig,
    ModelConfig,
    OptimizerConfig,
    RuntimeConfig,
    TrainConfig,
)
from mixle.train._mixture import MixtureBatches, budget_table, open_mixture
from mixle.train._sources import PackedBatches, WindowBatches, batch_digest, split_holdout
from mixle.train._summary import TrainSummary
from mixle.train.checkpoint import (
    Checkpoint,
    latest_checkpoint,
    list_checkpoints,
    read_checkpoint,
    write_checkpoint,
)
from mixle.train.metrics import MetricsLog, plot_losses, read_metrics

if TYPE_CHECKING:
    from mixle.train._trainer import train

__all__ = [
    "OBJECTIVES",
    "Checkpoint",
    "CheckpointConfig",
    "DataConfig",
    "MetricsLog",
    "MixtureBatches",
    "ModelConfig",
    "OptimizerConfig",
    "PackedBatches",
    "RuntimeConfig",
    "TrainConfig",
    "TrainSummary",
    "WindowBatches",
    "batch_digest",
    "budget_table",
    "latest_checkpoint",
    "list_checkpoints",
    "open_mixture",
    "plot_losses",
    "read_checkpoint",
    "read_metrics",
    "split_holdout",
    "train",
    "write_checkpoint",
]


def __getattr__(name: str) -> Any:
    """Load :func:`train` (and torch with it) on first access."""
    if name == "train":
        value = importlib.import_module("mixle.train._trainer").train
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
