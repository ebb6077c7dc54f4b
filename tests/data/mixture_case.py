"""The three-source mixture shared by the torchrun mixture test and its script."""

from __future__ import annotations

import numpy as np

from mixle.data import Mixture, MixturePhase, MixtureSource

BLOCK = 8
OBJECTIVES = ("packed", "windows")


def _documents(seed: int, count: int, low: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(low, low + 100, int(rng.integers(1, 40))) for _ in range(count)]


SOURCES = (
    ("web", _documents(1, 40, 0)),
    ("code", _documents(2, 9, 100)),
    ("math", _documents(3, 4, 200)),
)


def build(objective: str, *, rank: int, world_size: int, batch_size: int) -> Mixture:
    """Weights 0.6/0.3/0.1, then 0.2/0.3/0.5 from row 30; packed batches carry document ids."""
    return Mixture(
        [
            MixtureSource(docs, w, name)
            for (name, docs), w in zip(SOURCES, (0.6, 0.3, 0.1), strict=True)
        ],
        block=BLOCK,
        batch_size=batch_size,
        rank=rank,
        world_size=world_size,
        seed=13,
        boundary_id=999,
        phases=[MixturePhase(30, {"web": 0.2, "code": 0.3, "math": 0.5})],
        document_ids=objective == "packed",
        objective=objective,
    )
