"""A changed plan file is rebuilt wherever the change is found, never trusted nor fatal.

Version 3 plan files are verified a chunk at a time, on first read. A changed chunk is
found at open (the header, the chunk table, ``counts``, the end starts, the chunks the
first batch reads) or mid-epoch (a chunk a later batch reads, possibly in a DataLoader
worker); either way the plan is rebuilt from the corpus, the file rewritten with the
intact plan, a warning naming the file (and the chunk) logged on ``mixle.plans``, and
every batch is bitwise the batch of a run without a plan store.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from mixle.corpus import CorpusWriter, open_corpus
from mixle.corpus.storage.plan_cache import PlanFiles
from mixle.corpus.storage.plan_chunks import StoredPlan
from mixle.data import Mixture, MixtureSource
from mixle.data._packing_options import PackingOptions
from mixle.data._plan_store import VerifiedArrays
from mixle.data.streaming_corpus import StreamingCorpus
from mixle.data.torch import StreamingDataset
from mixle.errors import CorpusFormatError
from tests.corpus.conftest import random_documents
from tests.corpus.storage.test_plan_file_integrity import _edit_element, _header

PER_CHUNK = (1 << 16) // 8  # int64 elements per 64 KiB chunk
DOCUMENTS = 5 * PER_CHUNK + 123  # per-rank plans of 2 ranks: 3 chunks an array
BLOCK, BATCH = 32, 16
ARRAYS = ("indices", "lengths", "starts")

Batches = list[tuple[np.ndarray, ...]]


@pytest.fixture(scope="module")
def corpus_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Lengths 1-4: a changed length or start shows in the batches; a changed index too
    # (the tokens differ), unless the sampled length check catches it first.
    rng = np.random.default_rng(25)
    lengths = rng.integers(1, 5, size=DOCUMENTS)
    path = tmp_path_factory.mktemp("rebuild") / "corpus"
    with CorpusWriter(path, vocab_size=1000) as writer:
        writer.add_many([rng.integers(0, 998, size=int(n)) for n in lengths])
    return path


def _stream(
    path: Path, store: PlanFiles | None, layout: str, packing: str = "concatenate"
) -> StreamingCorpus:
    return StreamingCorpus(
        open_corpus(path),
        rank=1 if layout == "per-rank" else 0,
        world_size=2 if layout == "per-rank" else 1,
        block=BLOCK,
        batch_size=BATCH,
        boundary_id=999,
        layout=layout,
        packing=PackingOptions(packing, window_documents=4096),
        plan_store=store,
        order="permutation",  # the order whose plans a store keeps
    )


def _arrays(batches: Iterable[Any]) -> Batches:
    return [tuple(np.array(part) for part in batch.as_tuple()) for batch in batches]


def _assert_same(got: Batches, expected: Batches) -> None:
    assert len(got) == len(expected)
    for left, right in zip(got, expected, strict=True):
        assert len(left) == len(right)
        for x, y in zip(left, right, strict=True):
            assert x.dtype == y.dtype
            np.testing.assert_array_equal(x, y)


_PLAIN: dict[tuple[str, str], Batches] = {}


def _plain(path: Path, layout: str, packing: str = "concatenate") -> Batches:
    """The epoch's batches of a run without a plan store (computed once)."""
    key = (layout, packing)
    if key not in _PLAIN:
        _PLAIN[key] = _arrays(_stream(path, None, layout, packing).iter_epoch(0))
    return _PLAIN[key]


def _saved_plan(path: Path, directory: Path, layout: str, packing: str = "concatenate") -> Path:
    """Write the epoch-0 plan of ``layout`` to ``directory``; the one file."""
    _stream(path, PlanFiles(directory), layout, packing).num_batches(0)
    (plan,) = directory.iterdir()
    return plan


def _element(data: bytes, name: str, index: int) -> int:
    fields, body = _header(data)
    entry = fields["arrays"][name]
    return int(np.frombuffer(data, "<i8", count=1, offset=body + entry["offset"] + 8 * index)[0])


