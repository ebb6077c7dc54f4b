from __future__ import annotations

import base64
import io
import json
import pickle

import pytest
import torch

from mixle.errors import CheckpointError
from mixle.stats import (
    CategoricalEmbedding,
    from_dict,
    register,
    registered_types,
    tensors_from_blob,
    tensors_to_blob,
    to_dict,
)


def test_blob_round_trips_a_state_dict_bitwise() -> None:
    state = {"a": torch.randn(3, 4), "b": torch.arange(5), "nested": {"c": torch.ones(2)}}
    blob = tensors_to_blob(state)
    assert isinstance(blob, str)
    json.dumps(blob)
    back = tensors_from_blob(blob)
    assert torch.equal(back["a"], state["a"])
    assert torch.equal(back["b"], state["b"])
    assert torch.equal(back["nested"]["c"], state["nested"]["c"])


class _Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (print, ("pwned",))


def test_blob_with_arbitrary_pickled_object_is_refused() -> None:
    buffer = io.BytesIO()
    torch.save({"x": _Evil()}, buffer)
    blob = base64.b64encode(buffer.getvalue()).decode()
    with pytest.raises(CheckpointError, match="weights-only"):
        tensors_from_blob(blob)


def test_blob_that_is_not_base64_or_not_a_dict_is_refused() -> None:
    with pytest.raises(CheckpointError):
        tensors_from_blob("not base64 !!")
    with pytest.raises(CheckpointError):
        tensors_from_blob(base64.b64encode(pickle.dumps([1, 2])).decode())
    buffer = io.BytesIO()
    torch.save([torch.ones(1)], buffer)
    with pytest.raises(CheckpointError, match="must hold a dict"):
        tensors_from_blob(base64.b64encode(buffer.getvalue()).decode())
    with pytest.raises(CheckpointError, match="base64 string"):
        tensors_from_blob(b"bytes")


def test_from_dict_rejects_unknown_types_and_non_dicts() -> None:
    with pytest.raises(CheckpointError, match="unknown type 'Nope'"):
        from_dict({"type": "Nope"})
    with pytest.raises(CheckpointError, match="needs a dict"):
        from_dict([1])  # type: ignore[arg-type]


def test_register_refuses_a_second_class_under_one_name() -> None:
    with pytest.raises(CheckpointError, match="already registered"):

        @register("CategoricalEmbedding")
        class Other:
            pass


def test_registered_types_lists_the_leaf_family() -> None:
    import mixle.models  # noqa: F401  (registers the leaf types)

    names = registered_types()
    for name in ("CategoricalEmbedding", "CausalTransformerLM", "StreamingTransformer"):
        assert name in names


def test_embedding_round_trips_through_json() -> None:
    emb = CategoricalEmbedding(7, 3, seed=5)
    d = json.loads(json.dumps(to_dict(emb)))
    back = from_dict(d)
    assert isinstance(back, CategoricalEmbedding)
    assert back is not emb
    assert torch.equal(back.weight, emb.weight)


def test_embedding_dict_with_wrong_shape_is_refused() -> None:
    d = CategoricalEmbedding(7, 3).to_dict()
    d["vocab"] = 8
    with pytest.raises(CheckpointError, match="shape"):
        from_dict(d)
    d = CategoricalEmbedding(7, 3).to_dict()
    d["version"] = 2
    with pytest.raises(CheckpointError, match="version"):
        from_dict(d)
