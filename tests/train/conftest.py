"""Fixtures for the training tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.train._helpers import write_text_corpus


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def text_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """96 documents of templated sentences (byte-level, several shards)."""
    return write_text_corpus(tmp_path_factory.mktemp("corpus") / "text")
