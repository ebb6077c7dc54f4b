"""TrainConfig: validation with named fields, JSON round trip, identity."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mixle.errors import ArgumentError, ArgumentTypeError
from mixle.train import TrainConfig


def test_defaults_are_valid_and_round_trip() -> None:
    config = TrainConfig("c")
    assert TrainConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


@given(
    d_model=st.integers(1, 8).map(lambda k: 8 * k),
    block=st.integers(1, 512),
    batch_size=st.integers(1, 64),
    lr=st.floats(1e-6, 1.0),
    steps=st.none() | st.integers(0, 10**6),
    objective=st.sampled_from(["packed", "windows"]),
    boundary_id=st.none() | st.integers(0, 255),
)
def test_round_trip_through_json(**fields: Any) -> None:
    config = TrainConfig("corpus", n_head=8, **fields)
    restored = TrainConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert restored == config
    assert restored.identity() == config.identity()


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"block": 0}, ArgumentError, "`block` must be a positive integer"),
        ({"batch_size": True}, ArgumentTypeError, "batch_size"),
        ({"d_model": 30, "n_head": 4}, ArgumentError, "divisible by `n_head`"),
        ({"objective": "mlm"}, ArgumentError, "`objective` must be one of packed, windows"),
        ({"lr": 0.0}, ArgumentError, "`lr` must be a finite positive number"),
        ({"lr": float("nan")}, ArgumentError, "`lr`"),
        ({"lr": "1e-3"}, ArgumentTypeError, "`lr`"),
        ({"steps": -1}, ArgumentError, "steps"),
        ({"keep_last": 0}, ArgumentError, "keep_last"),
        ({"eval_every": 10}, ArgumentError, "holdout_documents"),
        ({"resume": True}, ArgumentError, "`resume` needs `checkpoint_dir`"),
        ({"checkpoint_every": 5}, ArgumentError, "`checkpoint_dir` is not set"),
        ({"boundary_id": -1}, ArgumentError, "boundary_id"),
        ({"threads": 0}, ArgumentError, "threads"),
        ({"tie_head": 1}, ArgumentTypeError, "tie_head"),
        ({"corpus": ""}, ArgumentTypeError, "corpus"),
        ({"length_buckets": "128,x", "steps": 9}, ArgumentError, "`length_buckets` must be"),
        ({"length_buckets": "512,128", "steps": 9}, ArgumentError, r"length_buckets\[1\]=128"),
        ({"length_buckets": "0", "steps": 9}, ArgumentError, "positive and strictly"),
        ({"length_buckets": "128"}, ArgumentError, "needs: steps=None"),
        (
            {"length_buckets": "128", "steps": 9, "order": "blocks"},
            ArgumentError,
            "order='blocks' \\(needs 'permutation' or unset\\)",
        ),
        ({"length_buckets": "128", "steps": 9, "objective": "windows"}, ArgumentError, "objective"),
    ],
)
def test_invalid_fields_are_named(changes: dict[str, Any], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        TrainConfig(**{"corpus": "c", **changes})


def test_from_dict_rejects_unknown_fields_and_versions() -> None:
    d = TrainConfig("c").to_dict()
    with pytest.raises(ArgumentError, match="unknown field"):
        TrainConfig.from_dict({**d, "dropout": 0.1})
    with pytest.raises(ArgumentError, match="version"):
        TrainConfig.from_dict({**d, "version": 9})


def test_config_is_frozen() -> None:
    config = TrainConfig("c")
    with pytest.raises(AttributeError):
        config.block = 3  # type: ignore[misc]


def test_identity_ignores_run_control_fields() -> None:
    a = TrainConfig("c", steps=10, checkpoint_dir="x", eval_every=0)
    b = a.replace(steps=99, checkpoint_every=5, keep_last=1, device="cuda", log_every=1)
    assert a.identity() == b.identity()
    assert a.identity() != a.replace(block=32).identity()


def test_metrics_path_defaults_to_checkpoint_dir() -> None:
    assert TrainConfig("c", checkpoint_dir="runs/a").metrics_path == "runs/a/metrics.jsonl"
    assert TrainConfig("c", metrics="m.jsonl").metrics_path == "m.jsonl"
    assert TrainConfig("c").metrics_path is None


def test_per_rank_identity_has_the_fields_of_checkpoints_from_before_layouts() -> None:
    before_layouts = {
        "objective", "vocab", "d_model", "n_layer", "n_head", "block", "tie_head",
        "batch_size", "lr", "seed", "boundary_id", "holdout_documents",
    }  # fmt: skip
    assert set(TrainConfig(corpus="c", layout="per-rank").identity()) == before_layouts
    elastic = TrainConfig(corpus="c").identity()
    assert elastic["layout"] == "global" and "batch_size" not in elastic
    assert TrainConfig(corpus="c", batch_size=3).identity() == elastic


def test_unknown_layout_is_refused() -> None:
    with pytest.raises(ArgumentError, match="`layout` must be one of global, per-rank"):
        TrainConfig(corpus="c", layout="ring")
