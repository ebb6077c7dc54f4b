"""Fixtures shared by the corpus tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mixle.corpus import CorpusWriter


def random_documents(
    seed: int, count: int, max_len: int = 40, vocab: int = 1000
) -> list[np.ndarray]:
    """Deterministic documents of random lengths (some empty) and ids below ``vocab``."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, max_len, size=count)
    return [rng.integers(0, vocab, size=int(n), dtype=np.int64) for n in lengths]


@pytest.fixture
def make_corpus(tmp_path: Path) -> Callable[..., Path]:
    """Write ``documents`` to a fresh corpus under ``tmp_path`` and return its path."""
    counter = iter(range(10**6))

    def make(documents: Sequence[Any], **options: Any) -> Path:
        path = tmp_path / f"corpus-{next(counter)}"
        with CorpusWriter(path, **options) as writer:
            writer.add_many(documents)
        return path

    return make
