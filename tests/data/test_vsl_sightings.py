"""``sightings`` of a ``VariableLengthStream`` against brute force: iterate every batch
of every rank and read each trained target's document and position from the batch's
``document_ids`` / ``position_ids`` under its ``loss_mask`` (nothing of the inversion
under test is shared)."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.data import VariableLengthStream, sightings
from mixle.data._sightings import closed_form
from mixle.errors import ArgumentError

Key = tuple[int, int, int, int, int]  # epoch, step, rank, row, document


def _documents(lengths: list[int]) -> list[np.ndarray]:
    return [np.arange(n, dtype=np.int64) + 1 for n in lengths]


def _brute(options: dict, world: int, epochs: int) -> dict[Key, tuple[int, int]]:
    """Every (epoch, step, rank, row, document) with the document's trained tokens."""
    found: dict[Key, list[int]] = defaultdict(list)
    for rank in range(world):
        stream = VariableLengthStream(rank=rank, world_size=world, **options)
        per_epoch = stream.epoch_size(0)
        batches = stream.batches()
        for step in range(1, epochs * per_epoch + 1):
            batch = next(batches)
            assert batch.loss_mask is not None and batch.document_ids is not None
            assert batch.position_ids is not None
            for row in range(batch.loss_mask.shape[0]):
                mask = batch.loss_mask[row]
                for document, position in zip(
                    batch.document_ids[row][mask].tolist(),
                    batch.position_ids[row][mask].tolist(),
                    strict=True,
                ):
                    # The target of context position p is the document's token p + 1.
                    key = ((step - 1) // per_epoch, step, rank, row, document)
                    found[key].append(position + 1)
    spans = {}
    for key, positions in found.items():
        low, high = min(positions), max(positions) + 1
        assert sorted(positions) == list(range(low, high)), "a row trains a contiguous range"
        spans[key] = (low, high)
    return spans


def _inverted(options: dict, world: int, epochs: int, documents: int) -> dict:
    stream = VariableLengthStream(rank=world - 1, world_size=world, **options)
    assert closed_form(stream)
    spans = {}
    for document in range(documents):
        listed = sightings(stream, document, epochs=epochs)
        assert listed == sorted(listed, key=lambda s: (s.step, s.rank, s.row, s.start))
        for s in listed:
            spans[s.epoch, s.step, s.rank, s.row, s.document] = (s.start, s.stop)
    return spans


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 40), min_size=1, max_size=12),
    world=st.integers(1, 3),
    min_length=st.sampled_from([2, 4, 8]),
    curriculum=st.sampled_from(["natural", "grow_p2"]),
    remainder=st.sampled_from(["pad", "drop"]),
    seed=st.integers(0, 3),
)
def test_sightings_match_every_batch_of_every_rank(
    lengths: list[int], world: int, min_length: int, curriculum: str, remainder: str, seed: int
) -> None:
    options = {
        "documents": _documents(lengths),
        "block": 8,
        "min_length": min_length,
        "tokens_per_batch": 8 * world * 2,
        "curriculum": curriculum,
        "num_cycles": 2,
        "remainder": remainder,
        "seed": seed,
    }
    try:
        VariableLengthStream(**options)
    except ArgumentError as exc:  # grow_p2 with an empty bucket is refused by name
        assert curriculum == "grow_p2" and "has no document pieces" in str(exc)
        return
    assert _inverted(options, world, 2, len(lengths)) == _brute(options, world, 2)


def test_a_long_document_is_seen_once_per_piece_per_epoch() -> None:
    # 70 tokens: 69 targets = 8 pieces of 8, then 4 and 1 (padded into bucket 2).
    stream = VariableLengthStream(
        _documents([70, 3, 12]), block=8, min_length=2, tokens_per_batch=16, curriculum="grow_p2"
    )
    found = sightings(stream, 0, epochs=[1])
    assert {s.epoch for s in found} == {1}
    assert sorted((s.start, s.stop) for s in found) == [
        *((8 * k + 1, 8 * k + 9) for k in range(8)),
        (65, 69),
        (69, 70),
    ]
    assert all(s.step > stream.epoch_size(0) for s in found)


def test_what_cannot_be_inverted_is_named() -> None:
    docs = _documents([5, 9, 4])
    dropped = VariableLengthStream(
        docs, block=4, min_length=4, tokens_per_batch=8, remainder="drop"
    )
    assert sightings(dropped, 2) == []  # 3 targets below the smallest bucket: dropped
    with pytest.raises(ArgumentError, match="a VariableLengthStream has none"):
        sightings(dropped, 0, source="a")
    with pytest.raises(ArgumentError, match=r"`document` must be a document index \(0 to 2\)"):
        sightings(dropped, 3)
    bandit = VariableLengthStream(
        docs, block=4, min_length=2, tokens_per_batch=8, curriculum="bandit"
    )
    with pytest.raises(ArgumentError, match="curriculum='bandit'"):
        sightings(bandit, 0)
