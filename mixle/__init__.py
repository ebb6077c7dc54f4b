"""mixle: feed language-model pretraining from token corpora far larger than memory.

Subpackages
-----------
mixle.corpus
    The on-disk sharded corpus format: writers, lazy memory-mapped readers, ingest.
mixle.data
    Pure iteration logic over any sequence of token arrays: ordering, per-rank
    sharding, packing, batching, resumable cursors.
mixle.models
    Consumers of the stream: the streaming transformer language-model leaf.
mixle.stats
    The estimator protocol the leaf plugs into (accumulate, combine, estimate) and
    its JSON ``to_dict``/``from_dict`` registry.
mixle.train
    The training loop behind ``mixle train``: checkpoints, exact resume, torchrun.
mixle.cli
    The ``mixle`` command: ingest, inspect, verify, convert, train.
"""

from __future__ import annotations

from mixle._version import __version__

__all__ = ["__version__"]
