"""Broken and hostile ingest inputs (issue #18). Each case failed before the hardening
(a traceback, a hang, silently changed ids or a clobbered input) and passes after it:
under ``on_error="skip"`` the input becomes a reject naming file and position, under
``"raise"`` an :class:`IngestError` with nothing left behind."""

from __future__ import annotations

import gzip
import io
import json
import os
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from mixle.corpus import ingest, open_corpus
from mixle.errors import ArgumentError, IngestError
from tests.corpus.hardening_helpers import deadline, run_mixle

GOOD = {"input_ids": [7, 8, 9]}


def _jsonl_lines(*records: str) -> bytes:
    return "".join(record + "\n" for record in records).encode()


def _big_int(path: Path) -> str:
    path.write_bytes(_jsonl_lines(json.dumps(GOOD), '{"input_ids": [' + "9" * 5000 + "]}"))
    return "line 2"


def _deep(path: Path) -> str:
    path.write_bytes(_jsonl_lines('{"input_ids": ' + "[" * 100_000 + "]" * 100_000 + "}"))
    return "line 1"


def _gzip_truncated(path: Path) -> str:
    data = gzip.compress(_jsonl_lines(*[json.dumps({"input_ids": [i]}) for i in range(4000)]))
    path.write_bytes(data[: len(data) // 2])
    return "compressed stream is damaged"


def _gzip_flipped(path: Path) -> str:
    data = bytearray(gzip.compress(_jsonl_lines(*[json.dumps(GOOD)] * 200), compresslevel=0))
    data[len(data) // 2] ^= 0x10  # stored block: decodes "fine", only the CRC says no
    path.write_bytes(bytes(data))
    return "compressed stream is damaged"


def _npy_empty(path: Path) -> str:
    path.write_bytes(b"")
    return "npy"


def _npy_huge_header(path: Path) -> str:
    with open(path, "wb") as handle:
        np.lib.format.write_array_header_1_0(
            handle, {"descr": "<i8", "fortran_order": False, "shape": (2**40,)}
        )
        handle.write(b"\0" * 64)
    return "1099511627776"


def _parquet_corrupt_page(path: Path) -> str:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table({"input_ids": pa.array([[i, i + 1] for i in range(2000)])})
    pq.write_table(table, path, compression="NONE")
    data = bytearray(path.read_bytes())
    data[8:40] = b"\xff" * 32  # the first data page header
    path.write_bytes(bytes(data))
    return "row 0"


def _npz_corrupt(path: Path) -> str:
    handle = io.BytesIO()
    np.savez_compressed(handle, tokens=np.arange(5000) % 300, offsets=np.array([0, 2500, 5000]))
    data = bytearray(handle.getvalue())
    data[len(data) // 3] ^= 0xFF
    path.write_bytes(bytes(data))
    return "npz"


def _npz_stored_flipped(path: Path) -> str:
    handle = io.BytesIO()
    np.savez(handle, tokens=np.arange(5000, dtype=np.int64), offsets=np.array([0, 2500, 5000]))
    data = bytearray(handle.getvalue())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as archive:
        info = archive.getinfo("tokens.npy")
    data[info.header_offset + 30 + len("tokens.npy") + 128 + 4000] ^= 0x01
    path.write_bytes(bytes(data))
    return "CRC-32"


CASES: dict[str, tuple[str, Callable[[Path], str]]] = {
    "jsonl-5000-digit-id": ("a.jsonl", _big_int),
    "jsonl-100k-deep": ("a.jsonl", _deep),
    "jsonl-gz-truncated": ("a.jsonl.gz", _gzip_truncated),
    "jsonl-gz-bit-flip": ("a.jsonl.gz", _gzip_flipped),
    "npy-zero-bytes": ("a.npy", _npy_empty),
    "npy-2**40-header": ("a.npy", _npy_huge_header),
    "parquet-corrupt-page": ("a.parquet", _parquet_corrupt_page),
    "npz-corrupt-compressed": ("a.npz", _npz_corrupt),
    "npz-stored-bit-flip": ("a.npz", _npz_stored_flipped),
}


def _make(case: str, directory: Path) -> tuple[str, Path, str]:
    """Write ``case``'s broken input; return its name, path and the expected location."""
    name, make = CASES[case]
    return name, directory / name, make(directory / name)


@pytest.mark.parametrize("case", sorted(CASES))
def test_broken_input_is_a_reject_under_skip(tmp_path: Path, case: str) -> None:
    name, bad, where = _make(case, tmp_path)
    good = tmp_path / "good.jsonl"
    good.write_bytes(_jsonl_lines(json.dumps(GOOD)))
    with deadline(120):
        summary = ingest([good, bad], tmp_path / "out", on_error="skip", progress=False)
    assert summary.skipped >= 1
    rejects = [
        json.loads(line) for line in (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()
    ]
    assert any(name in r["where"] and where in r["where"] + r["reason"] for r in rejects), rejects
    docs = [d.tolist() for d in open_corpus(tmp_path / "out")]
    assert docs[0] == GOOD["input_ids"]  # what was readable is kept, exactly


@pytest.mark.parametrize("case", sorted(CASES))
def test_broken_input_fails_cleanly_under_raise(tmp_path: Path, case: str) -> None:
    name, bad, where = _make(case, tmp_path)
    out = tmp_path / "out"
    result = run_mixle("ingest", str(bad), str(out))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and name in result.stderr and where in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()  # no .mixle-ingest/ left behind
    again = run_mixle("ingest", str(bad), str(out))  # the same error, not "--resume"
    assert again.returncode == 2 and "--resume" not in again.stderr


def test_parquet_nulls_never_go_through_float64(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [[2**53 + 1, 2**60 + 3], [2**63 - 1], [1, None]]
    pq.write_table(
        pa.table({"input_ids": pa.array(rows, pa.list_(pa.int64()))}), tmp_path / "a.parquet"
    )
    summary = ingest([tmp_path / "a.parquet"], tmp_path / "out", on_error="skip", progress=False)
    assert [d.tolist() for d in open_corpus(tmp_path / "out")] == rows[:2]
    assert summary.skipped == 1
    reject = json.loads((tmp_path / "out" / "rejects.jsonl").read_text())
    assert "row 2" in reject["where"] and "position 1 is null" in reject["reason"]


def test_fifo_input_is_an_error_not_a_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "a.jsonl"
    os.mkfifo(fifo)
    with deadline(60), pytest.raises(IngestError, match="FIFO"):
        ingest([fifo], tmp_path / "out", progress=False)


def test_unwritable_rejects_fails_before_any_work(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_bytes(_jsonl_lines(json.dumps(GOOD)))
    target = tmp_path / "missing-dir" / "rejects.jsonl"
    with pytest.raises(ArgumentError, match="does not exist"):
        ingest([tmp_path / "a.jsonl"], tmp_path / "out", on_error="skip", rejects=target)
    assert not (tmp_path / "out").exists()


def test_rejects_may_not_overwrite_an_input(tmp_path: Path) -> None:
    data = _jsonl_lines(json.dumps(GOOD), "not json")
    (tmp_path / "a.jsonl").write_bytes(data)
    result = run_mixle(
        "ingest",
        str(tmp_path / "a.jsonl"),
        str(tmp_path / "out"),
        "--on-error",
        "skip",
        "--rejects",
        str(tmp_path / "a.jsonl"),
    )
    assert result.returncode == 2 and "must not be an input" in result.stderr
    assert (tmp_path / "a.jsonl").read_bytes() == data
    assert not (tmp_path / "out").exists()