def _site(data: bytes, name: str, which: str) -> int:
    """An element of array ``name`` in its first, middle or last chunk, never one of the
    documents a loaded plan samples (that check would reject the plan at open)."""
    count = _header(data)[0]["arrays"][name]["shape"][0]
    chunks = -(-count // PER_CHUNK)
    assert chunks >= 3
    index = {"first": 3, "middle": (chunks // 2) * PER_CHUNK + 5, "last": count - 3}[which]
    documents = _header(data)[0]["arrays"]["indices"]["shape"][0]
    sampled = set(np.linspace(0, documents - 1, min(documents, 64)).astype(np.int64).tolist())
    sampled |= {s + 1 for s in sampled}  # starts[picks + 1] is read too
    while index in sampled:
        index -= 1
    return index


def _first_batch_reading(data: bytes, name: str, index: int) -> int:
    """A batch whose rows hold the document at plan position ``index`` (``starts`` of
    the intact plan), so that reading it reads element ``index`` of the arrays."""
    position = min(index, _header(data)[0]["arrays"]["indices"]["shape"][0] - 1)
    return int(_element(data, "starts", position) // BLOCK // BATCH)


def _flip_header(data: bytes) -> bytes:
    at = data.index(b'"identity"') + 3  # a byte of the header's JSON: its SHA-256 fails
    return data[:at] + bytes([data[at] ^ 0x20]) + data[at + 1 :]


def _flip_table(data: bytes) -> bytes:
    fields, body = _header(data)
    at = body + fields["table"]["offset"] + 4 * (fields["table"]["count"] // 2) + 1
    return data[:at] + bytes([data[at] ^ 0x08]) + data[at + 1 :]


def _damaged(data: bytes, site: str) -> tuple[bytes, int | None, str]:
    """``data`` changed at ``site``; the element's plan position (``None``: found on
    open) and what the warning names."""
    if site == "header":
        return _flip_header(data), None, "has a header that fails its SHA-256 check"
    if site == "table":
        return _flip_table(data), None, "has a chunk table that fails its CRC-32 check"
    if site == "counts":  # the row count: verified before the plan is judged
        return _edit_element(data, "counts", 0, lambda v: v + 1), None, "chunk 0 of array `counts`"
    name, which = site.split(":")
    index = _site(data, name, which)
    chunk = index // PER_CHUNK
    return (
        _edit_element(data, name, index, lambda v: v ^ 1),
        index,
        f"chunk {chunk} of array `{name}`",
    )


def _sites() -> list[str]:
    return [f"{a}:{w}" for a in ARRAYS for w in ("first", "middle", "last")] + [
        "counts",
        "table",
        "header",
    ]


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "mixle.plans"]


@pytest.mark.parametrize("layout", ["global", "per-rank"])
@pytest.mark.parametrize("site", _sites())
def test_a_change_the_first_batch_reads_is_rebuilt_before_that_batch(
    corpus_path: Path,
    tmp_path: Path,
    layout: str,
    site: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    plan = _saved_plan(corpus_path, tmp_path / "plans", layout)
    original = plan.read_bytes()
    damaged, index, named = _damaged(original, site)
    plan.write_bytes(damaged)
    start = 0 if index is None else _first_batch_reading(original, site.split(":")[0], index)
    resumed = _stream(corpus_path, PlanFiles(tmp_path / "plans"), layout)
    with caplog.at_level(logging.WARNING, "mixle.plans"):
        batches = resumed.iter_epoch(0, start_batch=start)
        got = _arrays([next(batches)])
        (message,) = _messages(caplog)  # found by the restart's first batch
        assert str(plan) in message and named in message and "rebuilt" in message
        assert plan.read_bytes() == original  # rewritten before the batch came out
        got += _arrays(batches)
    _assert_same(got, _plain(corpus_path, layout)[start:])
    assert len(_messages(caplog)) == 1


def _later_sites() -> list[tuple[str, str]]:
    """Sites the first two batches from the epoch's start do not read. (A restart's
    bisection probes a start in the middle chunk, and reads the last start: in a plan
    of three chunks a changed start is always found at open.)"""
    sites = ["indices:middle", "indices:last", "lengths:middle", "lengths:last"]
    return [(layout, site) for layout in ("global", "per-rank") for site in sites] + [
        ("global", "starts:middle")  # six chunks: the middle one is not probed
    ]


@pytest.mark.parametrize(("layout", "site"), _later_sites())
def test_a_change_found_mid_epoch_is_rebuilt_and_the_epoch_goes_on_bitwise(
    corpus_path: Path,
    tmp_path: Path,
    layout: str,
    site: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    plan = _saved_plan(corpus_path, tmp_path / "plans", layout)
    original = plan.read_bytes()
    damaged, _, named = _damaged(original, site)
    plan.write_bytes(damaged)
    resumed = _stream(corpus_path, PlanFiles(tmp_path / "plans"), layout)
    with caplog.at_level(logging.WARNING, "mixle.plans"):
        batches = resumed.iter_epoch(0)
        got = _arrays([next(batches), next(batches)])
        assert not _messages(caplog) and plan.read_bytes() == damaged  # not read yet
        got += _arrays(batches)
        (message,) = _messages(caplog)
    assert f"{plan}: {named}" in message and "rebuilt" in message
    assert plan.read_bytes() == original
    _assert_same(got, _plain(corpus_path, layout))
    # The rewritten file loads clean: a fresh restart reads it without a warning.
    caplog.clear()
    with caplog.at_level(logging.WARNING, "mixle.plans"):
        again = _arrays(_stream(corpus_path, PlanFiles(tmp_path / "plans"), layout).iter_epoch(0))
    assert not _messages(caplog)
    _assert_same(again, _plain(corpus_path, layout))


@pytest.mark.parametrize("site", ["indices:middle", "indices:last", "lengths:middle", "counts"])
def test_a_changed_best_fit_plan_is_rebuilt(
    corpus_path: Path, tmp_path: Path, site: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Best-fit reads every length at open (the window totals); indices window by window.
    plan = _saved_plan(corpus_path, tmp_path / "plans", "global", "best_fit")
    original = plan.read_bytes()
    damaged, _, named = _damaged(original, site)
    plan.write_bytes(damaged)
    resumed = _stream(corpus_path, PlanFiles(tmp_path / "plans"), "global", "best_fit")
    with caplog.at_level(logging.WARNING, "mixle.plans"):
        got = _arrays(resumed.iter_epoch(0))
    (message,) = _messages(caplog)
    assert f"{plan}: {named}" in message
    assert plan.read_bytes() == original
    _assert_same(got, _plain(corpus_path, "global", "best_fit"))


@pytest.mark.parametrize("packing", ["concatenate", "best_fit"])
def test_a_mixture_source_plan_changed_mid_epoch_is_rebuilt(
    corpus_path: Path, make_corpus: Callable[..., Path], tmp_path: Path, packing: str
) -> None:
    small = make_corpus(random_documents(5, 40, max_len=12), vocab_size=1000)

    def mixture(store: PlanFiles | None) -> Mixture:
        sources = [
            MixtureSource(open_corpus(corpus_path), 0.7, "big"),
            MixtureSource(open_corpus(small), 0.3, "small"),
        ]
        return Mixture(
            sources, block=BLOCK, batch_size=4, boundary_id=999, plan_store=store,
            order="permutation", packing=PackingOptions(packing, window_documents=4096),
        )  # fmt: skip

    store = PlanFiles(tmp_path / "plans")
    writer = mixture(store)
    # Global rows [end - 200, end) hold the big source's last rows of epoch 0 (its share
    # of any prefix is within one row of 0.7), which read the last chunk of `indices`;
    # best-fit rows follow the packing of windows, so read them all.
    end = int(writer.rows[0].rows_per_epoch / 0.7) + 2
    windows = [(0, 8), (end - 200 if packing == "concatenate" else 0, end)]
    plain = [[np.array(a) for a in mixture(None).rows_at(*w)] for w in windows]
    for window in windows:
        writer.rows_at(*window)
    plan = Path(store.path_for(writer.rows[0]._identity(epoch=0)))  # type: ignore[attr-defined]
    original = plan.read_bytes()
    damaged, _, _ = _damaged(original, "indices:last")
    plan.write_bytes(damaged)
    resumed = mixture(PlanFiles(tmp_path / "plans"))
    for window, want, rewritten in zip(windows, plain, (damaged, original), strict=True):
        got = [np.array(a) for a in resumed.rows_at(*window)]
        for left, right in zip(got, want, strict=True):
            np.testing.assert_array_equal(left, right)
        assert plan.read_bytes() == rewritten  # the first rows do not read the last chunk


@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_dataloader_workers_that_find_a_changed_chunk_rebuild_it(
    corpus_path: Path, tmp_path: Path, context: str
) -> None:
    # Each worker loads the plan and finds the change on its own (mid-epoch: the
    # first batches do not read the last chunk); each rebuilds and rewrites the same
    # bytes, atomically, and the loader's batches are the plain run's.
    plan = _saved_plan(corpus_path, tmp_path / "plans", "global")
    original = plan.read_bytes()
    damaged, _, _ = _damaged(original, "indices:last")
    plan.write_bytes(damaged)
    resumed = _stream(corpus_path, PlanFiles(tmp_path / "plans"), "global")
    loader = DataLoader(
        StreamingDataset(resumed, num_epochs=1),
        batch_size=None,
        num_workers=2,
        multiprocessing_context=context,
    )
    assert plan.read_bytes() == damaged  # the main process has not read the last chunk
    got = [tuple(part.numpy() for part in item) for item in loader]
    _assert_same(got, _plain(corpus_path, "global"))
    assert plan.read_bytes() == original


def _covered(data: bytes) -> list[tuple[int, int]]:
    """Byte ranges of a plan file a reader checks: prefix and header, each array, the
    table (the zero padding between them is read by nobody)."""
    fields, body = _header(data)
    length = int.from_bytes(data[8:16], "little")
    ranges = [(0, 48 + length)]
    for entry in fields["arrays"].values():
        size = int(np.prod(entry["shape"])) * np.dtype(entry["dtype"]).itemsize
        ranges.append((body + entry["offset"], body + entry["offset"] + size))
    table = body + fields["table"]["offset"]
    return [*ranges, (table, table + 4 * fields["table"]["count"])]


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), layout=st.sampled_from(["global", "per-rank"]))
def test_a_flipped_bit_anywhere_never_changes_a_batch(
    corpus_path: Path, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, layout: str
) -> None:
    directory = tmp_path_factory.mktemp("plans")
    plan = _saved_plan(corpus_path, directory, layout)
    original = plan.read_bytes()
    fields, body = _header(original)
    # Bits at and around the chunk boundaries of every array, and anywhere at all.
    boundaries = [
        body + entry["offset"] + k * (1 << 16) + delta
        for entry in fields["arrays"].values()
        for k in range(1, -(-entry["shape"][0] * 8 // (1 << 16)))
        for delta in (-1, 0)
    ]
    at = data.draw(
        st.one_of(st.sampled_from(boundaries), st.integers(0, len(original) - 1)), label="byte"
    )
    bit = data.draw(st.integers(0, 7), label="bit")
    plain = _plain(corpus_path, layout)
    start = data.draw(st.integers(0, len(plain) - 1), label="start batch")
    damaged = original[:at] + bytes([original[at] ^ (1 << bit)]) + original[at + 1 :]
    plan.write_bytes(damaged)
    resumed = _stream(corpus_path, PlanFiles(directory), layout)
    got = _arrays(resumed.iter_epoch(0, start_batch=start))
    _assert_same(got, plain[start:])
    _assert_same(_arrays(resumed.iter_epoch(0)), plain)  # every chunk read by now
    if any(low <= at < high for low, high in _covered(original)):
        assert plan.read_bytes() == original  # found and rewritten
    else:
        assert plan.read_bytes() == damaged  # padding: nobody reads it


def _changed_store(directory: Path) -> tuple[PlanFiles, dict[str, Any], dict[str, np.ndarray]]:
    """A store holding a 3-chunk plan whose chunk 1 of ``indices`` changed on disk."""
    store = PlanFiles(directory)
    identity = {"test": "verified arrays"}
    arrays = {"indices": np.arange(3 * PER_CHUNK), "counts": np.array([7, 2, 1])}
    store.save(identity, arrays)
    (plan,) = directory.iterdir()
    plan.write_bytes(_edit_element(plan.read_bytes(), "indices", PER_CHUNK + 9, lambda v: ~v))
    return store, identity, arrays


def test_without_a_rebuild_a_changed_range_raises_naming_file_and_chunk(tmp_path: Path) -> None:
    store, identity, arrays = _changed_store(tmp_path)
    verified = VerifiedArrays(store.load(identity))  # type: ignore[arg-type]
    np.testing.assert_array_equal(verified.read("indices", 5, 9), arrays["indices"][5:9])
    with pytest.raises(CorpusFormatError, match="chunk 1 of array `indices`"):
        verified.read("indices", PER_CHUNK, PER_CHUNK + 20)
    assert not verified.rebuilt


def test_threads_reading_a_changed_range_rebuild_it_once(tmp_path: Path) -> None:
    store, identity, arrays = _changed_store(tmp_path)
    calls: list[int] = []
    gate = threading.Barrier(4)

    def rebuild() -> dict[str, np.ndarray]:
        calls.append(1)
        time.sleep(0.05)  # the other threads reach the lock meanwhile
        store.save(identity, arrays)
        return arrays

    verified = VerifiedArrays(store.load(identity), rebuild)  # type: ignore[arg-type]
    results: list[np.ndarray] = []

    def read() -> None:
        gate.wait()
        results.append(verified.read("indices", PER_CHUNK, 2 * PER_CHUNK))

    threads = [threading.Thread(target=read) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and len(results) == 4 and verified.rebuilt
    for got in results:
        np.testing.assert_array_equal(got, arrays["indices"][PER_CHUNK : 2 * PER_CHUNK])
    reloaded = store.load(identity)
    assert isinstance(reloaded, StoredPlan)
    reloaded.check_all()  # the rewritten file is intact


def test_a_rebuild_that_gives_another_plan_is_refused(tmp_path: Path) -> None:
    store, identity, _ = _changed_store(tmp_path)
    other = {"indices": np.arange(3 * PER_CHUNK), "counts": np.array([8, 2, 1])}
    verified = VerifiedArrays(store.load(identity), lambda: other)  # type: ignore[arg-type]
    with pytest.raises(CorpusFormatError, match="the corpus changed while it was being streamed"):
        verified.read("indices", PER_CHUNK, PER_CHUNK + 1)
