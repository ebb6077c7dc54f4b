"""``DocumentsView.token_offsets``: a slice of a corpus answers token offsets like the
corpus (so a plan over ``split_holdout``'s training slice stays O(indices))."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mixle.corpus import CorpusWriter, open_corpus
from mixle.data._documents import offset_reader
from mixle.errors import ArgumentTypeError


@pytest.mark.parametrize("selection", [slice(None), slice(3, 40), slice(5, 45, 3), slice(9, 9)])
def test_a_view_gives_the_offsets_of_its_own_documents(tmp_path: Path, selection: slice) -> None:
    rng = np.random.default_rng(0)
    with CorpusWriter(tmp_path / "c", vocab_size=100, shard_max_bytes=256) as writer:
        for length in rng.integers(0, 9, 60):
            writer.add(rng.integers(0, 100, int(length)))
    corpus = open_corpus(tmp_path / "c")
    view = corpus[selection]
    ends = np.concatenate([[0], np.cumsum(view.lengths)])
    indices = np.arange(len(view) + 1)
    assert np.array_equal(view.token_offsets(indices), ends)
    assert np.array_equal(view.token_offsets(indices[::-1]), ends[::-1])
    assert offset_reader(view) is view
    with pytest.raises(IndexError, match=r"indices\[0\]"):
        view.token_offsets([len(view) + 1])
    with pytest.raises(ArgumentTypeError):
        view.token_offsets(np.zeros((2, 2), dtype=np.int64))
