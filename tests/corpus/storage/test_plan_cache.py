"""Epoch-plan cache files: saved, memory-mapped on load, verified, rebuilt when broken."""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.corpus import open_corpus
from mixle.corpus.storage.plan_cache import PlanFiles
from mixle.data._plan_store import PlanStore
from mixle.data.streaming_corpus import StreamingCorpus
from mixle.errors import ArgumentTypeError


def _documents(count: int = 300, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 500, size=int(n)) for n in rng.integers(0, 40, size=count)]


def _batches(corpus: StreamingCorpus, epoch: int = 0) -> list[tuple[np.ndarray, ...]]:
    return [tuple(a.copy() for a in batch) for batch in corpus.epoch_batches(epoch)]


def _assert_same(a: list[tuple[np.ndarray, ...]], b: list[tuple[np.ndarray, ...]]) -> None:
    assert len(a) == len(b)
    for left, right in zip(a, b, strict=True):
        for x, y in zip(left, right, strict=True):
            np.testing.assert_array_equal(x, y)


def _root(array: np.ndarray) -> Any:
    """The object at the end of ``array``'s chain of bases (the memory's owner)."""
    owner: Any = array
    while isinstance(owner, np.ndarray) and owner.base is not None:
        owner = owner.base
    return owner.obj if isinstance(owner, memoryview) else owner


@pytest.fixture
def corpus_path(make_corpus: Callable[..., Path]) -> Path:
    return make_corpus(_documents(), vocab_size=500)


def _stream(path: Path, store: PlanStore | None, **options: Any) -> StreamingCorpus:
    # The permutation order: the blocks order's plans are never stored (O(N / B)).
    base: dict[str, Any] = {
        "rank": 1, "world_size": 3, "block": 7, "batch_size": 2, "order": "permutation"
    }  # fmt: skip
    base.update(options)
    return StreamingCorpus(open_corpus(path), plan_store=store, **base)


@pytest.mark.parametrize("layout", ["per-rank", "global"])
def test_a_missing_plan_is_built_saved_and_loaded_memory_mapped(
    corpus_path: Path, tmp_path: Path, layout: str
) -> None:
    store = PlanFiles(tmp_path / "plans")
    plain = _batches(_stream(corpus_path, None, layout=layout, boundary_id=1))
    first = _stream(corpus_path, store, layout=layout, boundary_id=1)
    _assert_same(_batches(first), plain)
    files = os.listdir(tmp_path / "plans")
    assert len(files) == 1 and files[0].startswith("plan-") and files[0].endswith(".bin")
    identity = {**first.stream_identity(), "epoch": 0, "plan_format": 1}
    arrays = store.load(identity)
    assert arrays is not None
    assert isinstance(_root(arrays["indices"]), mmap.mmap)
    assert not arrays["indices"].flags.writeable
    again = _stream(corpus_path, store, layout=layout, boundary_id=1)
    _assert_same(_batches(again), plain)
    assert isinstance(_root(again._plan(0).layout.indices), mmap.mmap)  # came from the file
    assert os.listdir(tmp_path / "plans") == files  # nothing rewritten next to it


def test_the_global_plan_serves_every_batch_shape(corpus_path: Path, tmp_path: Path) -> None:
    store = PlanFiles(tmp_path / "plans")
    _stream(corpus_path, store, layout="global", world_size=2, batch_size=3).num_batches(0)
    cached = _stream(corpus_path, store, layout="global", world_size=4, batch_size=1)
    fresh = _stream(corpus_path, None, layout="global", world_size=4, batch_size=1)
    assert cached.num_batches(0) == fresh.num_batches(0)
    _assert_same(_batches(cached), _batches(fresh))
    assert len(os.listdir(tmp_path / "plans")) == 1


def test_other_streams_get_their_own_plans(corpus_path: Path, tmp_path: Path) -> None:
    store = PlanFiles(tmp_path / "plans")
    for seed in (0, 1):
        for rank in (0, 2):
            corpus = _stream(corpus_path, store, seed=seed, rank=rank)
            _assert_same(
                _batches(corpus), _batches(_stream(corpus_path, None, seed=seed, rank=rank))
            )
    _stream(corpus_path, store).num_batches(1)  # another epoch
    assert len(os.listdir(tmp_path / "plans")) == 5


