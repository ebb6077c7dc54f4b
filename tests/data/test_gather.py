"""The packer's batch gathers: the numpy and the compiled (numba) backends agree bitwise.

``gather_pieces`` and ``fill_document_ids`` are checked against per-piece / per-token
references under both backends, and whole streams of batches (``StreamingCorpus`` over a
real memory-mapped corpus, both layouts, boundaries and document ids on and off) are
checked against the per-document path (the same documents as a Python list, read one by
one through ``take``).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mixle import _gather
from mixle._gather import (
    document_id_runs,
    fill_document_ids,
    gather_pieces,
    numba_available,
    padded_position_runs,
)
from mixle.corpus import CorpusWriter, open_corpus
from mixle.data import StreamingCorpus, gather_backend, set_gather_backend
from mixle.data._order import global_document_order
from mixle.errors import ArgumentError

BACKENDS = [
    "numpy",
    pytest.param(
        "numba",
        marks=pytest.mark.skipif(
            not numba_available(), reason="numba is not installed (pip install 'mixle[fast]')"
        ),
    ),
]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    previous = set_gather_backend(request.param)
    try:
        yield request.param
    finally:
        set_gather_backend(previous)


def _both_backends() -> list[str]:
    return ["numpy", "numba"] if numba_available() else ["numpy"]


@st.composite
def _pieces(draw: st.DrawFn) -> tuple[np.ndarray, ...]:
    """A CSR corpus (tokens split at offsets) and non-overlapping pieces to gather."""
    dtype = draw(st.sampled_from([np.uint16, np.uint32, np.int64]))
    lengths = draw(st.lists(st.integers(0, 12), min_size=1, max_size=12))
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    high = np.iinfo(dtype).max if dtype != np.int64 else 2**62
    tokens = np.random.default_rng(draw(st.integers(0, 2**32))).integers(
        0, high, size=int(offsets[-1]), dtype=dtype
    )
    tokens.flags.writeable = False
    offsets.flags.writeable = False
    count = draw(st.integers(0, 10))
    local, begins, ends, at = [], [], [], []
    position = draw(st.integers(0, 3))
    for _ in range(count):
        document = draw(st.integers(0, len(lengths) - 1))
        begin = draw(st.integers(0, lengths[document]))
        end = draw(st.integers(begin, lengths[document]))
        local.append(document)
        begins.append(begin)
        ends.append(end)
        at.append(position)
        position += end - begin + draw(st.integers(0, 2))
    arrays = [np.array(values, dtype=np.int64) for values in (local, begins, ends, at)]
    return (tokens, offsets, *arrays, np.int64(position + draw(st.integers(0, 3))))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_pieces(), st.sampled_from([-1, 7]))
def test_gather_pieces_backends_agree_with_per_piece_slices(
    case: tuple[np.ndarray, ...], held: int
) -> None:
    # Slots between pieces keep what they hold: -1 (no token of any dtype here) or 7 (a
    # token, which the numpy gather may copy along with pieces one slot apart).
    tokens, offsets, local, begins, ends, at, size = case
    want = np.full(int(size), held, dtype=np.int64)
    for document, begin, end, position in zip(local, begins, ends, at, strict=True):
        start = offsets[document]
        want[position : position + end - begin] = tokens[start + begin : start + end]
    for name in _both_backends():
        previous = set_gather_backend(name)
        try:
            out = np.full(int(size), held, dtype=np.int64)
            assert (
                gather_pieces(out, tokens, offsets, local, begins, ends, at, len(offsets) - 1) == -1
            )
        finally:
            set_gather_backend(previous)
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize(
    ("change", "bad"),
    [
        (lambda b, e, a: (b, e + np.array([0, 1, 0]), a), 1),  # past the document's end
        (lambda b, e, a: (b - np.array([0, 0, 1]), e, a), 2),  # negative begin
        (lambda b, e, a: (b + np.array([0, 3, 0]), e, a), 1),  # begin > end
        (lambda b, e, a: (b, e, a + np.array([0, 0, 40])), 2),  # past the end of out
        (lambda b, e, a: (b, e, a - np.array([1, 0, 0])), 0),  # before the start of out
    ],
)
def test_gather_pieces_names_the_first_bad_piece(
    backend: str, change: Callable[..., tuple[np.ndarray, ...]], bad: int
) -> None:
    del backend
    tokens = np.arange(10, dtype=np.uint16)
    offsets = np.array([0, 4, 6, 10], dtype=np.int64)
    local = np.array([0, 1, 2], dtype=np.int64)
    begins, ends, at = change(
        np.array([0, 0, 1], np.int64), np.array([4, 2, 4], np.int64), np.array([0, 4, 6], np.int64)
    )
    out = np.zeros(9, dtype=np.int64)
    assert gather_pieces(out, tokens, offsets, local, begins, ends, at, 3) == bad


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(0, 9), min_size=1, max_size=12),
    st.integers(0, 40),
    st.integers(1, 40),
)
def test_document_ids_backends_agree_with_per_token_reference(
    pieces: list[int], begin_draw: int, size: int
) -> None:
    starts = np.zeros(len(pieces) + 1, dtype=np.int64)
    np.cumsum(pieces, out=starts[1:])
    total = int(starts[-1])
    if total == 0:
        return
    begin = begin_draw % total
    end = min(begin + size, total)
    first = int(np.searchsorted(starts, begin, side="right")) - 1
    stop = int(np.searchsorted(starts, end, side="left"))
    # Not monotone: each run's step is the difference of two unrelated indices.
    indices = (np.arange(len(pieces), dtype=np.int64) * 7919) % 1009 + 5
    owner = np.searchsorted(starts, np.arange(begin, end), side="right") - 1
    want_ids, want_pos = indices[owner], np.arange(begin, end) - starts[owner]
    for name in _both_backends():
        previous = set_gather_backend(name)
        try:
            doc_ids = np.empty(end - begin, np.int64)
            pos_ids = np.empty(end - begin, np.int64)
            fill_document_ids(
                doc_ids, pos_ids, indices[first:stop], starts[first : stop + 1], begin
            )
            built = document_id_runs(
                indices[first:stop], starts[first : stop + 1], begin, end - begin
            )
        finally:
            set_gather_backend(previous)
        for got_ids, got_pos in ((doc_ids, pos_ids), built):
            assert got_ids.dtype == got_pos.dtype == np.int64
            assert got_ids.flags.writeable and got_pos.flags.writeable
            np.testing.assert_array_equal(got_ids, want_ids)
            np.testing.assert_array_equal(got_pos, want_pos)


@pytest.mark.parametrize("begin", [0, 69_990, 70_003])
def test_document_id_runs_of_documents_longer_than_the_ramp(backend: str, begin: int) -> None:
    # Positions deep inside long documents: the same values (runs are offsets plus a slot
    # ramp, not slices of a ramp of positions).
    del backend
    starts = np.array([0, 70_000, 70_005, 70_008, 140_000], dtype=np.int64)
    indices = np.array([9, 4, 11, 2], dtype=np.int64)
    size = 20 if begin else 66_000
    first = int(np.searchsorted(starts, begin, side="right")) - 1
    stop = int(np.searchsorted(starts, begin + size, side="left"))
    doc_ids, pos_ids = document_id_runs(indices[first:stop], starts[first : stop + 1], begin, size)
    owner = np.searchsorted(starts, np.arange(begin, begin + size), side="right") - 1
    np.testing.assert_array_equal(doc_ids, indices[owner])
    np.testing.assert_array_equal(pos_ids, np.arange(begin, begin + size) - starts[owner])


def test_the_slot_ramp_grows_to_its_limit_then_reads_take_a_fresh_arange(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Reads up to the limit share one read-only ramp (grown to a power of two); longer
    # ones take their own arange; every output is a fresh writable array either way.
    monkeypatch.setattr(_gather, "_RAMP", np.arange(0, dtype=np.int64))
    monkeypatch.setattr(_gather, "_RAMP_LIMIT", 64)
    starts = np.array([-3, 10, 10, 41, 500], dtype=np.int64)
    indices = np.array([7, 1, 8, 3], dtype=np.int64)
    for size, ramp in ((5, 8), (33, 64), (64, 64), (65, 64), (400, 64), (20, 64)):
        doc_ids, pos_ids = _gather.document_id_runs_numpy(indices, starts, 0, size)
        owner = np.searchsorted(starts, np.arange(size), side="right") - 1
        np.testing.assert_array_equal(doc_ids, indices[owner])
        np.testing.assert_array_equal(pos_ids, np.arange(size) - starts[owner])
        assert _gather._RAMP.shape[0] == ramp and not _gather._RAMP.flags.writeable
        for got in (doc_ids, pos_ids):
            assert got.flags.writeable and not np.shares_memory(got, _gather._RAMP)
        positions = padded_position_runs(
            np.array([2, 0], np.int64), np.array([5, 0], np.int64), np.array([3, size], np.int64), 1
        )
        want = np.concatenate([[0, 0, 5, 6, 7], np.arange(size), [0]])
        np.testing.assert_array_equal(positions, want)
        assert positions.flags.writeable and not np.shares_memory(positions, _gather._RAMP)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lengths=st.lists(st.integers(0, 40), min_size=1, max_size=40),
    block=st.integers(1, 24),
    batch_size=st.integers(1, 4),
    world_size=st.integers(1, 3),
    boundary=st.booleans(),
    layout=st.sampled_from(["per-rank", "global"]),
    shard_max_bytes=st.sampled_from([64, 10**6]),
    dtype=st.sampled_from(["uint16", "uint32", "int64"]),
)
def test_packed_batches_of_a_corpus_match_the_per_document_path_bitwise(
    tmp_path_factory: pytest.TempPathFactory,
    lengths: list[int],
    block: int,
    batch_size: int,
    world_size: int,
    boundary: bool,
    layout: str,
    shard_max_bytes: int,
    dtype: str,
) -> None:
    rng = np.random.default_rng(len(lengths) * 7 + block)
    high = {"uint16": 2**16, "uint32": 2**32, "int64": 2**40}[dtype]
    documents = [rng.integers(0, high, size=n).astype(dtype) for n in lengths]
    path = tmp_path_factory.mktemp("gather") / "corpus"
    with CorpusWriter(path, dtype=dtype, shard_max_bytes=shard_max_bytes, durable=False) as writer:
        writer.add_many(documents)
    corpus = open_corpus(path)
    options = dict(
        block=block,
        batch_size=batch_size,
        boundary_id=7 if boundary else None,
        document_ids=True,
        layout=layout,
        seed=3,
        pad_id=-1,
    )
    for rank in range(world_size):
        reference = StreamingCorpus(
            [d.astype(np.int64) for d in documents], rank=rank, world_size=world_size, **options
        )
        want = list(itertools.chain(reference.epoch_batches(0), reference.epoch_batches(1)))
        for name in _both_backends():
            previous = set_gather_backend(name)
            try:
                stream = StreamingCorpus(corpus, rank=rank, world_size=world_size, **options)
                got = list(itertools.chain(stream.epoch_batches(0), stream.epoch_batches(1)))
            finally:
                set_gather_backend(previous)
            assert len(got) == len(want)
            for got_batch, want_batch in zip(got, want, strict=True):
                for got_array, want_array in zip(got_batch, want_batch, strict=True):
                    assert got_array.dtype == want_array.dtype
                    np.testing.assert_array_equal(got_array, want_array)


@pytest.mark.skipif(not numba_available(), reason="numba is not installed")
@pytest.mark.parametrize("dtype", ["uint16", "uint32", "int64"])
def test_streaming_compiles_nothing_after_the_warm_up(tmp_path: Path, dtype: str) -> None:
    # A fresh process's first batch must not compile (or load from numba's cache) a new
    # specialisation: every signature the reader and the packer use is warmed up.
    from mixle import _gather

    previous = set_gather_backend("numba")
    try:
        assert _gather._KERNELS is not None
        counts = [len(kernel.signatures) for kernel in _gather._KERNELS]  # type: ignore[attr-defined]
        rng = np.random.default_rng(1)
        with CorpusWriter(tmp_path / "c", dtype=dtype, shard_max_bytes=256) as writer:
            writer.add_many([rng.integers(0, 100, size=int(n)) for n in rng.integers(1, 40, 200)])
        for layout in ("per-rank", "global"):
            stream = StreamingCorpus(
                open_corpus(tmp_path / "c"),
                block=16,
                batch_size=2,
                world_size=2,
                rank=1,
                boundary_id=0,
                document_ids=True,
                layout=layout,
            )
            for _ in itertools.islice(stream, 30):
                pass
        assert [len(kernel.signatures) for kernel in _gather._KERNELS] == counts  # type: ignore[attr-defined]
    finally:
        set_gather_backend(previous)


def test_unknown_backend_is_refused() -> None:
    with pytest.raises(ArgumentError, match="`name` must be one of"):
        set_gather_backend("fortran")
    assert gather_backend() in ("numpy", "numba")


def test_environment_variable_selects_the_backend_and_rejects_unknown_values() -> None:
    code = "from mixle import _gather; print(_gather.gather_backend())"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("MIXLE_GATHER", None)
    for value, expected in [
        (None, "numpy"),  # the default: numba is never imported unless asked for
        ("numpy", "numpy"),
        ("auto", "numba" if numba_available() else "numpy"),
    ]:
        result = subprocess.run(
            [sys.executable, "-c", code + "; import sys; print('numba' in sys.modules)"],
            env=env if value is None else {**env, "MIXLE_GATHER": value},
            capture_output=True,
            text=True,
            check=True,
        )
        assert result.stdout.split() == [expected, str(expected == "numba")]
    failed = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "MIXLE_GATHER": "fast"},
        capture_output=True,
        text=True,
    )
    assert failed.returncode != 0 and "MIXLE_GATHER must be one of" in failed.stderr


def test_the_backend_switch_is_public_and_round_trips() -> None:
    previous = set_gather_backend("numpy")
    try:
        assert gather_backend() == "numpy"
    finally:
        set_gather_backend(previous)
    assert gather_backend() == previous


@pytest.mark.parametrize("draws", [8, 64, 1 << 21])
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    count=st.one_of(st.integers(0, 40), st.integers(41, 5000)),
    seed=st.integers(0, 2**63 - 1),
    epoch=st.integers(0, 2**20),
)
def test_the_epoch_shuffle_is_numpys_legacy_permutation_bitwise(
    backend: str, monkeypatch: pytest.MonkeyPatch, draws: int, count: int, seed: int, epoch: int
) -> None:
    # Tiny chunks of raw draws force the compiled shuffle to resume mid-rejection; small
    # permutations take the compiled path too.
    monkeypatch.setattr("mixle._gather._SHUFFLE_DRAWS", draws)
    monkeypatch.setattr("mixle._gather._SHUFFLE_COMPILED_MIN", 0)
    expected = np.random.RandomState(
        np.random.MT19937(np.random.SeedSequence([seed, epoch]))
    ).permutation(count)
    got = global_document_order(count, seed=seed, epoch=epoch)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, expected)


def test_a_large_epoch_shuffle_is_the_same_with_either_backend() -> None:
    orders = []
    for name in _both_backends():
        previous = set_gather_backend(name)
        try:
            orders.append(global_document_order(3_000_001, seed=5, epoch=2))
        finally:
            set_gather_backend(previous)
    assert all(np.array_equal(orders[0], order) for order in orders[1:])
    np.testing.assert_array_equal(np.sort(orders[0]), np.arange(3_000_001))


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 70_000), st.integers(0, 6)), max_size=8),
    st.integers(0, 4),
    st.booleans(),
)
def test_padded_position_runs_are_zeros_then_each_pieces_positions(
    pieces: list[tuple[int, int, int]], tail: int, long_padding: bool
) -> None:
    # Pieces may start deep inside a document and padding may be long: the same values.
    gaps = np.array([g * (20_000 if long_padding else 1) for g, _, _ in pieces], np.int64)
    begins = np.array([b for _, b, _ in pieces], dtype=np.int64)
    lengths = np.array([n for _, _, n in pieces], dtype=np.int64)
    want = [np.zeros(0, np.int64)]
    for gap, begin, length in zip(gaps, begins, lengths, strict=True):
        want += [np.zeros(gap, np.int64), np.arange(begin, begin + length, dtype=np.int64)]
    want.append(np.zeros(tail, np.int64))
    got = padded_position_runs(gaps, begins, lengths, tail)
    assert got.dtype == np.int64 and got.flags.writeable
    np.testing.assert_array_equal(got, np.concatenate(want))
