"""``TokenStream`` (and ``stream_token_source`` on documents) over lists and mmap shards."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, overload

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mixle.data.stream_token_source import TokenStream, stream_token_source
from mixle.errors import ArgumentError, ArgumentTypeError, StateMismatchError, TokenIdError

Batch = tuple[np.ndarray, np.ndarray]


class MemmapDocuments(Sequence[np.ndarray]):
    """A lazy document sequence over uint16 token files, like a sharded corpus.

    Each shard is one ``np.memmap`` of tokens plus an int64 offsets array; a document is
    a zero-copy view. Offers ``lengths``, ``fingerprint``, ``dtype``, ``take`` and
    ``prefetch`` like ``ShardedDocuments``, and records which documents were read.
    """

    def __init__(self, root: Path, shards: list[list[np.ndarray]]) -> None:
        self._tokens: list[np.ndarray] = []
        self._offsets: list[np.ndarray] = []
        for number, docs in enumerate(shards):
            path = root / f"shard-{number}.tokens"
            flat = np.concatenate([np.zeros(0, np.uint16), *docs]).astype(np.uint16)
            flat.tofile(path)
            self._tokens.append(np.memmap(path, dtype=np.uint16, mode="r") if flat.size else flat)
            self._offsets.append(np.cumsum([0] + [len(d) for d in docs]).astype(np.int64))
        self._counts = np.cumsum([0] + [len(o) - 1 for o in self._offsets])
        self.reads: list[int] = []
        self.took: list[list[int]] = []
        self.prefetched: list[list[int]] = []

    def __len__(self) -> int:
        return int(self._counts[-1])

    @overload
    def __getitem__(self, index: int) -> np.ndarray: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[np.ndarray]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if not 0 <= index < len(self):
            raise IndexError(index)
        shard = int(np.searchsorted(self._counts, index, side="right")) - 1
        local = index - int(self._counts[shard])
        offsets = self._offsets[shard]
        self.reads.append(index)
        return self._tokens[shard][offsets[local] : offsets[local + 1]]

    @property
    def lengths(self) -> np.ndarray:
        return np.concatenate([np.diff(o) for o in self._offsets]).astype(np.int64)

    @property
    def fingerprint(self) -> str:
        return "memmap-" + str(len(self))

    @property
    def dtype(self) -> np.dtype[Any]:
        return np.dtype(np.uint16)

    def take(self, indices: Sequence[int]) -> list[np.ndarray]:
        self.took.append(list(indices))
        return [self[i] for i in indices]

    def prefetch(self, indices: Sequence[int]) -> None:
        self.prefetched.append(list(indices))


class MemmapTokens(MemmapDocuments):
    """Also offers ``read_tokens(a, b)``: tokens ``a..b`` of all documents concatenated."""

    def read_tokens(self, start: int, stop: int) -> np.ndarray:
        self.ranges.append((start, stop))
        bounds = np.cumsum([0] + [t.shape[0] for t in self._tokens])
        parts = []
        for shard, tokens in enumerate(self._tokens):
            low, high = max(start - bounds[shard], 0), min(stop - bounds[shard], tokens.shape[0])
            if high > low:
                parts.append(tokens[low:high])
        return np.concatenate([np.zeros(0, np.uint16), *parts])

    @property
    def ranges(self) -> list[tuple[int, int]]:
        if not hasattr(self, "_ranges"):
            self._ranges: list[tuple[int, int]] = []
        return self._ranges


def _stream_of(docs: Sequence[np.ndarray], boundary: int | None) -> np.ndarray:
    parts: list[np.ndarray] = []
    for i, doc in enumerate(docs):
        if i and boundary is not None:
            parts.append(np.array([boundary], dtype=np.int64))
        parts.append(np.asarray(doc, dtype=np.int64))
    return np.concatenate([np.zeros(0, np.int64), *parts])


def _pairs(batches: list[Batch]) -> list[tuple[tuple[int, ...], int]]:
    return [
        (tuple(c.tolist()), int(t))
        for context, target in batches
        for c, t in zip(context, target, strict=True)
    ]


def _same(a: list[Batch], b: list[Batch]) -> bool:
    return len(a) == len(b) and all(
        np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1]) for x, y in zip(a, b, strict=True)
    )


documents_strategy = st.lists(
    st.lists(st.integers(0, 65535), max_size=12).map(lambda v: np.array(v, dtype=np.uint16)),
    max_size=8,
)


@given(
    docs=documents_strategy,
    block=st.integers(1, 10),
    batch_size=st.integers(1, 7),
    boundary=st.none() | st.integers(-5, 70000),
    shuffle=st.booleans(),
    seed=st.integers(0, 2**40),
)
def test_each_epoch_yields_every_window_of_the_stream_once(
    docs: list[np.ndarray],
    block: int,
    batch_size: int,
    boundary: int | None,
    shuffle: bool,
    seed: int,
) -> None:
    stream = _stream_of(docs, boundary)
    tokens = TokenStream(
        docs, block, batch_size, epochs=2, shuffle=shuffle, seed=seed, boundary_id=boundary
    )
    assert tokens.num_tokens == stream.shape[0]
    batches = list(tokens)
    expected = [
        (tuple(stream[i : i + block].tolist()), int(stream[i + block]))
        for i in range(stream.shape[0] - block)
    ]
    per_epoch = tokens.num_batches()
    assert len(batches) == 2 * per_epoch
    for context, target in batches:
        assert context.dtype == target.dtype == np.int64
        assert context.shape == (target.shape[0], block) and 1 <= target.shape[0] <= batch_size
    for epoch in range(2):
        got = _pairs(batches[epoch * per_epoch : (epoch + 1) * per_epoch])
        assert Counter(got) == Counter(expected)
        if not shuffle:
            assert got == expected


@given(docs=documents_strategy, block=st.integers(1, 6), batch_size=st.integers(1, 5))
def test_unshuffled_single_array_matches_the_seed_function(
    docs: list[np.ndarray], block: int, batch_size: int
) -> None:
    flat = _stream_of(docs, None)
    seed_batches = list(stream_token_source(flat, block, batch_size, shuffle=False))
    ours = list(TokenStream([flat], block, batch_size, shuffle=False))
    assert _same(ours, seed_batches)


def test_memmap_shards_give_the_same_batches_as_a_list(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    shards = [
        [rng.integers(0, 65536, rng.integers(0, 40)).astype(np.uint16) for _ in range(30)]
        for _ in range(4)
    ]
    lazy = MemmapDocuments(tmp_path, shards)
    as_list = [doc for shard in shards for doc in shard]
    for boundary in (None, 65535):
        for shuffle in (False, True):
            kwargs: dict[str, Any] = {"epochs": 2, "shuffle": shuffle, "seed": 3}
            a = list(TokenStream(lazy, 37, 5, boundary_id=boundary, **kwargs))
            b = list(TokenStream(as_list, 37, 5, boundary_id=boundary, **kwargs))
            assert len(a) > 20 and _same(a, b)


@given(
    shards=st.lists(documents_strategy, min_size=1, max_size=3),
    block=st.integers(1, 9),
    batch_size=st.integers(1, 6),
    boundary=st.none() | st.integers(0, 9),
    seed=st.integers(0, 100),
)
def test_range_reads_give_the_same_batches_as_document_reads(
    tmp_path_factory: pytest.TempPathFactory,
    shards: list[list[np.ndarray]],
    block: int,
    batch_size: int,
    boundary: int | None,
    seed: int,
) -> None:
    root = tmp_path_factory.mktemp("ranges")
    ranged = MemmapTokens(root, shards)
    as_list = [doc for shard in shards for doc in shard]
    for shuffle in (False, True):
        kwargs: dict[str, Any] = {"shuffle": shuffle, "seed": seed, "boundary_id": boundary}
        a = list(TokenStream(ranged, block, batch_size, **kwargs))
        b = list(TokenStream(as_list, block, batch_size, **kwargs))
        assert _same(a, b)
    assert ranged.reads == []  # documents were never indexed one by one


def test_a_window_costs_one_range_read_whatever_it_spans(tmp_path: Path) -> None:
    docs = [np.full(3, i, dtype=np.uint16) for i in range(30)]
    ranged = MemmapTokens(tmp_path, [docs[:10], docs[10:]])
    context, target = TokenStream(ranged, 20, 1, shuffle=False, boundary_id=99).batch(0, 25)
    # stream[25:46] spans documents 6..11 and the shard boundary: one call, 16 tokens.
    assert ranged.ranges == [(19, 35)]
    expected = _stream_of(docs, 99)[25:46]
    assert context.tolist() == [expected[:20].tolist()] and target.tolist() == [int(expected[20])]


def test_reads_only_the_documents_a_batch_overlaps(tmp_path: Path) -> None:
    docs = [np.full(10, i, dtype=np.uint16) for i in range(100)]
    lazy = MemmapDocuments(tmp_path, [docs[:50], docs[50:]])
    stream = TokenStream(lazy, 15, 1, shuffle=False)
    lazy.reads.clear()
    context, target = stream.batch(0, 495)  # stream[495:511]: documents 49, 50, 51
    assert sorted(set(lazy.reads)) == [49, 50, 51]
    assert lazy.took == []  # a few documents: indexed one by one
    assert context.tolist() == [[49] * 5 + [50] * 10]
    assert target.tolist() == [51]


def test_large_batches_read_their_documents_with_one_take(tmp_path: Path) -> None:
    docs = [np.full(10, i, dtype=np.uint16) for i in range(300)]
    lazy = MemmapDocuments(tmp_path, [docs[:150], docs[150:]])
    stream = TokenStream(lazy, 15, 200, seed=4)
    context, target = stream.batch(0, 3)
    assert len(lazy.took) == 1 and len(lazy.took[0]) >= 64
    expected = _stream_of(docs, None)
    starts = stream.window_indices(0, np.arange(600, 800))
    assert np.array_equal(context, expected[starts[:, None] + np.arange(15)])
    assert np.array_equal(target, expected[starts + 15])


def test_prefetch_can_be_switched_off(tmp_path: Path) -> None:
    docs = [np.full(10, i, dtype=np.uint16) for i in range(20)]
    lazy = MemmapDocuments(tmp_path, [docs])
    assert len(list(TokenStream(lazy, 5, 2, prefetch=False))) == 98
    assert lazy.prefetched == []
    with pytest.raises(ArgumentTypeError, match="`prefetch` must be a bool"):
        TokenStream(lazy, 5, 2, prefetch=None)  # type: ignore[arg-type]


def test_prefetch_hints_name_the_coming_documents_in_read_order(tmp_path: Path) -> None:
    docs = [np.full(10, i, dtype=np.uint16) for i in range(20)]
    lazy = MemmapDocuments(tmp_path, [docs])
    batches = TokenStream(lazy, 5, 2, shuffle=False).epoch_batches(0, start_batch=40)
    next(batches)
    # Chunks of 1, 2, 4, ... batches: first batch 40 (windows 80, 81: document 8) is
    # hinted before it is read, then batches 41-42 (windows 82..85: documents 8, 9).
    assert lazy.prefetched == [[8]]
    next(batches)
    assert lazy.prefetched == [[8], [8, 9]]
    shuffled = MemmapDocuments(tmp_path, [docs])
    stream = TokenStream(shuffled, 5, 2, seed=1)
    list(stream)
    starts = stream.window_indices(0, np.arange(stream.num_windows)).tolist()
    expected, first, batches = [], 0, 1  # chunks of 1, 2, 4, ... batches of 2 windows
    while first < len(starts):
        expected.append(_docs_of(starts[first : first + 2 * batches], 10, 5))
        first, batches = first + 2 * batches, 2 * batches
    assert shuffled.prefetched == expected


def _docs_of(starts: list[int], length: int, block: int) -> list[int]:
    return list(
        dict.fromkeys(d for s in starts for d in range(s // length, (s + block) // length + 1))
    )


def test_windows_straddle_shard_and_document_boundaries(tmp_path: Path) -> None:
    lazy = MemmapDocuments(
        tmp_path,
        [[np.array([1, 2], np.uint16)], [np.array([3], np.uint16)], [np.array([4, 5], np.uint16)]],
    )
    batches = list(TokenStream(lazy, 3, 8, shuffle=False, boundary_id=0))
    assert _pairs(batches) == [((1, 2, 0), 3), ((2, 0, 3), 0), ((0, 3, 0), 4), ((3, 0, 4), 5)]


def test_ids_beyond_float32_precision_survive_unchanged() -> None:
    big = 2**24 + 1
    docs = [np.array([big, 2**24], np.int64), np.array([big + 2, 2**62 + 1], np.int64)]
    ((context, target),) = list(TokenStream(docs, 3, 4, shuffle=False))
    assert context.tolist() == [[big, 2**24, big + 2]] and target.tolist() == [2**62 + 1]


def test_epochs_zero_and_short_streams_yield_nothing() -> None:
    assert list(TokenStream([np.arange(50)], 4, 3, epochs=0)) == []
    assert list(TokenStream([np.arange(3), np.arange(1)], 4, 3, epochs=3)) == []
    assert list(TokenStream([], 1, 1)) == []


def test_epochs_are_shuffled_differently_and_deterministically() -> None:
    docs = [np.arange(i * 100, i * 100 + 50) for i in range(8)]
    a = list(TokenStream(docs, 8, 400, epochs=2, seed=1))
    b = list(TokenStream(docs, 8, 400, epochs=2, seed=1))
    c = list(TokenStream(docs, 8, 400, epochs=2, seed=2))
    assert _same(a, b)
    assert not np.array_equal(a[0][1], a[1][1])
    assert not np.array_equal(a[0][1], c[0][1])


def _resume_everywhere(make: Any) -> None:
    """Restore from the state after every step; the rest must equal the uninterrupted run."""
    reference = make()
    full = list(reference)
    states = []
    probe = make()
    states.append(json.loads(json.dumps(probe.state_dict())))
    for _ in probe:
        states.append(json.loads(json.dumps(probe.state_dict())))
    assert len(states) == len(full) + 1
    for step, state in enumerate(states):
        resumed = make()
        resumed.load_state_dict(state)
        assert _same(list(resumed), full[step:]), step


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("boundary", [None, 7])
def test_resuming_at_every_step_continues_the_uninterrupted_stream(
    shuffle: bool, boundary: int | None
) -> None:
    docs = [np.arange(i * 10, i * 10 + 3 + i % 5) for i in range(12)]
    _resume_everywhere(
        lambda: TokenStream(docs, 4, 3, epochs=3, shuffle=shuffle, seed=5, boundary_id=boundary)
    )


@given(
    docs=documents_strategy,
    block=st.integers(1, 5),
    batch_size=st.integers(1, 4),
    epochs=st.integers(0, 3),
)
def test_resume_property(docs: list[np.ndarray], block: int, batch_size: int, epochs: int) -> None:
    _resume_everywhere(lambda: TokenStream(docs, block, batch_size, epochs=epochs, seed=9))


def test_state_dict_is_small_and_json_able() -> None:
    stream = TokenStream([np.arange(100)], 8, 4, epochs=2)
    next(iter(stream))
    state = stream.state_dict()
    assert json.loads(json.dumps(state)) == state
    assert state["version"] == 1 and state["epoch"] == 0 and state["position"] == 4
    assert set(state["stream"]) >= {"fingerprint", "block", "batch_size", "seed", "shuffle"}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"seed": 4}, "seed"),
        ({"block": 9}, "block"),
        ({"batch_size": 5}, "batch_size"),
        ({"shuffle": False}, "shuffle"),
        ({"boundary_id": 0}, "boundary_id"),
    ],
)
def test_loading_a_state_of_another_stream_names_the_field(
    change: dict[str, Any], field: str
) -> None:
    docs = [np.arange(100), np.arange(50)]
    base: dict[str, Any] = {
        "block": 8,
        "batch_size": 4,
        "seed": 3,
        "shuffle": True,
        "boundary_id": None,
    }
    state = TokenStream(docs, **base).state_dict()
    other = TokenStream(docs, **{**base, **change})
    with pytest.raises(StateMismatchError, match=f"{field} in checkpoint") as info:
        other.load_state_dict(state)
    assert isinstance(info.value, ValueError)


def test_loading_a_state_of_other_documents_names_the_fingerprint() -> None:
    state = TokenStream([np.arange(100)], 8, 4).state_dict()
    with pytest.raises(StateMismatchError, match="fingerprint in checkpoint"):
        TokenStream([np.arange(1, 101)], 8, 4).load_state_dict(state)


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        ({"version": 2}, "version"),
        ({"epoch": -1}, "epoch"),
        ({"position": 3}, "not the start of a batch"),
        ({"position": 400}, "not the start of a batch"),
        ({"epoch": 5}, "only 2 epoch"),
        ({"position": True}, "position"),
    ],
)
def test_malformed_cursor_states_are_rejected(edit: dict[str, Any], fragment: str) -> None:
    stream = TokenStream([np.arange(100)], 8, 4, epochs=2)
    state = {**stream.state_dict(), **edit}
    with pytest.raises(StateMismatchError, match=fragment):
        stream.load_state_dict(state)
    with pytest.raises(StateMismatchError, match="lacks"):
        stream.load_state_dict({"version": 1, "stream": {}})


def test_advance_skips_batches_without_reading() -> None:
    docs = [np.arange(i * 10, i * 10 + 7) for i in range(10)]
    full = list(TokenStream(docs, 5, 4, epochs=3))
    for skip in range(len(full) + 2):
        stream = TokenStream(docs, 5, 4, epochs=3)
        stream.advance(skip)
        assert _same(list(stream), full[skip:])


def test_stream_token_source_delegates_document_sequences(tmp_path: Path) -> None:
    docs = [np.arange(5, dtype=np.uint16), np.arange(10, 19, dtype=np.uint16)]
    lazy = MemmapDocuments(tmp_path, [docs])
    for source in (docs, tuple(docs), lazy):
        got = list(stream_token_source(source, 3, 2, epochs=2, seed=4))
        assert _same(got, list(TokenStream(docs, 3, 2, epochs=2, seed=4)))
    # A flat list of ids and a numpy array keep the seed behaviour.
    flat = list(range(10))
    assert _same(
        list(stream_token_source(flat, 3, 2, shuffle=False)),
        list(stream_token_source(np.arange(10), 3, 2, shuffle=False)),
    )


def test_stream_token_source_validates_documents_at_call_time() -> None:
    with pytest.raises(ArgumentError, match="`batch_size` must be a positive integer"):
        stream_token_source([np.arange(5)], 2, 0)
    with pytest.raises(
        TokenIdError, match=r"document 1 has fractional token id 1\.5 at position 2"
    ):
        stream_token_source([np.arange(5), np.array([0.0, 1.0, 1.5])], 2, 1)


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        (np.array([1.0, np.nan]), "non-finite token id nan at position 1"),
        (np.array([np.inf]), "non-finite"),
        (np.array([0, 2**63], dtype=np.uint64), "position 1, outside the int64 range"),
        (np.array([0.5]), "fractional"),
        ([1, 2.5], "position 1"),
    ],
)
def test_invalid_ids_in_in_memory_documents_raise_at_construction(doc: Any, fragment: str) -> None:
    with pytest.raises(TokenIdError, match=f"document 1 .*{fragment}"):
        TokenStream([np.arange(3), doc], 1, 1)


def test_invalid_ids_in_lazy_documents_raise_when_read() -> None:
    class Lazy(Sequence[np.ndarray]):
        docs: ClassVar = [np.arange(4), np.array([1.0, 2.0, np.nan])]
        lengths = np.array([4, 3])

        def __len__(self) -> int:
            return 2

        def __getitem__(self, index: Any) -> Any:
            return self.docs[index]

    stream = TokenStream(Lazy(), 2, 1, shuffle=False)
    with pytest.raises(TokenIdError, match="document 1 has non-finite token id nan at position 2"):
        list(stream)


def test_lengths_that_disagree_with_documents_raise() -> None:
    class Liar(Sequence[np.ndarray]):
        """A full DocumentSource whose declared lengths are wrong."""

        lengths = np.array([5, 5])
        fingerprint = "liar"
        dtype = None

        def __len__(self) -> int:
            return 2

        def __getitem__(self, index: Any) -> Any:
            return np.arange(4)

        def take(self, indices: Sequence[int]) -> list[np.ndarray]:
            return [self[i] for i in indices]

        def prefetch(self, indices: Sequence[int]) -> None:
            del indices

    with pytest.raises(
        ArgumentError, match="document 0 has shape \\(4,\\), but the document lengths say 5"
    ):
        list(TokenStream(Liar(), 2, 1, shuffle=False))


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"block": 0}, ArgumentError, "`block` must be a positive integer. Got 0"),
        ({"batch_size": -2}, ArgumentError, "`batch_size` must be a positive integer. Got -2"),
        ({"epochs": -1}, ArgumentError, "`epochs` must be a nonnegative integer"),
        ({"seed": -1}, ArgumentError, "`seed` must be a nonnegative integer"),
        ({"block": 2.0}, ArgumentTypeError, "`block` must be an integer"),
        ({"batch_size": True}, ArgumentTypeError, "`batch_size` must be an integer"),
        ({"epochs": 1.5}, ArgumentTypeError, "`epochs` must be an integer"),
        ({"seed": float("nan")}, ArgumentTypeError, "`seed` must be an integer"),
        ({"shuffle": "yes"}, ArgumentTypeError, "`shuffle` must be a bool"),
        ({"boundary_id": 1.0}, ArgumentTypeError, "`boundary_id` must be an integer"),
        ({"boundary_id": 2**63}, ArgumentError, "`boundary_id` must fit"),
    ],
)
def test_arguments_are_validated_at_construction(
    kwargs: dict[str, Any], error: type[Exception], fragment: str
) -> None:
    args: dict[str, Any] = {"block": 2, "batch_size": 2, **kwargs}
    with pytest.raises(error, match=fragment):
        TokenStream([np.arange(10)], **args)


@pytest.mark.parametrize(
    "documents", [np.arange(10), [np.zeros((2, 2), np.int64)], [np.array([True, False])], 5]
)
def test_documents_must_be_a_sequence_of_1d_integer_arrays(documents: Any) -> None:
    with pytest.raises(ArgumentTypeError):
        TokenStream(documents, 2, 2)


def test_a_sharded_corpus_gives_the_same_batches_as_a_list(tmp_path: Path) -> None:
    from mixle.corpus import CorpusWriter, open_corpus

    rng = np.random.default_rng(7)
    docs = [rng.integers(0, 50000, rng.integers(0, 300)).astype(np.uint16) for _ in range(200)]
    with CorpusWriter(tmp_path / "c", vocab_size=50000, shard_max_bytes=4096) as writer:
        writer.add_many(docs)
    corpus = open_corpus(tmp_path / "c")
    assert corpus.num_shards > 5
    for boundary in (None, 50000):
        for batch_size in (3, 100):
            kwargs: dict[str, Any] = {"epochs": 2, "seed": 1, "boundary_id": boundary}
            ours = TokenStream(corpus, 64, batch_size, **kwargs)
            assert _same(list(ours), list(TokenStream(docs, 64, batch_size, **kwargs)))
            assert ours.state_dict()["stream"]["fingerprint"] == corpus.fingerprint


@pytest.mark.slow
@given(
    docs=st.lists(
        st.lists(st.integers(0, 9), max_size=40).map(lambda v: np.array(v, dtype=np.int64)),
        max_size=30,
    ),
    block=st.integers(1, 50),
    batch_size=st.integers(1, 20),
    epochs=st.integers(1, 4),
    boundary=st.none() | st.just(-1),
)
def test_resume_soak(
    docs: list[np.ndarray], block: int, batch_size: int, epochs: int, boundary: int | None
) -> None:
    _resume_everywhere(
        lambda: TokenStream(docs, block, batch_size, epochs=epochs, seed=2, boundary_id=boundary)
    )


@given(
    docs=documents_strategy,
    block=st.integers(1, 8),
    boundary=st.none() | st.integers(-3, 3),
    picks=st.lists(st.integers(0, 10**6), min_size=1, max_size=12),
)
def test_scattered_and_grouped_reads_agree_for_any_window_set(
    docs: list[np.ndarray], block: int, boundary: int | None, picks: list[int]
) -> None:
    from mixle.data._documents import as_documents
    from mixle.data._token_windows import TokenWindows

    stream = _stream_of(docs, boundary)
    lengths = np.array([len(d) for d in docs], dtype=np.int64)
    windows = TokenWindows(as_documents(docs), lengths, block, boundary)
    if windows.num_windows == 0:
        return
    starts = np.array([p % windows.num_windows for p in picks], dtype=np.int64)
    expected = (stream[starts[:, None] + np.arange(block)], stream[starts + block])
    for scattered in (False, True):
        context, target = windows.read(starts, scattered=scattered)
        assert context.flags.c_contiguous and context.dtype == target.dtype == np.int64
        assert np.array_equal(context, expected[0]) and np.array_equal(target, expected[1])
