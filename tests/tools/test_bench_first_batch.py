"""``tools/bench_first_batch.py``: the files it writes for each peer, and a small run.

The timings are measurements, not asserted. What is checked: the Megatron ``.idx`` the
tool writes with numpy reads back, through Megatron's own ``IndexedDataset``, as the
documents it describes (and byte for byte as ``IndexedDatasetBuilder`` writes it); the
Grain state the tool resumes from is Grain's own and resumes the batches that follow it; a run at a small size prints a first-run and a
cached figure for mixle and every installed peer and writes its JSON and chart.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from tests.tools._run import run_tool
from tools.bench_first_batch import LABELS, grain_batches, grain_state, write_megatron_index


def _documents(tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(2)
    lengths = rng.integers(1, 9, 300).astype(np.int64)
    tokens = rng.integers(0, 50_000, int(lengths.sum()), dtype=np.uint16)
    flat = tmp_path / "tokens.bin"
    tokens.tofile(flat)
    return flat, tokens, lengths


@pytest.mark.skipif(importlib.util.find_spec("megatron") is None, reason="megatron-core")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # megatron-core's torch.jit use
@pytest.mark.filterwarnings("ignore::UserWarning")  # "no Transformer Engine" at import
def test_megatron_index_is_what_megatrons_builder_writes(tmp_path: Path) -> None:
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder

    flat, tokens, lengths = _documents(tmp_path)
    (tmp_path / "ours.bin").hardlink_to(flat)
    write_megatron_index(tmp_path / "ours", lengths)
    builder = IndexedDatasetBuilder(str(tmp_path / "theirs.bin"), dtype=np.uint16)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    for begin, end in itertools.pairwise(starts):
        builder.add_item(torch.from_numpy(tokens[begin:end]))
        builder.end_document()
    builder.finalize(str(tmp_path / "theirs.idx"))
    assert (tmp_path / "ours.idx").read_bytes() == (tmp_path / "theirs.idx").read_bytes()
    dataset = IndexedDataset(str(tmp_path / "ours"))
    assert len(dataset) == lengths.shape[0]
    for index in (0, 7, lengths.shape[0] - 1):
        np.testing.assert_array_equal(dataset[index], tokens[starts[index] : starts[index + 1]])


@pytest.mark.skipif(importlib.util.find_spec("grain") is None, reason="grain not installed")
def test_grain_state_resumes_the_batches_that_follow_it(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    lengths = rng.integers(1, 90, 3_000).astype(np.int64)
    flat = tmp_path / "tokens.bin"
    rng.integers(0, 50_000, int(lengths.sum()), dtype=np.uint16).tofile(flat)
    offsets = tmp_path / "offsets.npy"
    np.save(offsets, np.concatenate([[0], np.cumsum(lengths)]))
    state = grain_state(flat, offsets, 63, 4, 1_500)
    assert state["parent_state"]["next_index"] > 1_500
    continued = grain_batches(str(flat), str(offsets), 63, 4)
    continued.set_state(state)
    expected = [next(continued)["tokens"] for _ in range(3)]
    saved = json.loads(json.dumps(state))  # what a checkpoint holds: tuples become lists
    saved["remainder_slices"] = {k: tuple(v) for k, v in saved["remainder_slices"].items()}
    resumed = grain_batches(str(flat), str(offsets), 63, 4)  # a fresh pipeline
    resumed.set_state(saved)
    for batch in expected:
        np.testing.assert_array_equal(next(resumed)["tokens"], batch)


def _small_run(tmp_path: Path, peers: dict[str, str]) -> None:
    """One round at 20,000 documents with ``peers`` (name: module), checked whole."""
    figures, png = tmp_path / "fb.json", tmp_path / "fb.png"
    result = run_tool(
        "bench_first_batch.py",
        "--sizes",
        "20000",
        "--block",
        "64",
        "--rounds",
        "1",
        "--peers",
        ",".join(peers),
        "--workdir",
        str(tmp_path / "work"),
        "--json",
        str(figures),
        "--png",
        str(png),
    )
    rows = json.loads(figures.read_text())["rows"]
    expected = {LABELS["mixle"]} | {
        LABELS[peer] for peer, module in peers.items() if importlib.util.find_spec(module)
    }
    assert {row["library"] for row in rows} == expected
    for row in rows:
        assert row["documents"] == 20_000
        assert row["first_wall_ms"] > 0 and row["cached_wall_ms"] > 0, row
    assert "| 20,000 | **mixle StreamingCorpus** |" in result.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "work").exists(), "the corpora are deleted after each size"


def test_small_run_measures_mixle_and_megatron(tmp_path: Path) -> None:
    """The default suite's short form: mixle and one peer (each peer is a fresh process
    importing its library: the full set costs a minute)."""
    _small_run(tmp_path, {"megatron": "megatron"})


@pytest.mark.slow
def test_small_run_measures_mixle_and_every_installed_peer(tmp_path: Path) -> None:
    _small_run(
        tmp_path,
        {"megatron": "megatron", "litdata": "litdata", "grain": "grain", "olmo": "olmo_core"},
    )
