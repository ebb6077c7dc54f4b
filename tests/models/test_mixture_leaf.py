"""Transformer leaves inside MixtureEstimator: pair- and document-level EM, the shared
embedding (one step per EM step, stored once), revision pinning and bad input."""

from __future__ import annotations

import copy
import itertools
import json

import numpy as np
import pytest
import torch

from mixle.errors import ArgumentError, RevisionMismatchError
from mixle.models import CategoricalEmbedding, StreamingTransformer, TransformerLMEstimator
from mixle.stats import (
    MixtureDistribution,
    MixtureEstimator,
    from_dict,
    partitioned_estimate,
    tensors_from_blob,
    to_dict,
)

from .conftest import VOCAB, assert_params_equal, params_snapshot, random_pairs, tiny_leaf


def _docs(n: int, seed: int = 0, low: int = 3, high: int = 30) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, VOCAB, int(rng.integers(low, high))) for _ in range(n)]


def _shared_experts(
    emb: CategoricalEmbedding | None = None, observation: str = "document"
) -> list[StreamingTransformer]:
    emb = CategoricalEmbedding(VOCAB, 16, seed=9) if emb is None else emb
    return [tiny_leaf(seed=s, embedding=emb, observation=observation) for s in (1, 2)]


def _em_step(mix: MixtureDistribution, data: list[object]) -> MixtureDistribution:
    return partitioned_estimate(mix.estimator(), data, prev_estimate=mix)


def test_pair_level_mixture_steps_each_leaf_on_responsibility_weighted_pairs() -> None:
    experts = [tiny_leaf(seed=1), tiny_leaf(seed=2)]
    for leaf in experts:
        leaf.module.double()
    reference = [StreamingTransformer(copy.deepcopy(leaf.module)) for leaf in experts]
    mix = MixtureDistribution(experts, [0.25, 0.75])
    ctx, tok = random_pairs(10, seed=3)
    pairs = [(c, int(t)) for c, t in zip(ctx, tok, strict=True)]
    enc = mix.dist_to_encoder().seq_encode(pairs)
    joint = np.stack([leaf.seq_log_density(enc) for leaf in reference], axis=1) + np.log(
        [0.25, 0.75]
    )
    posterior = np.exp(joint - np.logaddexp.reduce(joint, axis=1, keepdims=True))
    np.testing.assert_allclose(mix.posterior(enc), posterior, rtol=1e-12)
    out = _em_step(mix, pairs)
    np.testing.assert_allclose(out.weights, posterior.mean(axis=0), rtol=1e-12)
    for k, leaf in enumerate(reference):
        partitioned_estimate(leaf.estimator(), pairs, posterior[:, k])
        assert_params_equal(
            params_snapshot(leaf),
            params_snapshot(experts[k]),
            lambda a, b: torch.allclose(a, b, rtol=0, atol=1e-12),
        )
    assert out.components[0] is not experts[0] and out.components[0].module is experts[0].module  # type: ignore[attr-defined]


def test_shared_embedding_folds_every_experts_gradient_into_one_step() -> None:
    emb = CategoricalEmbedding(VOCAB, 16, seed=9)
    experts = _shared_experts(emb)
    mix = MixtureDistribution(experts, [0.3, 0.7])
    assert mix.shared_embeddings == [emb]
    docs = _docs(6)
    enc = mix.dist_to_encoder().seq_encode(docs)
    posterior = mix.posterior(enc)
    states = []
    for k, leaf in enumerate(experts):
        acc = leaf.estimator().accumulator_factory().make()
        acc.seq_update(enc, posterior[:, k], None)
        states.append(acc.value())
    before = [params_snapshot(leaf) for leaf in experts]
    _em_step(mix, docs)

    lr = experts[0].lr
    table = torch.nn.Parameter(before[0]["embedding.weight"].clone())
    table.grad = (
        states[0].gradient_sums["embedding.weight"] + states[1].gradient_sums["embedding.weight"]
    ) / (states[0].effective_weight + states[1].effective_weight)
    torch.optim.AdamW([table], lr=lr).step()
    torch.testing.assert_close(emb.weight.detach(), table.detach(), rtol=0, atol=1e-7)
    for k, leaf in enumerate(experts):
        names = [n for n, _ in leaf.module.named_parameters() if n != "embedding.weight"]
        private = [torch.nn.Parameter(before[k][n].clone()) for n in names]
        for p, n in zip(private, names, strict=True):
            p.grad = states[k].gradient_sums[n] / states[k].effective_weight
        torch.optim.AdamW(private, lr=lr).step()
        current = dict(leaf.module.named_parameters())
        for p, n in zip(private, names, strict=True):
            torch.testing.assert_close(current[n].detach(), p.detach(), rtol=0, atol=1e-7, msg=n)
        # the expert's own AdamW never touched the shared table: no moments for it
        state = leaf.estimator()._slot.state_dict()
        assert state is not None
        table_index = [n for n, _ in leaf.module.named_parameters()].index("embedding.weight")
        assert table_index not in state["state"] and len(state["state"]) == len(names)


