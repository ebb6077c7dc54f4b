"""VariableLengthStream: power-of-two buckets, one bucket per batch, exact and resumable."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.data import ResumableStream, VariableLengthStream
from mixle.errors import ArgumentError, StateMismatchError


def _documents(lengths: list[int], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 1000, size=n) for n in lengths]


def _long_tailed(count: int = 200, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return _documents([int(n) + 1 for n in np.exp(rng.normal(3.5, 1.2, size=count))], seed)


def _brute_force_pieces(
    lengths: list[int], min_length: int, block: int, remainder: str
) -> list[tuple[int, int, int, int]]:
    """``(document, start, targets, bucket length)`` of every piece, cut greedily."""
    buckets = []
    length = block
    while length >= min_length:
        buckets.append(length)
        length //= 2
    pieces = []
    for document, n in enumerate(lengths):
        left, start = max(n - 1, 0), 0
        for length in buckets:
            while left >= length and (length == block or left < 2 * length):
                pieces.append((document, start, length, length))
                start, left = start + length, left - length
        if left and remainder == "pad":
            pieces.append((document, start, left, min_length))
    return pieces


def _epoch_pieces(streams: list[VariableLengthStream], epoch: int) -> list[tuple[int, ...]]:
    """Every real row of ``epoch`` over the ranks' ``streams``: its piece and bucket,
    checking each row's tokens against its document."""
    documents = streams[0].documents
    seen = []
    for index in range(streams[0].epoch_size(epoch)):
        for stream in streams:
            batch = stream.read(epoch, index)
            width = batch.context.shape[1]
            assert batch.context.size == stream.tokens_per_batch // stream.world_size
            for row in range(batch.num_rows):
                mask = batch.loss_mask[row]
                targets = int(mask.sum())
                if not targets:
                    assert (batch.document_ids[row] == -1).all()
                    continue
                assert mask[:targets].all()  # real targets first, then padding
                document = int(batch.document_ids[row, 0])
                start = int(batch.position_ids[row, 0])
                tokens = np.asarray(documents[document])
                assert np.array_equal(batch.context[row, :targets], tokens[start : start + targets])
                assert np.array_equal(
                    batch.targets[row, :targets], tokens[start + 1 : start + targets + 1]
                )
                seen.append((document, start, targets, width))
    return seen


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 90), min_size=1, max_size=30),
    min_exponent=st.integers(0, 3),
    block_exponent=st.integers(3, 5),
    world_size=st.sampled_from([1, 2]),
    curriculum=st.sampled_from(["natural", "grow_p2"]),
    remainder=st.sampled_from(["pad", "drop"]),
)
def test_every_piece_exactly_once_per_epoch(
    lengths: list[int],
    min_exponent: int,
    block_exponent: int,
    world_size: int,
    curriculum: str,
    remainder: str,
) -> None:
    min_length, block = 2**min_exponent, 2**block_exponent
    documents = _documents(lengths)
    options = {
        "block": block,
        "min_length": min_length,
        "tokens_per_batch": 2 * block * world_size,
        "curriculum": curriculum,
        "remainder": remainder,
        "seed": 3,
    }
    try:
        streams = [
            VariableLengthStream(documents, rank=rank, world_size=world_size, **options)
            for rank in range(world_size)
        ]
    except ArgumentError as error:  # grow_p2 asks for every bucket; some are empty
        assert curriculum == "grow_p2" and "has no document pieces" in str(error)
        return
    expected = sorted(_brute_force_pieces(lengths, min_length, block, remainder))
    for epoch in (0, 1):
        assert sorted(_epoch_pieces(streams, epoch)) == expected


def test_buckets_rows_and_remainder() -> None:
    documents = _documents([1, 2, 70, 200])  # targets 0, 1, 69 = 64 + 4 + 1, 199 = 3 x 64 + 4 + 3
    stream = VariableLengthStream(documents, block=64, min_length=4, tokens_per_batch=128)
    assert stream.bucket_lengths == (4, 8, 16, 32, 64)
    assert stream.pieces_per_bucket == (5, 0, 0, 0, 4)  # 2 of 4 targets, 3 padded tails
    assert [stream.rows_per_batch(k) for k in range(5)] == [32, 16, 8, 4, 2]
    assert stream.batches_per_bucket == (1, 0, 0, 0, 2)
    dropped = VariableLengthStream(
        documents, block=64, min_length=4, tokens_per_batch=128, remainder="drop"
    )
    assert dropped.pieces_per_bucket == (2, 0, 0, 0, 4)


def test_curriculum_changes_only_the_order_and_epochs_differ() -> None:
    documents = _long_tailed()
    options = {"block": 64, "min_length": 8, "tokens_per_batch": 256, "seed": 1}
    natural = VariableLengthStream(documents, **options)
    grow = VariableLengthStream(documents, curriculum="grow_p2", **options)
    assert natural.batches_per_bucket == grow.batches_per_bucket
    size = natural.epoch_size(0)
    orders = [[s.bucket_of(e, i) for i in range(size)] for s in (natural, grow) for e in (0, 1)]
    assert orders[0] != orders[1] and orders[0] != orders[2]
    assert all(sorted(order) == sorted(orders[0]) for order in orders)
    again = VariableLengthStream(documents, **options)
    assert [again.bucket_of(0, i) for i in range(size)] == orders[0]
    reseeded = VariableLengthStream(documents, **{**options, "seed": 2})
    assert [reseeded.bucket_of(0, i) for i in range(size)] != orders[0]


