"""The sharded offset-plus-token corpus format: writers, readers, ingest."""

from __future__ import annotations

from mixle.errors import CorpusError

__all__ = ["CorpusError"]
