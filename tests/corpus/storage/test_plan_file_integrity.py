"""Epoch-plan files never change a batch (issue #32, classes 1, 5 and 10).

Every array byte is covered by a chunk's CRC-32 in the chunk table, whose own CRC-32 is
in the checksummed header: a changed batch count, a stale (version-1) file or a forged
header is rebuilt, giving the batches of a run without the file; a flipped bit in the
arrays is found when a read touches its chunk, and the plan rebuilt (a warning names the
file and chunk); something other than a regular file at a plan's path is refused by
name, without hanging or reading a device.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mixle.corpus import open_corpus
from mixle.corpus.storage.plan_cache import PlanFiles
from mixle.data import Mixture, MixtureSource
from mixle.data._plan_store import PLAN_FORMAT
from mixle.data.streaming_corpus import StreamingCorpus
from mixle.errors import CorpusFormatError
from tests.corpus.hardening_helpers import deadline

_PREFIX = struct.Struct("<8sQ32s")


def _equal_length_documents(count: int = 240, length: int = 8) -> list[np.ndarray]:
    """Pre-chunked data: every document has the same length, so the sampled length
    check of a loaded plan cannot tell one document from another."""
    return [np.arange(i * length, (i + 1) * length, dtype=np.int64) % 997 for i in range(count)]


def _header(data: bytes) -> tuple[dict[str, Any], int]:
    """A plan file's header fields and the offset of its body."""
    _, length, _ = _PREFIX.unpack_from(data, 0)
    body = -(-(_PREFIX.size + length) // 64) * 64
    return json.loads(data[_PREFIX.size : _PREFIX.size + length]), body


def _array_position(data: bytes, name: str) -> tuple[int, np.dtype[Any]]:
    """The file offset of array ``name``'s first byte, and its dtype."""
    fields, body = _header(data)
    entry = fields["arrays"][name]
    return body + entry["offset"], np.dtype(entry["dtype"])


def _edit_element(data: bytes, name: str, index: int, edit: Callable[[int], int]) -> bytes:
    """``data`` with element ``index`` of array ``name`` replaced by ``edit(element)``."""
    start, dtype = _array_position(data, name)
    at = start + index * dtype.itemsize
    value = int(np.frombuffer(data, dtype=dtype, count=1, offset=at)[0])
    return data[:at] + np.array([edit(value)], dtype=dtype).tobytes() + data[at + dtype.itemsize :]


def with_header(data: bytes, header: bytes) -> bytes:
    """``data`` with its header replaced by ``header`` and re-sealed (its SHA-256), as a
    forger would; the body moves with the header's new length."""
    _, body = _header(data)
    prefix = _PREFIX.pack(b"MIXLEPLN", len(header), hashlib.sha256(header).digest())
    return prefix + header + b"\0" * (-(_PREFIX.size + len(header)) % 64) + data[body:]


def reseal(data: bytes, edit: Callable[[dict[str, Any]], Any]) -> bytes:
    """``data`` with its header fields replaced by ``edit(fields)`` (or the fields,
    edited in place, when it returns ``None``), re-sealed (see :func:`with_header`)."""
    fields, _ = _header(data)
    edited = edit(fields)
    return with_header(data, json.dumps(fields if edited is None else edited).encode())


def _batches(corpus: StreamingCorpus) -> list[list[np.ndarray]]:
    return [[np.array(a) for a in batch] for batch in corpus.epoch_batches(0)]


def _assert_same(a: list[list[np.ndarray]], b: list[list[np.ndarray]]) -> None:
    assert len(a) == len(b)
    for left, right in zip(a, b, strict=True):
        for x, y in zip(left, right, strict=True):
            np.testing.assert_array_equal(x, y)


@pytest.fixture
def corpus_path(make_corpus: Callable[..., Path]) -> Path:
    return make_corpus(_equal_length_documents(), vocab_size=1000)


def _stream(path: Path, store: PlanFiles | None, layout: str) -> StreamingCorpus:
    return StreamingCorpus(
        open_corpus(path),
        rank=1,
        world_size=3,
        block=8,
        batch_size=2,
        layout=layout,
        plan_store=store,
        order="permutation",  # the order whose plans a store keeps
    )


def _plan_file(tmp_path: Path) -> Path:
    (path,) = (tmp_path / "plans").iterdir()
    return path


def _assert_rebuilt(
    path: Path, store: PlanFiles, layout: str, damage: Callable[[bytes], bytes], tmp: Path
) -> None:
    """Damage the one plan file; a fresh stream gives the plain batches and rewrites it."""
    plain = _batches(_stream(path, None, layout))
    _stream(path, store, layout).num_batches(0)
    plan = _plan_file(tmp)
    original = plan.read_bytes()
    damaged = damage(original)
    assert damaged != original
    plan.write_bytes(damaged)
    _assert_same(_batches(_stream(path, store, layout)), plain)
    assert plan.read_bytes() == original  # rebuilt and saved again


@pytest.mark.parametrize("layout", ["global", "per-rank"])
@pytest.mark.parametrize("bit", [0, 3])
def test_a_flipped_bit_in_the_indices_of_a_plan_is_rebuilt_naming_file_and_chunk(
    corpus_path: Path, tmp_path: Path, layout: str, bit: int, caplog: pytest.LogCaptureFixture
) -> None:
    def flip(data: bytes) -> bytes:  # another document of the same length, in range
        return _edit_element(data, "indices", 10, lambda v: v ^ (1 << bit))

    store = PlanFiles(tmp_path / "plans")
    with caplog.at_level(logging.WARNING, "mixle.plans"):
        _assert_rebuilt(corpus_path, store, layout, flip, tmp_path)
    (record,) = caplog.records  # only the CRC-32 of the chunk tells
    assert f"{_plan_file(tmp_path)}: chunk 0 of array `indices`" in record.getMessage()


@pytest.mark.parametrize("delta", [-1, 1])
def test_a_changed_batch_count_of_a_per_rank_plan_is_rebuilt(
    corpus_path: Path, tmp_path: Path, delta: int
) -> None:
    def recount(data: bytes) -> bytes:  # counts = [rows, num_batches, has_boundary]
        return _edit_element(data, "counts", 1, lambda v: v + delta)

    store = PlanFiles(tmp_path / "plans")
    _assert_rebuilt(corpus_path, store, "per-rank", recount, tmp_path)


def test_a_flipped_bit_in_a_mixture_plan_is_rebuilt(
    make_corpus: Callable[..., Path], tmp_path: Path
) -> None:
    paths = [make_corpus(_equal_length_documents(count), vocab_size=1000) for count in (64, 40)]

    def mixture(store: PlanFiles | None) -> Mixture:
        sources = [
            MixtureSource(open_corpus(p), w, n)
            for p, w, n in zip(paths, (0.7, 0.3), ("a", "b"), strict=True)
        ]
        return Mixture(sources, block=8, batch_size=2, plan_store=store, order="permutation")

    def rows(m: Mixture) -> list[list[np.ndarray]]:
        return [[np.array(a) for a in m.rows_at(0, 120)]]

    store = PlanFiles(tmp_path / "plans")
    plain = rows(mixture(None))
    writer = mixture(store)
    rows(writer)
    plan = Path(store.path_for(writer.rows[0]._identity(epoch=0)))  # type: ignore[attr-defined]
    original = plan.read_bytes()
    plan.write_bytes(_edit_element(original, "indices", 3, lambda v: v ^ 1))
    _assert_same(rows(mixture(store)), plain)
    assert plan.read_bytes() == original


def _forgeries() -> list[Callable[[dict[str, Any]], Any]]:
    """Header edits, each re-sealed: the file passes its header digest but lies."""

    def version_1(f: dict[str, Any]) -> None:  # a file written before the CRC-32s
        f["version"] = 1
        del f["table"], f["chunk_bytes"]
        for entry in f["arrays"].values():
            del entry["first_chunk"]

    def wrong_table_crc(f: dict[str, Any]) -> None:
        f["table"]["crc32"] ^= 1

    def version_2_without_crcs(f: dict[str, Any]) -> None:  # chunks claimed whole-checked
        f["version"] = 2

    def arrays_a_list(f: dict[str, Any]) -> None:
        f["arrays"] = [1, 2]

    def object_dtype(f: dict[str, Any]) -> None:
        f["arrays"]["indices"]["dtype"] = "|O"

    def unknown_dtype(f: dict[str, Any]) -> None:
        f["arrays"]["indices"]["dtype"] = "<q9"

    def negative_shape(f: dict[str, Any]) -> None:
        f["arrays"]["indices"]["shape"] = [-5]

    def huge_shape(f: dict[str, Any]) -> None:
        f["arrays"]["indices"]["shape"] = [0, 10**30]

    def offset_past_the_end(f: dict[str, Any]) -> None:
        f["arrays"]["starts"]["offset"] = 2**62

    def string_offset(f: dict[str, Any]) -> None:
        f["arrays"]["starts"]["offset"] = "0"

    def not_a_dict(f: dict[str, Any]) -> Any:
        return [f]

    return [
        version_1,
        wrong_table_crc,
        version_2_without_crcs,
        arrays_a_list,
        object_dtype,
        unknown_dtype,
        negative_shape,
        huge_shape,
        offset_past_the_end,
        string_offset,
        not_a_dict,
    ]


@pytest.mark.parametrize("forge", _forgeries(), ids=lambda f: f.__name__)
def test_a_forged_or_stale_header_is_rebuilt(
    corpus_path: Path, tmp_path: Path, forge: Callable[[dict[str, Any]], Any]
) -> None:
    store = PlanFiles(tmp_path / "plans")
    _assert_rebuilt(corpus_path, store, "global", lambda d: reseal(d, forge), tmp_path)


def test_a_header_nested_100k_deep_is_rebuilt(corpus_path: Path, tmp_path: Path) -> None:
    nested = b"[" * 100_000 + b"]" * 100_000
    store = PlanFiles(tmp_path / "plans")
    _assert_rebuilt(corpus_path, store, "global", lambda d: with_header(d, nested), tmp_path)


def _identity(corpus: StreamingCorpus) -> dict[str, Any]:
    return {**corpus.stream_identity(), "epoch": 0, "plan_format": PLAN_FORMAT}


def _special(kind: str, path: Path) -> None:
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


@pytest.mark.parametrize("kind", ["directory", "fifo", "link to /dev/zero"])
def test_a_plan_path_that_is_not_a_regular_file_is_refused_by_name(
    corpus_path: Path, tmp_path: Path, kind: str
) -> None:
    store = PlanFiles(tmp_path / "plans")
    corpus = _stream(corpus_path, store, "global")
    target = Path(store.path_for(_identity(corpus)))
    target.parent.mkdir()
    _special(kind, target)
    expected = {"directory": "a directory", "fifo": "a FIFO", "link to /dev/zero": "device"}
    with deadline(10), pytest.raises(CorpusFormatError, match=expected[kind]) as caught:
        corpus.num_batches(0)
    assert str(target) in str(caught.value) and "remove it" in str(caught.value)


def test_a_dangling_link_at_a_plan_path_is_replaced_by_the_plan(
    corpus_path: Path, tmp_path: Path
) -> None:
    store = PlanFiles(tmp_path / "plans")
    corpus = _stream(corpus_path, store, "global")
    target = Path(store.path_for(_identity(corpus)))
    target.parent.mkdir()
    target.symlink_to(tmp_path / "nowhere")
    _assert_same(_batches(corpus), _batches(_stream(corpus_path, None, "global")))
    assert target.is_file() and not target.is_symlink()