def test_mixture_round_trips_with_the_embedding_stored_once_and_still_shared() -> None:
    experts = _shared_experts()
    mix = MixtureDistribution(experts, [0.5, 0.5])
    docs = _docs(8, seed=1)
    mix = _em_step(mix, docs)
    d = json.loads(json.dumps(to_dict(mix)))
    assert len(d["shared_embeddings"]) == 1
    for entry in d["components"]:
        assert entry["embedding"] == 0
        assert entry["dict"]["module"]["embedding"] == "external"
        assert "embedding.weight" not in tensors_from_blob(entry["dict"]["module"]["weights"])
    loaded = from_dict(d)
    assert isinstance(loaded, MixtureDistribution)
    table = loaded.shared_embeddings[0]
    assert all(c.module.embedding is table for c in loaded.components)  # type: ignore[attr-defined]
    np.testing.assert_array_equal(loaded.seq_log_density(docs), mix.seq_log_density(docs))
    more = _docs(5, seed=2)
    a, b = _em_step(mix, more), _em_step(loaded, more)
    np.testing.assert_array_equal(a.weights, b.weights)
    for x, y in zip(a.components, b.components, strict=True):
        assert_params_equal(params_snapshot(x), params_snapshot(y))  # type: ignore[arg-type]
    assert all(c.module.embedding is table for c in b.components)  # type: ignore[attr-defined]


def test_a_revision_change_between_accumulate_and_estimate_names_the_component() -> None:
    experts = [tiny_leaf(seed=1), tiny_leaf(seed=2)]
    mix = MixtureDistribution(experts, [0.5, 0.5])
    est = mix.estimator()
    ctx, tok = random_pairs(6, seed=4)
    acc = est.accumulator_factory().make()
    acc.seq_update(mix.dist_to_encoder().encode_arrays(ctx, tok), np.ones(6), mix)  # type: ignore[attr-defined]
    stat = acc.value()
    with torch.no_grad():
        experts[1].module.position.add_(0.01)
    before = params_snapshot(experts[0])
    with pytest.raises(
        RevisionMismatchError,
        match=r"component 1 \(StreamingTransformerEstimator\): gradient state computed at revision",
    ):
        est.estimate(None, stat)
    assert_params_equal(before, params_snapshot(experts[0]))  # nothing stepped


def test_an_expert_with_no_responsibility_keeps_its_model() -> None:
    experts = _shared_experts()
    mix = MixtureDistribution(experts, [1.0, 0.0])
    before = params_snapshot(experts[1])
    out = _em_step(mix, _docs(4, seed=3))
    np.testing.assert_array_equal(out.weights, [1.0, 0.0])
    private = {n: t for n, t in before.items() if n != "embedding.weight"}
    now = {n: t for n, t in params_snapshot(experts[1]).items() if n != "embedding.weight"}
    assert_params_equal(private, now)
    assert experts[1].estimator()._slot.state_dict() is None
    assert not torch.equal(
        before["embedding.weight"], experts[1].module.embedding.weight
    )  # moved by expert 0


def test_posterior_is_stable_for_document_log_densities_below_minus_1e5() -> None:
    experts = [tiny_leaf(seed=1, observation="document"), tiny_leaf(seed=2, observation="document")]
    mix = MixtureDistribution(experts, [0.4, 0.6])
    doc = np.random.default_rng(0).integers(0, VOCAB, 40_000)
    other = doc[:20_000]
    logs = mix.component_log_densities([doc, other])
    assert (logs[0] < -1e5).all()
    joint = logs + np.log([0.4, 0.6])
    expected = np.exp(joint - np.logaddexp.reduce(joint, axis=1, keepdims=True))
    posterior = mix.posterior([doc, other])
    assert np.isfinite(posterior).all()
    np.testing.assert_allclose(posterior.sum(axis=1), 1.0)
    np.testing.assert_allclose(posterior, expected, rtol=1e-9, atol=1e-300)
    np.testing.assert_allclose(
        mix.seq_log_density([doc, other]), np.logaddexp.reduce(joint, axis=1), rtol=1e-14
    )