def _corruptions() -> list[Callable[[bytes], bytes]]:
    def flip_header(data: bytes) -> bytes:
        return data[:50] + bytes([data[50] ^ 0xFF]) + data[51:]

    def truncate(data: bytes) -> bytes:
        return data[: len(data) - 9]

    def garble_body(data: bytes) -> bytes:  # every byte after the header replaced
        header_end = 48 + int.from_bytes(data[8:16], "little")
        body = np.frombuffer(data[header_end:], dtype=np.uint8) ^ 0x5A
        return data[:header_end] + body.tobytes()

    def empty(data: bytes) -> bytes:
        return b""

    def bad_magic(data: bytes) -> bytes:
        return b"NOTAPLAN" + data[8:]

    return [flip_header, truncate, garble_body, empty, bad_magic]


@pytest.mark.parametrize("corrupt", _corruptions(), ids=lambda f: f.__name__)
def test_a_corrupt_plan_is_rebuilt_and_replaced(
    corpus_path: Path, tmp_path: Path, corrupt: Callable[[bytes], bytes]
) -> None:
    store = PlanFiles(tmp_path / "plans")
    plain = _batches(_stream(corpus_path, None))
    _stream(corpus_path, store).num_batches(0)
    (path,) = (tmp_path / "plans").iterdir()
    original = path.read_bytes()
    path.write_bytes(corrupt(original))
    _assert_same(_batches(_stream(corpus_path, store)), plain)
    assert path.read_bytes() == original  # rebuilt and saved again


def test_a_plan_of_another_identity_under_the_same_name_is_refused(
    corpus_path: Path, tmp_path: Path
) -> None:
    store = PlanFiles(tmp_path / "plans")
    seed0 = _stream(corpus_path, store, seed=0)
    seed1 = _stream(corpus_path, store, seed=1)
    seed1.num_batches(0)
    # Put seed 1's (self-consistent) plan where seed 0's belongs.
    identity = {**seed0.stream_identity(), "epoch": 0, "plan_format": 1}
    other = {**seed1.stream_identity(), "epoch": 0, "plan_format": 1}
    os.replace(store.path_for(other), store.path_for(identity))
    assert store.load(identity) is None
    _assert_same(_batches(seed0), _batches(_stream(corpus_path, None, seed=0)))


def test_arrays_that_disagree_with_the_corpus_are_rebuilt(
    corpus_path: Path, tmp_path: Path
) -> None:
    store = PlanFiles(tmp_path / "plans")
    corpus = _stream(corpus_path, store)
    identity = {**corpus.stream_identity(), "epoch": 0, "plan_format": 1}
    corpus.num_batches(0)
    arrays = {name: np.array(a) for name, a in (store.load(identity) or {}).items()}
    arrays["lengths"] = arrays["lengths"] + 1  # a plan for other documents
    store.save(identity, arrays)
    _assert_same(_batches(_stream(corpus_path, store)), _batches(_stream(corpus_path, None)))
    assert np.array_equal(store.load(identity)["lengths"], arrays["lengths"] - 1)  # type: ignore[index]


def test_a_selector_disables_the_store(corpus_path: Path, tmp_path: Path) -> None:
    def reverse(order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
        return order[::-1]

    corpus = _stream(corpus_path, PlanFiles(tmp_path / "plans"), sequence_selector=reverse)
    corpus.num_batches(0)
    assert not (tmp_path / "plans").exists()


def test_bad_stores_are_rejected(corpus_path: Path) -> None:
    with pytest.raises(ArgumentTypeError, match="plan_store"):
        _stream(corpus_path, object())  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="directory"):
        PlanFiles(3)  # type: ignore[arg-type]


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 99), max_size=12), max_size=30),
    st.integers(1, 5),
    st.integers(1, 3),
    st.sampled_from(["per-rank", "global"]),
    st.sampled_from([None, 100]),
)
def test_cached_plans_give_the_same_batches_and_resume_points(
    tmp_path_factory: pytest.TempPathFactory,
    documents: list[list[int]],
    block: int,
    batch_size: int,
    layout: str,
    boundary: int | None,
) -> None:
    arrays = [np.array(d, dtype=np.int64) for d in documents]
    store = PlanFiles(tmp_path_factory.mktemp("plans"))
    options: dict[str, Any] = {
        "rank": 0,
        "world_size": 2,
        "block": block,
        "batch_size": batch_size,
        "layout": layout,
        "boundary_id": boundary,
    }
    fresh = StreamingCorpus(arrays, **options)
    writer = StreamingCorpus(arrays, plan_store=store, **options)
    reader = StreamingCorpus(arrays, plan_store=store, **options)
    for epoch in (0, 1):
        expected = _batches(fresh, epoch)
        _assert_same(_batches(writer, epoch), expected)
        _assert_same(_batches(reader, epoch), expected)
    assert reader.state_dict() == fresh.state_dict()
