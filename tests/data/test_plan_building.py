"""Epoch plans are a public, resumable contract: the order of ``(seed, epoch)`` never
changes, and the layouts, counts and batches built from it match a plain reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.data import Mixture, MixtureSource
from mixle.data._mixture_source import source_seed
from mixle.data._order import global_document_order, length_table
from mixle.data.streaming_corpus import StreamingCorpus


def test_the_shuffle_order_of_a_seed_and_epoch_never_changes() -> None:
    # Saved checkpoints and cursors resume into these orders: they are frozen.
    assert global_document_order(12, seed=0, epoch=0).tolist() == [
        7, 1, 0, 6, 3, 5, 10, 8, 11, 2, 9, 4,
    ]  # fmt: skip
    assert global_document_order(12, seed=7, epoch=3).tolist() == [
        5, 2, 11, 4, 7, 8, 1, 0, 10, 3, 9, 6,
    ]  # fmt: skip
    reference = np.random.RandomState(np.random.MT19937(np.random.SeedSequence([3, 1])))
    np.testing.assert_array_equal(
        global_document_order(100_003, seed=3, epoch=1), reference.permutation(100_003)
    )


@pytest.mark.parametrize(
    ("lengths", "dtype"),
    [([], np.uint8), ([0, 255], np.uint8), ([3, 65_535], np.uint16), ([1, 70_000], np.uint32)],
)
def test_the_length_table_is_the_narrowest_dtype_and_keeps_every_value(
    lengths: list[int], dtype: type
) -> None:
    table = length_table(np.array(lengths, dtype=np.int64))
    assert table.dtype == dtype
    assert table.tolist() == lengths


def _reference_plan(
    lengths: list[int], *, seed: int, epoch: int, rank: int, world_size: int, boundary: bool,
    block: int, batch_size: int, layout: str, even: bool,
) -> tuple[list[int], list[int], list[int], int, int]:  # fmt: skip
    """``(indices, lengths, starts, rows, num_batches)`` by the definition, in Python."""
    generator = np.random.RandomState(np.random.MT19937(np.random.SeedSequence([seed, epoch])))
    order = generator.permutation(len(lengths)).tolist()

    def stream(indices: list[int]) -> tuple[list[int], int]:
        starts, position = [], 0
        for k, index in enumerate(indices):
            starts.append(position)
            position += lengths[index] + (1 if boundary and k < len(indices) - 1 else 0)
        return [*starts, position], position

    def rows_of(tokens: int) -> int:
        return -(-(tokens - 1) // block) if tokens >= 2 else 0

    if layout == "global":
        starts, tokens = stream(order)
        rows = rows_of(tokens)
        return (
            order,
            [lengths[i] for i in order],
            starts,
            rows,
            -(-rows // (batch_size * world_size)),
        )
    own = order[rank::world_size]
    starts, tokens = stream(own)
    rows = rows_of(tokens)
    batches = -(-rows // batch_size)
    if even and world_size > 1:
        batches = min(
            -(-rows_of(stream(order[r::world_size])[1]) // batch_size) for r in range(world_size)
        )
    return own, [lengths[i] for i in own], starts, rows, batches


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from([0, 1, 2, 5, 9, 300, 70_000]), max_size=40),
    st.integers(0, 2**40),
    st.integers(0, 3),
    st.integers(1, 4),
    st.data(),
    st.booleans(),
    st.integers(1, 50),
    st.integers(1, 3),
    st.sampled_from(["per-rank", "global"]),
    st.booleans(),
)
def test_plans_match_the_reference_definition(
    lengths: list[int],
    seed: int,
    epoch: int,
    world_size: int,
    data: st.DataObject,
    boundary: bool,
    block: int,
    batch_size: int,
    layout: str,
    even: bool,
) -> None:
    rank = data.draw(st.integers(0, world_size - 1))
    documents = [np.full(n, 7, dtype=np.int64) for n in lengths]
    options: dict[str, Any] = {
        "rank": rank,
        "world_size": world_size,
        "block": block,
        "batch_size": batch_size,
        "seed": seed,
        "boundary_id": 1 if boundary else None,
        "layout": layout,
        "even_batches": even,
        "order": "permutation",
    }
    corpus = StreamingCorpus(documents, **options)
    plan = corpus._plan(epoch)
    indices, own_lengths, starts, rows, batches = _reference_plan(
        lengths, seed=seed, epoch=epoch, rank=rank, world_size=world_size, boundary=boundary,
        block=block, batch_size=batch_size, layout=layout, even=even,
    )  # fmt: skip
    assert plan.layout.indices.dtype == np.int64 and plan.layout.indices.tolist() == indices
    assert plan.layout.lengths.dtype == np.int64 and plan.layout.lengths.tolist() == own_lengths
    assert plan.layout.starts.dtype == np.int64 and plan.layout.starts.tolist() == starts
    assert (plan.rows, plan.num_batches) == (rows, batches)
    if layout == "per-rank":  # the rank's share only, not a view of every rank's order
        assert plan.layout.indices.base is None


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(0, 30), min_size=1, max_size=25),
    st.integers(0, 1000),
    st.integers(0, 3),
    st.booleans(),
)
def test_mixture_source_layouts_match_the_reference_definition(
    lengths: list[int], seed: int, epoch: int, boundary: bool
) -> None:
    documents = [np.full(n, 3, dtype=np.int64) for n in lengths] + [np.arange(2)]
    mixture = Mixture(
        [MixtureSource(documents, 1.0, "only")],
        block=4,
        seed=seed,
        boundary_id=1 if boundary else None,
    )
    rows = mixture.rows[0]
    layout = rows.layout(epoch)
    indices, own_lengths, starts, _, _ = _reference_plan(
        [*lengths, 2], seed=source_seed(seed, "only", rows.fingerprint), epoch=epoch, rank=0,
        world_size=1, boundary=boundary, block=4, batch_size=1, layout="global", even=False,
    )  # fmt: skip
    assert layout.indices.tolist() == indices
    assert layout.lengths.dtype == np.int64 and layout.lengths.tolist() == own_lengths
    assert layout.starts.tolist() == starts
    assert rows.stream_tokens == starts[-1]
