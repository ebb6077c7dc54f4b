"""Document masking: a packed row's logits equal each of its documents run alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mixle.data import StreamingCorpus
from mixle.models import CausalTransformerLM


def _documents() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 50, int(n)) for n in rng.integers(2, 30, 40)]


@pytest.mark.parametrize("packing", ["best_fit", "concatenate"])
def test_packed_row_logits_equal_each_document_alone(packing: str) -> None:
    documents = _documents()
    block = 32
    model = CausalTransformerLM(50, d_model=16, n_layer=2, n_head=4, block=block, seed=1)
    corpus = StreamingCorpus(
        documents,
        rank=0,
        world_size=1,
        block=block,
        batch_size=4,
        layout="global",
        packing=packing,
        document_ids=True,
        attention_boundaries=True,
    )
    checked = 0
    for batch in corpus.iter_epoch(0):
        ids = torch.from_numpy(np.ascontiguousarray(batch.context))
        with torch.no_grad():
            packed = model(ids, sequence_ids=torch.from_numpy(batch.sequence_ids))
        for row in range(batch.num_rows):
            cu = batch.cu_seqlens[row]
            for start, end in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True):
                document = int(batch.document_ids[row, start]) if end > start else -1
                if document < 0 or batch.position_ids[row, start] != 0:
                    continue  # padding, or a document continued from another row
                alone = torch.from_numpy(documents[document][: end - start])[None]
                with torch.no_grad():
                    expected = model(alone)[0]
                torch.testing.assert_close(packed[row, start:end], expected, atol=1e-5, rtol=1e-5)
                checked += 1
    assert checked >= len(documents) // 2


def test_without_sequence_ids_a_row_attends_across_documents() -> None:
    model = CausalTransformerLM(50, d_model=16, n_layer=1, n_head=4, block=8, seed=1)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])
    sequence_ids = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        masked = model(ids, sequence_ids=sequence_ids)
        plain = model(ids)
        alone = model(ids[:, 3:])
    torch.testing.assert_close(masked[:, 3:], alone, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(plain[:, 3:], alone, atol=1e-3)
