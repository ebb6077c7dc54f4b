"""OLMo-core's rows in ``tools/bench_peers.py`` (issue #31 item 2) are OLMo-core's own
reading of the benchmark's documents: ``slow`` (importing olmo-core takes seconds)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from tools.bench_peers import make_corpus


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("olmo_core") is None, reason="ai2-olmo-core")
def test_olmo_instances_are_the_documents_stream_and_its_loader_stacks_them(
    tmp_path: Path,
) -> None:
    from tools._olmo_methods import EOS, _epochs, olmo_dataset, olmo_loader, write_olmo_tokens

    corpus = make_corpus(20_000, 300, seed=0, work=tmp_path)
    path = write_olmo_tokens(corpus.documents, corpus.work)
    expected = np.concatenate([np.append(d, EOS) for d in corpus.documents]).astype(np.uint16)
    np.testing.assert_array_equal(np.fromfile(path, dtype=np.uint16), expected)
    length = 65
    dataset = olmo_dataset(corpus.work, length, packed=False)
    assert len(dataset) == expected.shape[0] // length
    for index in (0, 7, len(dataset) - 1):
        np.testing.assert_array_equal(
            np.asarray(dataset[index]["input_ids"]), expected[index * length :][:length]
        )
    batch = next(iter(_epochs(olmo_loader(dataset, corpus.work, 4))))
    assert tuple(batch["input_ids"].shape) == (4, length)
    packed = olmo_dataset(corpus.work, 64, packed=True)
    assert len(packed) > 0 and tuple(packed[0]["input_ids"].shape) == (64,)
