"""The padding-free collate read by a real transformers causal LM, and the FlexAttention mask."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from mixle.data import StreamingCorpus
from mixle.errors import ArgumentError
from mixle.hf import GlobalRowDataset, flex_document_mask, padding_free_collate

transformers = pytest.importorskip("transformers")

VOCAB = 50
BLOCK = 32


def _documents() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, VOCAB, int(n)) for n in rng.integers(2, 30, 24)]


def _rows(packing: str) -> list[dict[str, torch.Tensor]]:
    corpus = StreamingCorpus(
        _documents(),
        rank=0,
        world_size=1,
        block=BLOCK,
        batch_size=4,
        layout="global",
        packing=packing,
        document_ids=True,
    )
    return list(GlobalRowDataset(corpus, num_epochs=1))


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
    )
    config._attn_implementation = "sdpa"
    return transformers.LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("packing", ["best_fit", "concatenate"])
def test_per_document_losses_equal_the_documents_fed_one_by_one(packing: str) -> None:
    documents = _documents()
    rows = _rows(packing)
    model = _model()
    batch = padding_free_collate(rows)
    with torch.no_grad():
        output = model(
            input_ids=batch["input_ids"],
            position_ids=batch["position_ids"],
            labels=batch["labels"],
            shift_labels=batch["shift_labels"],
            use_cache=False,
        )
    labels = batch["shift_labels"][0]
    losses = F.cross_entropy(output.logits[0], labels, ignore_index=-100, reduction="none")
    trained = labels != -100
    assert output.loss.item() == pytest.approx(losses[trained].mean().item(), rel=1e-5)
    document_ids = torch.stack([row["document_ids"] for row in rows])
    positions = torch.cat([row["position_ids"] for row in rows])
    whole = 0
    for document, tokens in enumerate(documents):
        if int((document_ids == document).any(dim=1).sum()) != 1:
            continue  # cut over rows: it has no one-row counterpart
        # Its pairs (concatenate-and-chunk also trains its last token -> the next document).
        mine = trained & (document_ids.flatten() == document) & (positions < len(tokens) - 1)
        alone = torch.from_numpy(tokens)[None]
        with torch.no_grad():
            logits = model(input_ids=alone, use_cache=False).logits[0]
        expected = F.cross_entropy(logits[:-1], alone[0, 1:], reduction="none")
        torch.testing.assert_close(losses[mine], expected, atol=1e-4, rtol=1e-4)
        whole += 1
    assert whole >= len(documents) // 2


def test_flash_keyword_arguments_mark_every_sequence() -> None:
    rows = _rows("best_fit")
    batch = padding_free_collate(rows)
    cu = batch["cu_seq_lens_q"]
    assert cu.dtype == torch.int32 and int(cu[0]) == 0 and int(cu[-1]) == len(rows) * BLOCK
    assert int(cu.diff().max()) == batch["max_length_q"] == batch["max_length_k"]
    positions = batch["position_ids"][0]
    starts = torch.nonzero(positions == 0).flatten()
    # Every sequence starts at position 0 (padding tokens are one-token sequences here).
    assert set(cu[:-1].tolist()) <= set(starts.tolist())


def test_rows_without_document_ids_are_refused_by_name() -> None:
    rows = [{"context": torch.zeros(4), "targets": torch.zeros(4), "loss_mask": torch.ones(4)}]
    with pytest.raises(ArgumentError, match="document_ids=True"):
        padding_free_collate(rows)


# Eager flex_attention (no torch.compile on this CPU test) warns that it is unfused.
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_document_mask_confines_attention_to_each_sequence() -> None:
    from torch.nn.attention.flex_attention import flex_attention

    sequence_ids = torch.tensor([[0] * 40 + [1] * 88], dtype=torch.int64)
    mask = flex_document_mask(sequence_ids)
    q, k, v = (
        torch.randn(1, 2, 128, 8, generator=torch.Generator().manual_seed(i)) for i in range(3)
    )
    out = flex_attention(q, k, v, block_mask=mask)
    alone = F.scaled_dot_product_attention(q[:, :, 40:], k[:, :, 40:], v[:, :, 40:], is_causal=True)
    torch.testing.assert_close(out[:, :, 40:], alone, atol=1e-5, rtol=1e-5)


def test_global_rows_with_attention_boundaries_stack_in_a_default_collate() -> None:
    from torch.utils.data import DataLoader

    corpus = StreamingCorpus(
        _documents(),
        rank=0,
        world_size=1,
        block=BLOCK,
        batch_size=4,
        layout="global",
        packing="best_fit",
        document_ids=True,
        attention_boundaries=True,
    )
    loader = DataLoader(GlobalRowDataset(corpus, num_epochs=1), batch_size=4)
    batch = next(iter(loader))
    assert batch["cu_seqlens"].shape == (4, BLOCK + 1)
    assert batch["cu_seqlens"].dtype == torch.int32
    assert batch["max_seqlen"].shape == (4,) and batch["sequence_ids"].shape == (4, BLOCK)
