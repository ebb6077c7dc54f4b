"""``sightings`` against brute force: iterate every batch of every rank and decode each
trained target back to its document.

Every token of the corpus is unique (``offset + position + 1``; boundaries and padding
are 0), so a target names its document and position without any of the plan's
arithmetic: the brute force shares nothing with the inversion under test.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.data import (
    BlockSchedule,
    Mixture,
    MixturePhase,
    MixtureSource,
    Sighting,
    StreamingCorpus,
    sightings,
)
from mixle.data._mixture_sightings import global_row
from mixle.data._schedule import MixtureSchedule
from mixle.data._sightings import closed_form
from mixle.errors import ArgumentError, ArgumentTypeError

Key = tuple[int, int, int, int, int]  # epoch, step, rank, row, document


def _corpus(lengths: list[int], base: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    """Documents of unique tokens and the cumulative offsets that decode them."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    offsets += base
    docs = [np.arange(o, o + n, dtype=np.int64) + 1 for o, n in zip(offsets, lengths, strict=False)]
    return docs, offsets


def _decoded(targets: np.ndarray, mask: np.ndarray, offsets: np.ndarray) -> dict[int, list[int]]:
    """Document -> positions of the trained targets of one row (boundaries dropped)."""
    tokens = targets[mask]
    tokens = tokens[(tokens > offsets[0]) & (tokens <= offsets[-1])] - 1
    documents = np.searchsorted(offsets, tokens, side="right") - 1
    found: dict[int, list[int]] = defaultdict(list)
    for document, token in zip(documents.tolist(), tokens.tolist(), strict=True):
        found[document].append(token - int(offsets[document]))
    return found


def _ranges(found: dict[Key, list[int]]) -> dict[Key, tuple[int, int]]:
    result = {}
    for key, positions in found.items():
        low, high = min(positions), max(positions) + 1
        assert sorted(positions) == list(range(low, high)), "a row trains a contiguous range"
        result[key] = (low, high)
    return result


def _brute_streaming(options: dict, world: int, epochs: int, offsets: np.ndarray) -> dict:
    found: dict[Key, list[int]] = defaultdict(list)
    for rank in range(world):
        stream = StreamingCorpus(rank=rank, world_size=world, **options)
        before = 0
        for epoch in range(epochs):
            for index, batch in enumerate(stream.iter_epoch(epoch)):
                mask = batch.loss_mask
                assert mask is not None
                for row in range(batch.targets.shape[0]):
                    decoded = _decoded(batch.targets[row], mask[row], offsets)
                    for document, positions in decoded.items():
                        found[(epoch, before + index + 1, rank, row, document)] += positions
            before += stream.num_batches(epoch)
    return _ranges(found)


def _as_table(found: list[Sighting]) -> dict[Key, tuple[int, int]]:
    table = {(s.epoch, s.step, s.rank, s.row, s.document): (s.start, s.stop) for s in found}
    assert len(table) == len(found), "one sighting per (epoch, step, rank, row, document)"
    return table


layouts = st.sampled_from(
    [
        ("per-rank", "permutation", "concatenate"),
        ("global", "permutation", "concatenate"),
        ("global", "blocks", "concatenate"),
        ("global", "permutation", "best_fit"),
        ("global", "blocks", "best_fit"),
    ]
)


streaming_cases = given(
    lengths=st.lists(st.integers(0, 23), min_size=1, max_size=14),
    world=st.integers(1, 4),
    batch_size=st.integers(1, 3),
    block=st.integers(3, 7),
    boundary=st.booleans(),
    shape=layouts,
    seed=st.integers(0, 3),
)