def test_mixture_sampler_draws_documents_from_the_chosen_expert() -> None:
    experts = _shared_experts()
    mix = MixtureDistribution(experts, [0.5, 0.5])
    sampler = mix.sampler(seed=3)
    docs = sampler.sample(4, prompt=[1], n_tokens=6)
    assert len(docs) == 4 and all(d.shape == (7,) for d in docs)
    again = mix.sampler(seed=3).sample(4, prompt=[1], n_tokens=6)
    for a, b in zip(docs, again, strict=True):
        np.testing.assert_array_equal(a, b)
    assert set(sampler.last_components.tolist()) <= {0, 1}


def test_components_of_different_observation_kinds_are_refused() -> None:
    with pytest.raises(
        ArgumentError,
        match=r"component 1 \(StreamingTransformer\) observes StreamingDocumentEncoder",
    ):
        MixtureDistribution([tiny_leaf(), tiny_leaf(observation="document")], [0.5, 0.5])
    with pytest.raises(
        ArgumentError, match=r"component 1 .* observes StreamingTokenEncoder\(vocab=23, block=4\)"
    ):
        MixtureEstimator([tiny_leaf().estimator(), tiny_leaf(block=4).estimator()])


def test_embeddings_of_different_vocabularies_passed_as_shared_name_the_component() -> None:
    emb = CategoricalEmbedding(VOCAB, 16, seed=1)
    good = TransformerLMEstimator(
        VOCAB, d_model=16, n_layer=1, n_head=2, block=8, embedding=emb, observation="document"
    )
    other_vocab = TransformerLMEstimator(
        VOCAB + 5, d_model=16, n_layer=1, n_head=2, block=8, observation="document"
    )
    with pytest.raises(
        ArgumentError,
        match=rf"component 1 \(TransformerLMEstimator\) holds an embedding of vocab {VOCAB + 5}, dim 16, but the shared embedding has vocab {VOCAB}",
    ):
        MixtureEstimator([good, other_vocab], embedding=emb)
    private = TransformerLMEstimator(
        VOCAB, d_model=16, n_layer=1, n_head=2, block=8, observation="document"
    )
    with pytest.raises(ArgumentError, match=r"component 1 .* holds its own CategoricalEmbedding"):
        MixtureEstimator([good, private], embedding=emb)
    with pytest.raises(ArgumentError, match=r"`embedding` must have shape \(vocab, d_model\)"):
        TransformerLMEstimator(VOCAB + 5, d_model=16, n_layer=1, n_head=2, block=8, embedding=emb)
    shared = MixtureEstimator(
        [
            good,
            TransformerLMEstimator(
                VOCAB,
                d_model=16,
                n_layer=1,
                n_head=2,
                block=8,
                embedding=emb,
                seed=4,
                observation="document",
            ),
        ],
        embedding=emb,
    )
    assert shared.num_components == 2


def test_experts_sharing_an_embedding_must_share_lr() -> None:
    emb = CategoricalEmbedding(VOCAB, 16, seed=1)
    a = tiny_leaf(seed=1, embedding=emb, observation="document")
    b = tiny_leaf(seed=2, embedding=emb, observation="document", lr=1e-2)
    with pytest.raises(ArgumentError, match=r"component 1 \(StreamingTransformer\) has lr 0.01"):
        MixtureDistribution([a, b], [0.5, 0.5])


@pytest.mark.parametrize("cuts", [(3,), (1, 4), (2, 3, 5)])
def test_split_and_combine_equals_one_accumulator_for_document_experts(
    cuts: tuple[int, ...],
) -> None:
    experts = _shared_experts()
    for leaf in experts:
        leaf.module.double()
    mix = MixtureDistribution(experts, [0.4, 0.6])
    enc = mix.dist_to_encoder().seq_encode(_docs(6, seed=7))
    weights = np.linspace(0.5, 2.0, 6)
    factory = mix.estimator().accumulator_factory()
    whole = factory.make()
    whole.seq_update(enc, weights, mix)
    bounds = [0, *cuts, 6]
    combined = None
    for lo, hi in itertools.pairwise(bounds):
        part = factory.make()
        part.seq_update(enc[lo:hi], weights[lo:hi], mix)
        combined = part if combined is None else combined.combine(part)
    assert combined is not None
    a, b = whole.value(), combined.value()
    assert a.weights.tobytes() == b.weights.tobytes()  # responsibility totals: exact
    for x, y in zip(a.components, b.components, strict=True):
        assert x.effective_weight == pytest.approx(y.effective_weight, rel=1e-15)
        for name in x.parameter_names:
            torch.testing.assert_close(
                x.gradient_sums[name], y.gradient_sums[name], rtol=1e-10, atol=1e-13
            )