def _same(a: object, b: object) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a.as_tuple(), b.as_tuple(), strict=True))  # type: ignore[attr-defined]


@settings(max_examples=6, deadline=None)
@given(stop=st.integers(0, 80), curriculum=st.sampled_from(["natural", "grow_p2"]))
def test_resume_at_any_batch_is_bitwise(stop: int, curriculum: str) -> None:
    documents = _long_tailed(120)
    options = {"block": 32, "min_length": 4, "tokens_per_batch": 128, "curriculum": curriculum}
    reference = VariableLengthStream(documents, **options)
    iterator = reference.batches()
    expected = [next(iterator) for _ in range(stop + 3)]
    first = VariableLengthStream(documents, **options)
    batches = first.batches()
    for _ in range(stop):
        next(batches)
    state = json.loads(json.dumps(first.state_dict()))
    resumed = VariableLengthStream(documents, **options)
    resumed.load_state_dict(state)
    assert resumed.cursor == first.cursor
    for want, got in zip(expected[stop:], resumed.batches(), strict=False):
        assert _same(want, got)


def test_elastic_world_size_with_the_same_global_tokens() -> None:
    documents = _long_tailed(150)
    options = {"block": 32, "min_length": 8, "tokens_per_batch": 256, "curriculum": "grow_p2"}
    single = VariableLengthStream(documents, **options)
    iterator = single.batches()
    for _ in range(7):
        next(iterator)
    state = single.state_dict()
    world = 4
    ranks = [
        VariableLengthStream(documents, rank=r, world_size=world, **options) for r in range(world)
    ]
    for stream in ranks:
        stream.load_state_dict(state)
    parts = [stream.batches() for stream in ranks]
    for batch in (next(iterator) for _ in range(12)):
        pieces = [next(part) for part in parts]
        for name in ("context", "targets", "loss_mask", "document_ids", "position_ids"):
            joined = np.concatenate([getattr(piece, name) for piece in pieces])
            assert np.array_equal(joined, getattr(batch, name))
    assert ranks[0].state_dict() == single.state_dict()


def test_state_of_another_curriculum_or_token_count_is_refused_by_field() -> None:
    documents = _long_tailed(80)
    options = {"block": 32, "min_length": 8, "tokens_per_batch": 128}
    state = VariableLengthStream(documents, **options).state_dict()
    grow = VariableLengthStream(documents, curriculum="grow_p2", **options)
    with pytest.raises(StateMismatchError, match="curriculum in checkpoint: 'natural'"):
        grow.load_state_dict(state)
    wider = VariableLengthStream(documents, **{**options, "tokens_per_batch": 256})
    with pytest.raises(StateMismatchError, match="tokens_per_batch"):
        wider.load_state_dict(state)
    with pytest.raises(StateMismatchError, match="version"):
        VariableLengthStream(documents, **options).load_state_dict({**state, "version": 9})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"min_length": 24}, r"`min_length` must be a power of two\. Got 24"),
        ({"min_length": 64}, "would name no bucket"),
        ({"block": 48}, r"`block` must be a power of two\. Got 48"),
        ({"tokens_per_batch": 48}, r"multiple of block x world_size = 32 x 1 = 32"),
        ({"tokens_per_batch": 32, "world_size": 2}, r"32 x 2 = 64"),
        ({"curriculum": "grow"}, r"`curriculum` must be one of natural, grow_p2"),
        ({"remainder": "keep"}, r"`remainder` must be one of pad, drop"),
        ({"curriculum": "grow_p2", "num_cycles": 0}, r"`num_cycles` must be a positive"),
    ],
)
def test_bad_arguments_are_named(options: dict[str, object], message: str) -> None:
    arguments = {"block": 32, "min_length": 8, "tokens_per_batch": 64, **options}
    with pytest.raises(ArgumentError, match=message):
        VariableLengthStream(_long_tailed(40), **arguments)  # type: ignore[arg-type]


def test_grow_p2_names_the_empty_bucket_it_asks_for() -> None:
    documents = _documents([40] * 10)  # 39 targets = 32 + 4 + 2 + 1: no piece of 8 or 16
    with pytest.raises(ArgumentError, match=r"bucket 1 \(length 8\), bucket 2 \(length 16\)"):
        VariableLengthStream(
            documents, block=32, min_length=4, tokens_per_batch=64, curriculum="grow_p2"
        )
    natural = VariableLengthStream(documents, block=32, min_length=4, tokens_per_batch=64)
    assert natural.batches_per_bucket[1:3] == (0, 0)


def test_read_past_the_epoch_is_refused() -> None:
    stream = VariableLengthStream(_long_tailed(40), block=32, min_length=8, tokens_per_batch=64)
    assert isinstance(stream, ResumableStream)
    with pytest.raises(ArgumentError, match="epoch_size"):
        stream.read(0, stream.epoch_size(0))
    assert stream.next_cursor(0, stream.epoch_size(0) - 1, 1) == (1, 0)
