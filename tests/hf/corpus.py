"""The small corpus shared by the Hugging Face adapter tests and their torchrun script."""

from __future__ import annotations

from typing import Any

import numpy as np

from mixle.data import StreamingCorpus

WORLD_SIZE = 2
BATCH_SIZE = 3
BLOCK = 8


def documents(seed: int = 7, count: int = 61) -> list[np.ndarray]:
    """``count`` documents of 1 to 59 tokens (ids 1..999; 0 is the boundary)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 1000, size=int(n)) for n in rng.integers(1, 60, size=count)]


def global_corpus(
    rank: int, world_size: int = WORLD_SIZE, batch_size: int = BATCH_SIZE, **kw: Any
) -> StreamingCorpus:
    """Rank ``rank``'s global-layout view of :func:`documents` (document ids on)."""
    kw.setdefault("block", BLOCK)
    return StreamingCorpus(
        kw.pop("docs", None) or documents(),
        rank=rank,
        world_size=world_size,
        batch_size=batch_size,
        seed=5,
        boundary_id=0,
        document_ids=True,
        layout="global",
        **kw,
    )
