"""Long-running language-model training over a sharded corpus, crash-safe and resumable.

``mixle train CORPUS`` is a thin wrapper over :func:`train`: it streams
:class:`~mixle.data.StreamingCorpus` rows (or ``TokenStream`` windows) into the
streaming transformer leaf of :mod:`mixle.models`, single-process or under ``torchrun``,
writes atomic checkpoints (:mod:`mixle.train.checkpoint`) and a JSONL metrics log
(:mod:`mixle.train.metrics`), and resumes bitwise-exactly on CPU. See
``docs/training.md``.

The names load on first use, so importing :mod:`mixle.train` (for its configuration,
as ``mixle train --help`` does) costs no ``torch`` import; only :func:`train` needs
torch, so torch-free readers of runs (``mixle show``, ``mixle where``: configs,
checkpoint metadata, batch sources) start fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mixle._lazy import attribute_names, load_attribute

if TYPE_CHECKING:
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

# Each public name and the module that defines it; loaded by ``__getattr__`` on first use.
_HOMES: dict[str, str] = {
    "OBJECTIVES": "mixle.train._config",
    "CheckpointConfig": "mixle.train._config",
    "DataConfig": "mixle.train._config",
    "ModelConfig": "mixle.train._config",
    "OptimizerConfig": "mixle.train._config",
    "RuntimeConfig": "mixle.train._config",
    "TrainConfig": "mixle.train._config",
    "MixtureBatches": "mixle.train._mixture",
    "budget_table": "mixle.train._mixture",
    "open_mixture": "mixle.train._mixture",
    "PackedBatches": "mixle.train._sources",
    "WindowBatches": "mixle.train._sources",
    "batch_digest": "mixle.train._sources",
    "split_holdout": "mixle.train._sources",
    "TrainSummary": "mixle.train._summary",
    "train": "mixle.train._trainer",
    "Checkpoint": "mixle.train.checkpoint",
    "latest_checkpoint": "mixle.train.checkpoint",
    "list_checkpoints": "mixle.train.checkpoint",
    "read_checkpoint": "mixle.train.checkpoint",
    "write_checkpoint": "mixle.train.checkpoint",
    "MetricsLog": "mixle.train.metrics",
    "plot_losses": "mixle.train.metrics",
    "read_metrics": "mixle.train.metrics",
}

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


def __getattr__(name: str) -> object:
    """Import the module that defines ``name`` on first use and cache the attribute."""
    return load_attribute(globals(), _HOMES, name)


def __dir__() -> list[str]:
    return attribute_names(globals(), __all__)
