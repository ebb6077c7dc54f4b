"""Fixtures of the distributed-ingest tests: small JSONL inputs and their local run."""

from __future__ import annotations

from pathlib import Path

import pytest

from mixle.corpus import ingest
from tests.corpus.ingestion.distributed_helpers import OPTIONS, make_inputs


@pytest.fixture
def inputs(tmp_path: Path) -> list[str]:
    """Two JSONL files of random documents (:func:`make_inputs`)."""
    return make_inputs(tmp_path)


@pytest.fixture
def local_run(tmp_path: Path, inputs: list[str]) -> Path:
    """The corpus a plain local ingest of ``inputs`` writes (``OPTIONS``, one worker)."""
    out = tmp_path / "local"
    ingest(inputs, out, workers=1, **OPTIONS)
    return out
