"""The windowed epoch orders: the hierarchical blocks order and the seed's permutation."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.corpus import CorpusWriter, open_corpus
from mixle.data._documents import SequenceDocuments, offset_reader, offset_runs_reader
from mixle.data._mixed_radix import MixedRadixPermutation
from mixle.data._order import global_document_order
from mixle.data._order_windows import (
    BLOCK_ORDER_VERSIONS,
    BLOCKS_DOMAIN,
    WINDOW_DOMAIN,
    BlockOrder,
    CumulativeOffsets,
    PermutationWindows,
    _differences_in_place,
    check_block_sizes,
    cumulative_offsets,
    index_ranges,
)
from mixle.data._packing import StreamLayout
from mixle.data._permutation import FeistelPermutation
from mixle.data._windowed_layout import WindowedLayout
from mixle.errors import ArgumentError, ArgumentTypeError, CorpusFormatError


def _table_offsets(lengths: np.ndarray) -> CumulativeOffsets:
    return CumulativeOffsets(SequenceDocuments([np.zeros(int(n), np.int64) for n in lengths]))


def _epoch(order: BlockOrder | PermutationWindows) -> tuple[np.ndarray, np.ndarray]:
    pieces = [order.window(k) for k in range(order.num_windows)]
    if not pieces:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces])


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 9), min_size=1, max_size=300),
    block=st.integers(1, 40),
    window=st.integers(1, 12),
    seed=st.integers(0, 2**40),
    epoch=st.integers(0, 50),
    version=st.sampled_from(BLOCK_ORDER_VERSIONS),
)
def test_blocks_order_is_every_document_once_and_locate_inverts_it(
    lengths: list[int], block: int, window: int, seed: int, epoch: int, version: int
) -> None:
    array = np.array(lengths, dtype=np.int64)
    block = min(block, len(array))
    window = min(window, -(-len(array) // block))
    order = BlockOrder(
        len(array),
        _table_offsets(array),
        seed=seed,
        epoch=epoch,
        block_documents=block,
        window_blocks=window,
        version=version,
    )
    documents, window_lengths = _epoch(order)
    assert np.array_equal(np.sort(documents), np.arange(len(array)))
    assert np.array_equal(window_lengths, array[documents])
    tokens, counts = order.window_totals()
    sizes = [len(order.window_documents(k)) for k in range(order.num_windows)]
    assert counts.tolist() == sizes
    bounds = np.cumsum([0, *sizes])
    assert tokens.tolist() == [int(array[documents[a:b]].sum()) for a, b in pairwise(bounds)]
    windows, positions = order.locate(documents)
    assert np.array_equal(windows, np.repeat(np.arange(order.num_windows), sizes))
    assert np.array_equal(positions, np.concatenate([np.arange(n) for n in sizes]))


def test_blocks_order_windows_are_runs_of_the_shuffled_blocks() -> None:
    order = BlockOrder(
        1000, _table_offsets(np.ones(1000)), seed=3, epoch=1, block_documents=64, window_blocks=4
    )
    blocks = order.block_order()
    assert np.array_equal(np.sort(blocks), np.arange(16))
    for k in range(order.num_windows):
        in_window = set((order.window_documents(k) // 64).tolist())
        assert in_window == set(blocks[4 * k : 4 * k + 4].tolist())


def test_blocks_order_is_a_pure_function_of_its_key() -> None:
    def epoch_order(seed: int, epoch: int) -> np.ndarray:
        order = BlockOrder(
            5000, _table_offsets(np.ones(5000)), seed=seed, epoch=epoch,
            block_documents=100, window_blocks=5,
        )  # fmt: skip
        return _epoch(order)[0]

    assert np.array_equal(epoch_order(1, 2), epoch_order(1, 2))
    assert not np.array_equal(epoch_order(1, 2), epoch_order(1, 3))
    assert not np.array_equal(epoch_order(1, 2), epoch_order(2, 2))


def test_the_blocks_order_is_pinned() -> None:
    # A change here changes every saved "blocks" state: it needs a new order version.
    def order(version: int) -> BlockOrder:
        return BlockOrder(
            50, _table_offsets(np.arange(50)), seed=7, epoch=2, block_documents=8,
            window_blocks=2, version=version,
        )  # fmt: skip

    assert order(1).window_documents(0).tolist() == [
        41, 40, 19, 44, 43, 21, 17, 42, 23, 16, 47, 45, 46, 20, 22, 18
    ]  # fmt: skip
    assert order(1).window_totals()[0].tolist() == [504, 189, 504, 28]
    assert order(2).window_documents(0).tolist() == [
        15, 8, 42, 13, 43, 14, 12, 11, 46, 9, 41, 47, 10, 45, 44, 40
    ]  # fmt: skip
    assert order(2).window_totals()[0].tolist() == [440, 312, 317, 156]
    assert order(2).version == 2 == BlockOrder(1, _table_offsets(np.ones(1)), seed=0, epoch=0,
        block_documents=1, window_blocks=1).version  # fmt: skip


def test_an_unknown_block_order_version_is_refused() -> None:
    for version, error in ((3, ArgumentError), (0, ArgumentError), ("2", ArgumentTypeError)):
        with pytest.raises(error, match="order_version"):
            BlockOrder(
                10, _table_offsets(np.ones(10)), seed=0, epoch=0, block_documents=2,
                window_blocks=1, version=version,  # type: ignore[arg-type]
            )  # fmt: skip


@pytest.mark.parametrize("n", [2**k + d for k in (3, 6, 9) for d in (-1, 0, 1)])
def test_blocks_order_at_powers_of_two(n: int) -> None:
    for block in (1, 2, 3, n):
        order = BlockOrder(
            n, _table_offsets(np.ones(n)), seed=0, epoch=0, block_documents=block,
            window_blocks=1,
        )  # fmt: skip
        assert np.array_equal(np.sort(_epoch(order)[0]), np.arange(n))


def test_the_offsets_of_a_sharded_corpus_answer_without_lengths(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 20, size=700)
    with CorpusWriter(tmp_path / "c", vocab_size=100, shard_max_bytes=512) as writer:
        writer.add_flat(np.zeros(int(lengths.sum()), np.uint16), lengths)
    corpus = open_corpus(tmp_path / "c")
    assert offset_reader(corpus) is corpus
    indices = np.array([0, 5, 699, 700, 13])
    expected = np.concatenate([[0], np.cumsum(lengths)])[indices]
    assert np.array_equal(cumulative_offsets(corpus, indices), expected)
    order = BlockOrder(
        700, CumulativeOffsets(corpus), seed=1, epoch=0, block_documents=64, window_blocks=3
    )
    documents, window_lengths = _epoch(order)
    assert np.array_equal(window_lengths, lengths[documents])


def test_in_memory_sources_fall_back_to_their_lengths() -> None:
    documents = SequenceDocuments([np.zeros(n, np.int64) for n in (3, 0, 5)])
    assert offset_reader(documents) is None
    assert cumulative_offsets(documents, [0, 1, 2, 3]).tolist() == [0, 3, 3, 8]


@pytest.mark.parametrize(
    ("block", "window", "message"),
    [
        (0, 1, "`block_documents` must be a positive"),
        (-4, 1, "`block_documents` must be a positive"),
        (101, 1, "`block_documents` must be between 1 and the corpus's 100 documents"),
        (10, 0, "`window_blocks` must be a positive"),
        (10, 11, "`window_blocks` must be between 1 and the corpus's 10 blocks"),
    ],
)
def test_bad_block_and_window_sizes_are_refused(block: int, window: int, message: str) -> None:
    with pytest.raises(ArgumentError, match=message):
        check_block_sizes(100, block, window)


def test_sizes_of_the_wrong_type_are_refused() -> None:
    with pytest.raises(ArgumentTypeError, match="block_documents"):
        check_block_sizes(100, 2.5, 1)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="window_blocks"):
        check_block_sizes(100, 2, True)


def test_locate_refuses_documents_outside_the_corpus() -> None:
    order = BlockOrder(
        10, _table_offsets(np.ones(10)), seed=0, epoch=0, block_documents=2, window_blocks=2
    )
    with pytest.raises(IndexError, match="document 10 is outside"):
        order.locate([3, 10])
    with pytest.raises(IndexError, match="window 3 is outside"):
        order.window(3)


def test_an_empty_corpus_has_no_windows() -> None:
    order = BlockOrder(0, _table_offsets(np.ones(0)), seed=0, epoch=0, block_documents=1,
                       window_blocks=1)  # fmt: skip
    assert order.num_windows == 0
    assert [a.tolist() for a in order.window_totals()] == [[], []]


def test_permutation_windows_cut_the_seeds_order() -> None:
    lengths = np.arange(23, dtype=np.int64) % 5
    order = global_document_order(23, seed=4, epoch=1)
    windows = PermutationWindows(order, lengths, 5)
    documents, window_lengths = _epoch(windows)
    assert np.array_equal(documents, order)
    assert np.array_equal(window_lengths, lengths[order])
    tokens, counts = windows.window_totals()
    assert counts.tolist() == [5, 5, 5, 5, 3]
    assert tokens.tolist() == [int(lengths[order[a : a + 5]].sum()) for a in range(0, 23, 5)]


def test_feistel_domains_separate_keys_and_the_default_is_unchanged() -> None:
    positions = np.arange(1000)
    plain = FeistelPermutation(1000, 5, 6)(positions)
    assert plain[:5].tolist() == FeistelPermutation(1000, 5, 6, domain=())(positions)[:5].tolist()
    assert not np.array_equal(plain, FeistelPermutation(1000, 5, 6, domain=(1,))(positions))
    perm = FeistelPermutation(1000, 5, 6, domain=(9, 1))
    assert np.array_equal(perm.inverse(perm(positions)), positions)


def test_offsets_over_many_shards_are_read_in_bulk_and_checked(tmp_path: Path) -> None:
    lengths = np.random.default_rng(4).integers(0, 9, size=3000)
    with CorpusWriter(tmp_path / "c", vocab_size=100, shard_max_bytes=40, durable=False) as writer:
        writer.add_flat(np.zeros(int(lengths.sum()), np.uint16), lengths)
    corpus = open_corpus(tmp_path / "c")
    assert len(corpus.parsed_manifest.shards) > 100  # past the bulk threshold
    indices = np.random.default_rng(5).integers(0, 3001, size=4000)
    expected = np.concatenate([[0], np.cumsum(lengths)])[indices]
    assert np.array_equal(corpus.token_offsets(indices), expected)
    # A value changed inside one offsets file: the bulk check names that file.
    name = corpus.parsed_manifest.shards[50].offsets
    path = tmp_path / "c" / name
    data = bytearray(path.read_bytes())
    data[-8:] = (int.from_bytes(data[-8:], "little") + 1).to_bytes(8, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(CorpusFormatError, match=name):
        open_corpus(tmp_path / "c").token_offsets(np.arange(0, 3001, 7))


def test_a_window_read_then_hinted_shuffles_its_documents_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    order = BlockOrder(
        400, _table_offsets(np.ones(400)), seed=2, epoch=1, block_documents=20, window_blocks=4
    )
    fresh = BlockOrder(
        400, _table_offsets(np.ones(400)), seed=2, epoch=1, block_documents=20, window_blocks=4
    )
    calls: list[int] = []
    permutation = BlockOrder._window_permutation

    def counted(self: BlockOrder, k: int, size: int) -> FeistelPermutation:
        calls.append(k)
        return permutation(self, k, size)

    monkeypatch.setattr(BlockOrder, "_window_permutation", counted)
    documents, _ = order.window(3)
    assert np.array_equal(order.window_documents(3), documents)  # the read-ahead hint
    assert calls == [3]
    assert np.array_equal(order.window_documents(1), fresh.window_documents(1))
    assert np.array_equal(order.window(3)[0], documents)  # the kept shuffle was replaced
    assert calls == [3, 1, 1, 3]


def _defined_windows(
    num_documents: int, seed: int, epoch: int, block: int, window: int, version: int = 2
) -> list[np.ndarray]:
    """The blocks order as its definition states it, naively: the keyed order of the
    blocks, runs of ``window`` of them, each run's documents (blocks concatenated in
    block order in version 1, in ascending id in version 2) permuted by the window's own
    bijection (the balanced Feistel network in version 1, the mixed-radix one in 2)."""
    bijection = FeistelPermutation if version == 1 else MixedRadixPermutation
    blocks = -(-num_documents // block)
    order = bijection(blocks, seed, epoch, domain=(BLOCKS_DOMAIN,))(np.arange(blocks))
    windows = []
    for k in range(-(-blocks // window)):
        members = order[k * window : (k + 1) * window]
        if version == 2:
            members = np.sort(members)
        natural = np.concatenate(
            [np.arange(b * block, min((b + 1) * block, num_documents)) for b in members]
        )
        shuffle = bijection(len(natural), seed, epoch, domain=(k, WINDOW_DOMAIN))
        windows.append(natural[shuffle(np.arange(len(natural)))])
    return windows


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 9), min_size=1, max_size=400),
    block=st.sampled_from([1, 2, 3, 4, 7, 8, 16, 33, 64]),
    window=st.integers(1, 12),
    seed=st.integers(0, 2**40),
    epoch=st.integers(0, 50),
    version=st.sampled_from(BLOCK_ORDER_VERSIONS),
)
def test_blocks_order_is_its_definition(
    lengths: list[int], block: int, window: int, seed: int, epoch: int, version: int
) -> None:
    # The window path computes a position's block by a shift (power-of-two blocks), a
    # division or a search (the short last block inside a window) and reads lengths as
    # neighbouring offsets: each must give the definition's order and lengths exactly.
    array = np.array(lengths, dtype=np.int64)
    block = min(block, len(array))
    window = min(window, -(-len(array) // block))
    order = BlockOrder(
        len(array), _table_offsets(array), seed=seed, epoch=epoch,
        block_documents=block, window_blocks=window, version=version,
    )  # fmt: skip
    defined = _defined_windows(len(array), seed, epoch, block, window, version)
    assert order.num_windows == len(defined)
    for k, expected in enumerate(defined):
        documents, window_lengths = order.window(k)
        assert documents.dtype == window_lengths.dtype == np.int64
        assert np.array_equal(documents, expected)
        assert np.array_equal(window_lengths, array[expected])
        assert np.array_equal(order.window_documents(k), expected)
        positions = np.arange(len(expected))[::3]
        assert np.array_equal(order.documents_at(k, positions), expected[positions])
    tokens, counts = order.window_totals()
    assert counts.tolist() == [len(w) for w in defined]
    assert tokens.tolist() == [int(array[w].sum()) for w in defined]


@settings(max_examples=60, deadline=None)
@given(
    runs=st.lists(st.tuples(st.integers(-5, 50), st.integers(0, 6)), max_size=12),
)
def test_index_ranges_lists_each_run_in_order(runs: list[tuple[int, int]]) -> None:
    starts = np.array([start for start, _ in runs], dtype=np.int64)
    sizes = np.array([size for _, size in runs], dtype=np.int64)
    expected = [start + j for start, size in runs for j in range(size)]
    assert index_ranges(starts, sizes).tolist() == expected
    uniform = np.full(len(runs), 3, dtype=np.int64)
    assert index_ranges(starts, uniform).tolist() == [
        s + j for s in starts.tolist() for j in range(3)
    ]


def _no_single_indices(indices: np.ndarray) -> np.ndarray:
    raise AssertionError(f"token_offsets asked for {len(indices)} indices")


def test_a_sharded_window_reads_its_blocks_as_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Blocks straddle shard boundaries, the short last block sits inside a window and a
    # run ends at the corpus's last offset: the runs read gives the offsets path's order
    # and lengths, and the corpus is asked for no single index.
    lengths = np.random.default_rng(8).integers(0, 12, size=1500)
    with CorpusWriter(tmp_path / "c", vocab_size=100, shard_max_bytes=700, durable=False) as writer:
        writer.add_flat(np.zeros(int(lengths.sum()), np.uint16), lengths)
    corpus = open_corpus(tmp_path / "c")
    assert corpus.num_shards > 10
    assert offset_runs_reader(corpus) is corpus
    assert offset_runs_reader(SequenceDocuments([np.zeros(2, np.int64)])) is None
    for block, window in ((64, 3), (100, 4), (1500, 1), (7, 215)):
        order = BlockOrder(
            1500, CumulativeOffsets(corpus), seed=4, epoch=1, block_documents=block,
            window_blocks=window,
        )  # fmt: skip
        plain = BlockOrder(
            1500, _table_offsets(lengths), seed=4, epoch=1, block_documents=block,
            window_blocks=window,
        )  # fmt: skip
        totals = order.window_totals()
        with monkeypatch.context() as patched:
            patched.setattr(corpus, "token_offsets", _no_single_indices)
            for k in range(order.num_windows):
                documents, window_lengths = order.window(k)
                assert np.array_equal(documents, plain.window(k)[0])
                assert np.array_equal(window_lengths, lengths[documents])
        assert all(np.array_equal(a, b) for a, b in zip(totals, plain.window_totals(), strict=True))
    # A callable without runs reads the same offsets through an index array.
    table = np.concatenate([[0], np.cumsum(lengths)])
    order = BlockOrder(1500, table.take, seed=4, epoch=1, block_documents=64, window_blocks=3)
    assert np.array_equal(order.window(2)[1], lengths[order.window(2)[0]])


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.integers(-(2**40), 2**40), max_size=80),
    chunk=st.integers(1, 9),
)
def test_differences_in_place_are_the_forward_differences(values: list[int], chunk: int) -> None:
    # Chunks of 1..9 through a buffer, so every seam between chunks is crossed.
    array = np.array(values, dtype=np.int64)
    expected = np.append(np.diff(array), array[-1:]) if array.size else array.copy()
    assert _differences_in_place(array, np.empty(chunk, dtype=np.int64))
    assert array.tolist() == expected.tolist()


def test_differences_in_place_leave_arrays_they_do_not_own() -> None:
    base = np.arange(10, dtype=np.int64) ** 2
    buffer = np.empty(4, dtype=np.int64)
    read_only = base.copy()
    read_only.setflags(write=False)
    for other in (base[2:], read_only, base.astype(np.int32)):
        before = other.copy()
        assert not _differences_in_place(other, buffer)
        assert np.array_equal(other, before)


@settings(max_examples=80, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 9), min_size=1, max_size=200),
    block=st.integers(1, 12),
    window=st.integers(1, 4),
    has_boundary=st.booleans(),
    data=st.data(),
)
def test_a_windowed_segment_is_the_whole_layouts_documents_of_its_range(
    lengths: list[int], block: int, window: int, has_boundary: bool, data: st.DataObject
) -> None:
    # A range across windows is answered with the documents that overlap it only (not
    # the windows whole): the same documents, lengths and stream starts as the whole
    # stream's layout at the same positions, and covering every document of the range.
    array = np.array(lengths, dtype=np.int64)
    block = min(block, len(array))
    window = min(window, -(-len(array) // block))
    order = BlockOrder(
        len(array),
        _table_offsets(array),
        seed=5,
        epoch=2,
        block_documents=block,
        window_blocks=window,
    )
    layout = WindowedLayout(order, has_boundary)
    documents = np.concatenate([order.window_documents(k) for k in range(order.num_windows)])
    whole = StreamLayout.build(documents, array[documents], has_boundary)
    assert layout.stream_tokens == whole.stream_tokens
    tokens = whole.stream_tokens
    for _ in range(6):
        begin = data.draw(st.integers(0, max(tokens - 1, 0)))
        end = data.draw(st.integers(begin, tokens))
        part = layout.segment(begin, end)
        at, count = part.first, len(part.indices)
        assert np.array_equal(part.indices, whole.indices[at : at + count])
        assert np.array_equal(part.lengths, whole.lengths[at : at + count])
        assert np.array_equal(part.starts, whole.starts[at : at + count + 1])
        low, high = whole.documents_between(begin, end)
        if high > low:
            assert at <= low and high <= at + count
