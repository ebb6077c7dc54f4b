from __future__ import annotations

import pytest
import torch

from mixle.errors import ArgumentError, ArgumentTypeError
from mixle.stats import CategoricalEmbedding


def test_equal_seeds_give_bitwise_equal_tables() -> None:
    a = CategoricalEmbedding(11, 4, seed=3)
    b = CategoricalEmbedding(11, 4, seed=3)
    c = CategoricalEmbedding(11, 4, seed=4)
    assert torch.equal(a.weight, b.weight)
    assert not torch.equal(a.weight, c.weight)


def test_forward_looks_up_rows() -> None:
    emb = CategoricalEmbedding(5, 2)
    ids = torch.tensor([[4, 0], [1, 1]])
    assert torch.equal(emb(ids), emb.weight[ids])


@pytest.mark.parametrize("vocab", [0, -1])
def test_nonpositive_vocab_raises_argument_error(vocab: int) -> None:
    with pytest.raises(ArgumentError, match="`vocab` must be a positive integer"):
        CategoricalEmbedding(vocab, 3)


def test_float_dim_raises_argument_type_error() -> None:
    with pytest.raises(ArgumentTypeError, match="`dim`"):
        CategoricalEmbedding(3, 2.0)  # type: ignore[arg-type]
