"""Publishing over a local corpus swaps directories: the target always holds a corpus."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mixle.corpus import CorpusWriter, open_corpus, publish_corpus


def _corpus(path: Path, offset: int) -> Path:
    with CorpusWriter(path, vocab_size=100) as writer:
        writer.add_many([np.arange(offset, offset + 3)])
    return path


def test_overwrite_never_leaves_the_destination_without_a_corpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = _corpus(tmp_path / "target", 0)
    source = _corpus(tmp_path / "source", 10)
    seen: list[bool] = []
    real = shutil.rmtree

    def watching(path: Any, *args: Any, **kwargs: Any) -> None:
        real(path, *args, **kwargs)
        seen.append((target / "manifest.json").exists())

    monkeypatch.setattr(shutil, "rmtree", watching)
    publish_corpus(source, target, overwrite=True)
    assert seen and all(seen)
    np.testing.assert_array_equal(open_corpus(target)[0], [10, 11, 12])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["source", "target"]
