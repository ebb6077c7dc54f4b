"""Stream options: validated once, in one place, with the same message for every stream."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mixle.data import (
    Mixture,
    MixtureSource,
    PackOptions,
    ShardOptions,
    StreamingCorpus,
    TokenStream,
)
from mixle.errors import ArgumentError, ArgumentTypeError


@given(
    world_size=st.integers(1, 64),
    rank=st.integers(0, 63),
    batch_size=st.integers(1, 99),
    layout=st.sampled_from(["per-rank", "global"]),
)
def test_shard_options_round_trip_and_reject_a_rank_outside_the_world(
    world_size: int, rank: int, batch_size: int, layout: str
) -> None:
    if rank >= world_size:
        with pytest.raises(ArgumentError, match="`rank` must be smaller than `world_size`"):
            ShardOptions(rank, world_size, batch_size, layout)
        return
    shard = ShardOptions(np.int64(rank), world_size, batch_size, layout)  # type: ignore[arg-type]
    assert type(shard.rank) is int and shard.global_batch_size == world_size * batch_size
    assert ShardOptions.from_dict(shard.to_dict()) == shard


def test_pack_options_round_trip_and_are_frozen() -> None:
    pack = PackOptions(8, pad_id=3, boundary_id=0, document_ids=True)
    assert PackOptions.from_dict(pack.to_dict()) == pack
    with pytest.raises(dataclasses.FrozenInstanceError):
        pack.block = 9  # type: ignore[misc]


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: ShardOptions(layout="diagonal"), ArgumentError, "`layout` must be one of"),
        (lambda: ShardOptions(batch_size=0), ArgumentError, "`batch_size`"),
        (lambda: ShardOptions(world_size=True), ArgumentTypeError, "`world_size`"),
        (lambda: PackOptions(0), ArgumentError, "`block`"),
        (lambda: PackOptions(4, pad_id=1.5), ArgumentTypeError, "`pad_id`"),
        (lambda: PackOptions(4, document_ids=1), ArgumentTypeError, "`document_ids`"),
    ],
)
def test_each_bad_option_is_named(make: object, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        make()  # type: ignore[operator]


def test_every_stream_refuses_a_bad_rank_with_the_same_message() -> None:
    docs = [np.arange(20)] * 3
    expected = r"`rank` must be smaller than `world_size` \(2\). Got 2 instead."
    builders = [
        lambda: StreamingCorpus(docs, rank=2, world_size=2, block=4, batch_size=1),
        lambda: TokenStream(docs, 4, 1, rank=2, world_size=2),
        lambda: Mixture([MixtureSource(docs, 1.0, "a")], block=4, rank=2, world_size=2),
    ]
    for build in builders:
        with pytest.raises(ArgumentError, match=expected):
            build()
