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
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
