"""Smoke test of ``tools/bench_peers.py``: it runs with whatever peers are installed.

The figures themselves are measurements, not asserted; what is checked is that the run
finishes, that every method (mixle's, the floors' and each installed peer's) has a
positive finite ratio to its floor, and that the table, the JSON and the PNG exist.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from tests.tools._run import run_tool
from tools import _peer_methods
from tools._peer_methods import MODULES, installed, rows_from_documents
from tools.bench_peers import make_corpus


def test_quick_run_writes_table_json_and_png_with_positive_ratios(tmp_path: Path) -> None:
    table, figures, png = tmp_path / "peers.md", tmp_path / "peers.json", tmp_path / "peers.png"
    result = run_tool(
        "bench_peers.py",
        "--quick",
        "--workdir",
        str(tmp_path / "work"),
        "--table",
        str(table),
        "--json",
        str(figures),
        "--png",
        str(png),
    )
    rows = json.loads(figures.read_text())["rows"]
    names = {row["method"] for row in rows}
    assert {
        "concat+tofile",
        "mixle CorpusWriter",
        "mixle open_corpus",
        "floor: row slices",
        "mixle StreamingCorpus",
        "mixle StreamingCorpus +ids",
        "mixle TokenStream",
    } <= names
    for row in rows:
        assert math.isfinite(row["ratio"]) and row["ratio"] > 0, row
        assert row["value"] > 0, row
    for group in ("write", "read", "rows"):
        floors = [row for row in rows if row["group"] == group and row["kind"] == "floor"]
        assert len(floors) == 1 and floors[0]["ratio"] == pytest.approx(1.0)
    expected_peers = {
        "megatron": "Megatron IndexedDataset",
        "litdata": "LitData TokensLoader",
        "mds": "MDS StreamingDataset",
    }
    for peer, method in expected_peers.items():
        present = importlib.util.find_spec(MODULES[peer]) is not None
        assert (method in names) == present, (peer, sorted(names))
        if not present:
            assert "pip install --no-deps" in result.stdout
    text = table.read_text()
    assert "| measure | method |" in text and "**mixle StreamingCorpus**" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert text in result.stdout


def test_missing_peer_is_skipped_with_its_install_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(_peer_methods.MODULES, "mds", "no_such_module_for_mixle_tests")
    assert not installed("mds")
    out = capsys.readouterr().out
    assert "skipping mds: not installed" in out
    assert _peer_methods.INSTALL["mds"] in out and "--no-deps" in out


def test_make_corpus_has_exactly_the_requested_tokens_and_documents(tmp_path: Path) -> None:
    corpus = make_corpus(1_000_003, 2_001, seed=0, work=tmp_path)
    lengths = [len(document) for document in corpus.documents]
    assert len(lengths) == 2_001 and sum(lengths) == 1_000_003 and min(lengths) >= 1
    assert corpus.num_tokens == 1_000_003
    again = make_corpus(1_000_003, 2_001, seed=0, work=tmp_path)
    assert all(np.array_equal(a, b) for a, b in zip(corpus.documents, again.documents, strict=True))


def test_rows_from_documents_cuts_the_concatenated_stream_into_overlapping_rows() -> None:
    rng = np.random.default_rng(3)
    documents = [rng.integers(0, 1000, rng.integers(1, 50), dtype=np.uint16) for _ in range(400)]
    stream = np.concatenate(documents).astype(np.int64)
    block, batch = 7, 3
    batches = list(rows_from_documents(iter(documents), block, batch))
    assert batches, "the documents hold several batches"
    for number, rows in enumerate(batches):
        assert rows.dtype == np.int64 and rows.shape == (batch, block + 1)
        for row in range(batch):
            start = (number * batch + row) * block
            np.testing.assert_array_equal(rows[row], stream[start : start + block + 1])
    assert (len(batches) + 1) * batch * block + 1 > stream.shape[0]  # no full batch left out
