"""The causal transformer module: causality, seeded init, heads, config and serialisation."""

from __future__ import annotations

import json

import pytest
import torch

from mixle.errors import ArgumentError, ArgumentTypeError, CheckpointError
from mixle.models import CategoricalEmbedding, CausalTransformerLM
from mixle.stats import from_dict, to_dict


def _model(**kwargs: object) -> CausalTransformerLM:
    config: dict[str, object] = {"d_model": 16, "n_layer": 2, "n_head": 4, "block": 8}
    config.update(kwargs)
    return CausalTransformerLM(13, **config)  # type: ignore[arg-type]


def test_logits_at_a_position_ignore_later_tokens() -> None:
    model = _model()
    ids = torch.randint(0, 13, (3, 8), generator=torch.Generator().manual_seed(0))
    changed = ids.clone()
    changed[:, 5:] = (changed[:, 5:] + 1) % 13
    with torch.no_grad():
        a, b = model(ids), model(changed)
    assert a.shape == (3, 8, 13)
    torch.testing.assert_close(a[:, :5], b[:, :5])
    assert not torch.allclose(a[:, 5:], b[:, 5:])


def test_last_only_matches_the_last_position_of_the_full_output() -> None:
    model = _model()
    ids = torch.randint(0, 13, (2, 6), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(model(ids, last_only=True), model(ids)[:, -1])


def test_equal_seeds_give_bitwise_equal_weights_and_different_seeds_do_not() -> None:
    a, b, c = _model(seed=7), _model(seed=7), _model(seed=8)
    for (name, pa), pb in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb), name
    assert not all(
        torch.equal(pa, pc) for pa, pc in zip(a.parameters(), c.parameters(), strict=True)
    )


def test_tied_head_reuses_the_embedding_and_untied_head_has_its_own() -> None:
    tied, untied = _model(), _model(tie_head=False)
    assert tied.head is None
    assert "head.weight" in dict(untied.named_parameters())
    n_tied = sum(p.numel() for p in tied.parameters())
    n_untied = sum(p.numel() for p in untied.parameters())
    assert n_untied - n_tied == 13 * 16


def test_shared_embedding_is_the_same_parameter_in_two_models() -> None:
    emb = CategoricalEmbedding(13, 16, seed=2)
    a, b = _model(embedding=emb), _model(embedding=emb, seed=9)
    assert a.embedding.weight is b.embedding.weight is emb.weight


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"d_model": 10, "n_head": 4}, ArgumentError, "divisible by `n_head`"),
        ({"block": 0}, ArgumentError, "`block` must be a positive integer"),
        ({"n_layer": 1.0}, ArgumentTypeError, "`n_layer`"),
        ({"tie_head": 1}, ArgumentTypeError, "`tie_head`"),
        ({"embedding": CategoricalEmbedding(12, 16)}, ArgumentError, r"\(13, 16\)"),
        ({"embedding": torch.nn.Embedding(13, 16)}, ArgumentTypeError, "CategoricalEmbedding"),
    ],
)
def test_bad_configuration_raises(kwargs: dict[str, object], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        _model(**kwargs)


def test_module_round_trips_through_json_bitwise() -> None:
    model = _model(tie_head=False, seed=4)
    back = from_dict(json.loads(json.dumps(to_dict(model))))
    assert isinstance(back, CausalTransformerLM)
    assert back.config() == model.config()
    for (name, p), q in zip(model.named_parameters(), back.parameters(), strict=True):
        assert torch.equal(p, q), name


def test_module_dict_with_mismatched_weights_is_refused() -> None:
    d = _model().to_dict()
    d["config"]["d_model"] = 32
    d["config"]["n_head"] = 4
    with pytest.raises(CheckpointError, match="do not fit"):
        from_dict(d)
    d = _model().to_dict()
    d["config"]["n_head"] = 3
    with pytest.raises(CheckpointError, match="config is invalid"):
        from_dict(d)


def test_round_trip_keeps_a_non_default_dtype() -> None:
    model = _model().double()
    back = from_dict(to_dict(model))
    assert all(p.dtype == torch.float64 for p in back.parameters())
    for p, q in zip(model.parameters(), back.parameters(), strict=True):
        assert torch.equal(p, q)
    assert all(p.requires_grad for p in back.parameters())
