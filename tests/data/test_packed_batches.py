"""Consecutive batches read with one gather are the batches read one by one, bitwise.

``read_packed_batches`` writes each batch's tokens into an array of its own (one gather
into a ``SplitOutput``, each edge token written into both neighbours): documents longer
than a batch, boundary tokens at an edge, rows past the stream's end; and the fallback
(compiled gather, or a source without ``gathers_split_output``) the same.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle._gather import (
    SplitOutput,
    gather_pieces,
    gather_pieces_numpy,
    numba_available,
    set_gather_backend,
)
from mixle.corpus import CorpusWriter, open_corpus
from mixle.data._documents import SequenceDocuments
from mixle.data._packed_rows import read_packed_batches, read_packed_rows
from mixle.data._packing import StreamLayout


@settings(max_examples=150, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 90), min_size=1, max_size=25),
    block=st.integers(1, 12),
    counts=st.lists(st.integers(1, 4), min_size=1, max_size=6),
    first_row=st.integers(0, 60),
    boundary=st.booleans(),
    document_ids=st.booleans(),
    backend=st.sampled_from(["numpy", "auto"]),  # auto: numba when installed
    split=st.booleans(),
)
def test_batches_read_together_are_the_batches_read_alone(
    lengths: list[int],
    block: int,
    counts: list[int],
    first_row: int,
    boundary: bool,
    document_ids: bool,
    backend: str,
    split: bool,
) -> None:
    rng = np.random.default_rng(len(lengths) * 97 + block)
    items = [rng.integers(0, 60_000, n, dtype=np.uint16) for n in lengths]
    # With `gathers_split_output`, one gather into the batches' own arrays; without, one
    # scratch buffer copied into them.
    documents = _Split(items) if split else SequenceDocuments(items)
    order = rng.permutation(len(items)).astype(np.int64)
    layout = StreamLayout.build(order, np.array(lengths, np.int64)[order], boundary)
    options: dict[str, Any] = dict(block=block, pad_id=7, boundary_id=5 if boundary else None)
    previous = set_gather_backend(backend)
    try:
        together = read_packed_batches(
            documents, layout, first_row, counts, document_ids=document_ids, **options
        )
        row = first_row
        for rows, count in zip(together, counts, strict=True):
            alone = read_packed_rows(
                documents, layout, row, count, document_ids=document_ids, **options
            )
            assert rows.real == alone.real
            # The batch's own buffer, batch-sized (no joint buffer behind it).
            assert rows.buffer.base is None and rows.buffer.size == count * block + 1
            for name in ("buffer", "mask", "document_ids", "position_ids"):
                got, want = getattr(rows, name), getattr(alone, name)
                if want is None:
                    assert got is None
                    continue
                assert got.dtype == want.dtype
                np.testing.assert_array_equal(got, want)
            row += count
    finally:
        set_gather_backend(previous)
    for one, other in itertools.combinations(together, 2):
        assert not np.shares_memory(one.buffer, other.buffer)


class _Split(SequenceDocuments):
    """In-memory documents whose ``gather_into`` (``gather_by_take``) takes a
    ``SplitOutput``."""

    gathers_split_output = True


def test_batches_of_a_sharded_corpus_on_disk_read_together_are_the_batches_alone(
    tmp_path: Path,
) -> None:
    # Real memory-mapped shards (a few documents each): the split pieces of one gather
    # cross shards; long documents span several batch edges.
    rng = np.random.default_rng(4)
    lengths = rng.integers(0, 400, 120)
    with CorpusWriter(tmp_path / "corpus", shard_max_bytes=2_000, durable=False) as writer:
        for n in lengths:
            writer.add(rng.integers(0, 60_000, int(n), dtype=np.uint16))
    corpus = open_corpus(tmp_path / "corpus")
    for documents, kept in ((corpus, lengths), (corpus[1::2], lengths[1::2])):  # a view too
        assert documents.gathers_split_output
        _check_batches_together(documents, kept, rng)


def _check_batches_together(documents: Any, lengths: np.ndarray, rng: np.random.Generator) -> None:
    order = rng.permutation(len(lengths)).astype(np.int64)
    for boundary in (False, True):
        layout = StreamLayout.build(order, lengths[order].astype(np.int64), boundary)
        options: dict[str, Any] = dict(block=64, pad_id=0, boundary_id=9 if boundary else None)
        rows = int(layout.stream_tokens) // 64
        for first_row in (0, 5, rows - 20, rows - 3):
            counts = [4, 4, 4, 4, 4, 4, 4, 4]
            together = read_packed_batches(
                documents, layout, first_row, counts, document_ids=True, **options
            )
            for k, part in enumerate(together):
                alone = read_packed_rows(
                    documents, layout, first_row + 4 * k, 4, document_ids=True, **options
                )
                assert part.buffer.base is None and part.buffer.size == 4 * 64 + 1
                np.testing.assert_array_equal(part.buffer, alone.buffer)
                np.testing.assert_array_equal(part.mask, alone.mask)
                np.testing.assert_array_equal(part.document_ids, alone.document_ids)
                np.testing.assert_array_equal(part.position_ids, alone.position_ids)


@settings(max_examples=150, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 40), min_size=1, max_size=12),
    sizes=st.lists(st.integers(1, 30), min_size=1, max_size=6),
    gaps=st.lists(st.integers(0, 2), min_size=12, max_size=12),
    strided=st.booleans(),
    data=st.data(),
)
def test_a_split_output_gets_what_one_array_gets(
    lengths: list[int],
    sizes: list[int],
    gaps: list[int],
    strided: bool,
    data: st.DataObject,
) -> None:
    # Arrays over one range, each overlapping the next by one position (batch edges);
    # pieces of any documents, one after another or with slots between (boundaries).
    rng = np.random.default_rng(sum(lengths) + len(sizes))
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = rng.integers(0, 60_000, int(offsets[-1]) * 2, dtype=np.uint16)
    tokens = tokens[::2] if strided else tokens[: int(offsets[-1])]
    starts = [0] * len(sizes)
    for k in range(1, len(sizes)):
        starts[k] = starts[k - 1] + sizes[k - 1] - 1
    size = starts[-1] + sizes[-1] - data.draw(st.integers(0, sizes[-1] - 1))
    local, begins, ends, at = [], [], [], []
    position = 0
    for k, n in enumerate(lengths):
        begin = data.draw(st.integers(0, n))
        end = data.draw(st.integers(begin, n))
        position += gaps[k]
        if position + end - begin > size:
            break
        local.append(k)
        begins.append(begin)
        ends.append(end)
        at.append(position)
        position += end - begin
    piece_local, piece_begins, piece_ends, piece_at = (
        np.array(v, dtype=np.int64) for v in (local, begins, ends, at)
    )
    pieces = (piece_local, piece_begins, piece_ends, piece_at)
    want = np.full(size, -5, dtype=np.int64)
    arrays = [np.full(n, -5, dtype=np.int64) for n in sizes]
    output = SplitOutput(arrays, starts, size)
    # Values before the gather: written, then the slots between pieces put (pending).
    want[:] = np.arange(size) % 7
    output.write(0, want.copy())
    covered = np.zeros(size, dtype=bool)
    for position, begin, end in zip(at, begins, ends, strict=True):
        covered[position : position + end - begin] = True
    slots = np.flatnonzero(~covered).astype(np.int64)
    want[slots] = 4
    output.put(slots, 4)
    assert gather_pieces_numpy(want, tokens, offsets, *pieces, len(lengths)) == -1
    assert gather_pieces(output, tokens, offsets, *pieces, len(lengths)) == -1
    output.flush()  # what `put` left pending
    for array, start in zip(arrays, starts, strict=True):
        inside = want[start : start + array.shape[0]]
        np.testing.assert_array_equal(array[: inside.shape[0]], inside)
        assert (array[inside.shape[0] :] == -5).all()  # past `size`: not written
    np.testing.assert_array_equal(output.take(np.arange(size, dtype=np.int64)), want)


def test_a_numba_gather_reads_batches_together_as_alone() -> None:
    if not numba_available():
        return
    rng = np.random.default_rng(9)
    items = [rng.integers(0, 60_000, int(n), dtype=np.uint16) for n in rng.integers(0, 300, 80)]
    documents = SequenceDocuments(items)
    layout = StreamLayout.build(
        np.arange(80, dtype=np.int64), np.array([len(i) for i in items], np.int64), True
    )
    options: dict[str, Any] = dict(block=32, pad_id=1, boundary_id=2, document_ids=True)
    previous = set_gather_backend("numba")
    try:
        together = read_packed_batches(documents, layout, 3, [4] * 8, **options)
    finally:
        set_gather_backend(previous)
    for k, rows in enumerate(together):
        alone = read_packed_rows(documents, layout, 3 + 4 * k, 4, **options)
        np.testing.assert_array_equal(rows.buffer, alone.buffer)
        np.testing.assert_array_equal(rows.document_ids, alone.document_ids)