def _streaming_matches_brute_force(
    lengths: list[int],
    world: int,
    batch_size: int,
    block: int,
    boundary: bool,
    shape: tuple[str, str, str],
    seed: int,
) -> None:
    layout, order, packing = shape
    docs, offsets = _corpus(lengths)
    options: dict = dict(
        documents=docs,
        block=block,
        batch_size=batch_size,
        seed=seed,
        boundary_id=0 if boundary else None,
        layout=layout,
        order=order,
        packing=packing,
    )
    if order == "blocks":
        options.update(block_documents=min(3, len(docs)), window_blocks=min(2, -(-len(docs) // 3)))
    epochs = 2
    expected = _brute_streaming(options, world, epochs, offsets)
    stream = StreamingCorpus(rank=world - 1, world_size=world, **options)
    found: dict[Key, tuple[int, int]] = {}
    for document in range(len(docs)):
        listed = sightings(stream, document, epochs=epochs)
        assert listed == sorted(listed, key=lambda s: (s.step, s.rank, s.row, s.start))
        found.update(_as_table(listed))
    assert found == expected
    assert closed_form(stream) == (order == "blocks")


test_streaming_corpus_matches_brute_force = settings(max_examples=12, deadline=None)(
    streaming_cases(_streaming_matches_brute_force)
)
test_streaming_corpus_matches_brute_force_many = pytest.mark.slow(
    settings(max_examples=200, deadline=None)(streaming_cases(_streaming_matches_brute_force))
)


def test_epochs_may_be_chosen_by_number() -> None:
    docs, _ = _corpus([5, 9, 4, 7, 3, 8])
    stream = StreamingCorpus(docs, rank=0, world_size=2, block=4, batch_size=1, layout="global")
    every = sightings(stream, 1, epochs=3)
    assert sightings(stream, 1, epochs=[2, 0]) == [s for s in every if s.epoch != 1]
    assert {s.epoch for s in every} == {0, 1, 2}


mixture_cases = given(
    sizes=st.tuples(
        st.lists(st.integers(1, 17), min_size=2, max_size=8),
        st.lists(st.integers(1, 17), min_size=2, max_size=8),
    ),
    weights=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    world=st.integers(1, 3),
    batch_size=st.integers(1, 3),
    block=st.integers(2, 6),
    order=st.sampled_from(["blocks", "permutation"]),
    phase=st.booleans(),
)


def _mixture_matches_brute_force(
    sizes: tuple[list[int], list[int]],
    weights: tuple[int, int],
    world: int,
    batch_size: int,
    block: int,
    order: str,
    phase: bool,
) -> None:
    corpora = [_corpus(sizes[0]), _corpus(sizes[1], base=10_000)]
    sources = [
        MixtureSource(docs, weight, name)
        for (docs, _), weight, name in zip(corpora, weights, ["a", "b"], strict=True)
    ]
    phases = [MixturePhase(7, {"a": 1.0, "b": 3.0})] if phase else []
    mixture = Mixture(
        sources,
        block=block,
        batch_size=batch_size,
        world_size=world,
        boundary_id=0,
        order=order,
        phases=phases,
    )
    epochs = 2
    per_epoch = [rows.rows_per_epoch for rows in mixture.rows]
    total = 0
    while any(
        int(n) < epochs * r
        for n, r in zip(mixture.schedule.counts_before(total), per_epoch, strict=True)
    ):
        total += mixture.global_batch_size
    batch = mixture.read_rows(0, total)
    mask, source_ids = batch.loss_mask, batch.source_ids
    assert mask is not None and source_ids is not None
    owners, local = mixture.schedule.lookup(np.arange(total, dtype=np.int64))
    expected: list[dict[Key, list[int]]] = [defaultdict(list), defaultdict(list)]
    group = mixture.global_batch_size
    for k in range(total):
        source = int(source_ids[k])
        assert source == owners[k]
        epoch = int(local[k]) // per_epoch[source]
        if epoch >= epochs:
            continue
        step, (rank, row) = k // group + 1, divmod(k % group, batch_size)
        decoded = _decoded(batch.targets[k], mask[k], corpora[source][1])
        for document, positions in decoded.items():
            expected[source][(epoch, step, rank, row, document)] += positions
    for source, name in enumerate(["a", "b"]):
        found: dict[Key, tuple[int, int]] = {}
        for document in range(len(sizes[source])):
            listed = sightings(mixture, document, epochs=epochs, source=name)
            assert all(s.source == name for s in listed)
            found.update(_as_table(listed))
        assert found == _ranges(expected[source])


test_mixture_matches_brute_force = settings(max_examples=8, deadline=None)(
    mixture_cases(_mixture_matches_brute_force)
)
test_mixture_matches_brute_force_many = pytest.mark.slow(
    settings(max_examples=100, deadline=None)(mixture_cases(_mixture_matches_brute_force))
)


def test_global_row_inverts_the_schedule_and_knows_an_unreached_row() -> None:
    schedule = MixtureSchedule([0, 50], [[1.0, 2.0], [0.0, 1.0]])
    owners, local = schedule.lookup(np.arange(200, dtype=np.int64))
    for k in range(200):
        assert global_row(schedule, int(owners[k]), int(local[k])) == k
    # Source 0 takes its last rows before row 50: its row 17 never comes.
    assert int(schedule.counts_before(50)[0]) == 17
    assert global_row(schedule, 0, 17) is None


def test_bad_input_is_named() -> None:
    docs, _ = _corpus([5, 9, 4])
    stream = StreamingCorpus(docs, rank=0, world_size=1, block=4, batch_size=1)
    with pytest.raises(ArgumentError, match=r"`document` must be a document index \(0 to 2\)"):
        sightings(stream, 3)
    with pytest.raises(ArgumentError, match="`epochs` must be a positive integer"):
        sightings(stream, 0, epochs=0)
    with pytest.raises(ArgumentError, match="nonnegative"):
        sightings(stream, 0, epochs=[-1])
    with pytest.raises(ArgumentTypeError, match="`document` must be an integer"):
        sightings(stream, 1.0)  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="a StreamingCorpus has none"):
        sightings(stream, 0, source="a")
    mixture = Mixture([MixtureSource(docs, 1.0, "a")], block=4)
    with pytest.raises(ArgumentError, match="`source` must name"):
        sightings(mixture, 0)
    with pytest.raises(ArgumentError, match=r"one of \['a'\]"):
        sightings(mixture, 0, source="b")
    with pytest.raises(ArgumentTypeError, match="`stream` must be"):
        sightings(docs, 0)  # type: ignore[arg-type]


def _repeat_some(order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """A curriculum that trains the first three documents of the order twice."""
    return np.concatenate([order, order[:3]])


@pytest.mark.parametrize("layout", ["per-rank", "global"])
def test_a_selector_that_repeats_documents_is_seen_each_time(layout: str) -> None:
    lengths = [5, 9, 4, 7, 3, 8, 6, 2]
    docs, offsets = _corpus(lengths)
    options: dict = dict(
        documents=docs, block=4, batch_size=2, layout=layout, sequence_selector=_repeat_some
    )
    expected = _brute_streaming(options, 2, 2, offsets)
    stream = StreamingCorpus(rank=0, world_size=2, **options)
    found: dict[Key, tuple[int, int]] = {}
    for document in range(len(docs)):
        found.update(_as_table(sightings(stream, document, epochs=2)))
    assert found == expected


@settings(max_examples=15, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 30), min_size=1, max_size=12),
    world=st.integers(1, 3),
    batch_size=st.sampled_from([2, 4]),
    block=st.sampled_from([2, 4]),
    batches=st.integers(1, 3),
    order=st.sampled_from(["permutation", "blocks", "per-rank"]),
    seed=st.integers(0, 3),
)
def test_a_block_schedule_matches_brute_force(
    lengths: list[int], world: int, batch_size: int, block: int, batches: int, order: str, seed: int
) -> None:
    # The first `batches` global batches of the run in rows of `block`, then of 2 x block
    # (order "per-rank": the per-rank layout, each rank's own stream in phases).
    docs, offsets = _corpus(lengths)
    until = batches * world * batch_size * block
    layout = "per-rank" if order == "per-rank" else "global"
    order = "permutation" if order == "per-rank" else order
    options: dict = dict(
        documents=docs,
        block=block,
        batch_size=batch_size,
        seed=seed,
        boundary_id=0,
        layout=layout,
        order=order,
        block_schedule=BlockSchedule.parse(f"{block}:{until},{2 * block}"),
    )
    if order == "blocks":
        options.update(block_documents=min(3, len(docs)), window_blocks=min(2, -(-len(docs) // 3)))
    expected = _brute_streaming(options, world, 2, offsets)
    stream = StreamingCorpus(rank=0, world_size=world, **options)
    found: dict[Key, tuple[int, int]] = {}
    for document in range(len(docs)):
        found.update(_as_table(sightings(stream, document, epochs=2)))
    assert found == expected
