"""Long-running language-model training over a sharded corpus, crash-safe and resumable.

``mixle train CORPUS`` is a thin wrapper over :func:`train`: it streams
:class:`~mixle.data.StreamingCorpus` rows (or ``TokenStream`` windows) into the
streaming transformer leaf of :mod:`mixle.models`, single-process or under ``torchrun``,
writes atomic checkpoints (:mod:`mixle.train.checkpoint`) and a JSONL metrics log
(:mod:`mixle.train.metrics`), and resumes bitwise-exactly on CPU. See
``docs/training.md``.
"""

from __future__ import annotations

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
from mixle.train._trainer import train
from mixle.train.checkpoint import (
    Checkpoint,
    latest_checkpoint,
    list_checkpoints,
    read_checkpoint,
    write_checkpoint,
)
from mixle.train.metrics import MetricsLog, plot_losses, read_metrics

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
