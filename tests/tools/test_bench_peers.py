"""Smoke test of ``tools/bench_peers.py``: it runs with whatever peers are installed.

The figures themselves are measurements, not asserted; what is checked is that the run
finishes, that every method (mixle's, the floors' and each installed peer's) has a
positive finite ratio to its floor by wall and CPU time inside its rounds' spread, that
the table, the JSON, the README table and the PNG exist, and that they can be made again
from the JSON alone (``--from-json``); and the method's parts: the memory-bandwidth
floor's rows, the 10% agreement check (``--compare A B``), the tmpfs check, Grain's
source.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.tools._run import run_tool
from tools import _peer_methods
from tools._peer_methods import (
    MODULES,
    bandwidth_floor,
    installed,
    row_slice_floor,
    rows_from_documents,
)
from tools.bench_peers import (
    README_BEGIN,
    README_END,
    agreement,
    make_corpus,
    on_tmpfs,
    readme_table,
    write_readme,
)


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
        "--readme",
        str(tmp_path / "readme.md"),
    )
    rows = json.loads(figures.read_text())["rows"]
    names = {row["method"] for row in rows}
    assert {
        "concat+tofile",
        "mixle CorpusWriter",
        "mixle open_corpus",
        "floor: memory bandwidth",
        "floor: row slices",
        "mixle StreamingCorpus",
        "mixle StreamingCorpus +ids",
        "mixle TokenStream",
    } <= names
    for row in rows:
        assert math.isfinite(row["ratio"]) and row["ratio"] > 0, row
        assert row["ratio_low"] <= row["ratio"] <= row["ratio_high"], row
        assert math.isfinite(row["cpu_ratio"]) and row["cpu_ratio"] > 0, row
        assert row["value"] > 0, row
    for group in ("write", "read", "rows"):
        floors = [row for row in rows if row["group"] == group and row["kind"] == "floor"]
        assert len(floors) == 1 and floors[0]["ratio"] == pytest.approx(1.0)
    expected_peers = {
        "megatron": "Megatron IndexedDataset",
        "litdata": "LitData TokensLoader",
        "mds": "MDS StreamingDataset",
        "grain": "Grain BestFitPack",
        "olmo": "OLMo-core NumpyPackedFSLDataset",
    }
    for peer, method in expected_peers.items():
        present = importlib.util.find_spec(MODULES[peer]) is not None
        assert (method in names) == present, (peer, sorted(names))
        if not present:
            assert _peer_methods.INSTALL[peer] in result.stdout
    text = table.read_text()
    assert "| measure | method |" in text and "**mixle StreamingCorpus**" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert text in result.stdout
    readme = (tmp_path / "readme.md").read_text()
    assert readme.startswith(README_BEGIN) and readme.endswith(README_END + "\n")
    assert "| × same-run floor (CPU) | mixle |" in readme and "CorpusWriter" in readme
    # Regenerated from the JSON alone, into a README that has the markers: same block.
    page = tmp_path / "README.md"
    page.write_text("# title\n\nbefore\n\n" + readme + "\nafter\n")
    again = run_tool(
        "bench_peers.py",
        "--from-json",
        str(figures),
        "--table",
        str(tmp_path / "again.md"),
        "--png",
        str(tmp_path / "again.png"),
        "--readme",
        str(page),
    )
    assert page.read_text() == "# title\n\nbefore\n\n" + readme + "\nafter\n"
    assert (tmp_path / "again.md").read_text() == text and text in again.stdout
    assert (tmp_path / "again.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Two runs compared without measuring: a run agrees with itself.
    same = run_tool("bench_peers.py", "--compare", str(figures), str(figures))
    assert "within 10%" in same.stdout and "**>10%**" not in same.stdout


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


def test_bandwidth_floor_rows_are_the_row_slice_floors_rows(tmp_path: Path) -> None:
    tokens = np.random.default_rng(0).integers(0, 1000, 5_000, dtype=np.uint16)
    path = tmp_path / "tokens.bin"
    tokens.tofile(path)
    block, batch = 16, 4
    copied, sliced = bandwidth_floor(path, block, batch), row_slice_floor(path, block, batch)
    first = next(copied)
    starts = range(0, 5_000 - block * batch - 1, block * batch)
    for number in range(100):  # wraps around the file more than once
        rows = first if number == 0 else next(copied)
        assert rows is first, "the floor reuses its output array"
        begin = starts[number % len(starts)]
        expected = np.stack(
            [tokens[begin + r * block :][: block + 1] for r in range(batch)]
        ).astype(np.int64)
        np.testing.assert_array_equal(rows, expected)
        np.testing.assert_array_equal(next(sliced), expected)


def _row(method: str, ratio: float, cpu: float, kind: str = "peer") -> dict[str, object]:
    return {"group": "rows", "method": method, "kind": kind, "ratio": ratio, "cpu_ratio": cpu}


def test_agreement_reports_every_ratios_change_and_flags_those_over_10_percent() -> None:
    before = [_row("floor", 1, 1, "floor"), _row("mixle A", 0.5, 0.4), _row("B", 0.2, 0.2)]
    now = [_row("floor", 1, 1, "floor"), _row("mixle A", 0.55, 0.4), _row("B", 0.19, 0.23)]
    text, flagged = agreement(now, before)  # type: ignore[arg-type]
    assert "| rows | mixle A | 0.400 / 0.400 | +0.0% | 0.500 / 0.550 | +10.0% |" in text
    assert "| rows | B | 0.200 / 0.230 | +15.0% **>10%** | 0.200 / 0.190 | -5.0% |" in text
    assert "CPU 1 of 2 within 10% (largest 15.0%), wall 2 of 2 within 10% (largest 10.0%)" in text
    assert "| floor |" not in text and flagged == 1
    assert agreement(before, before)[1] == 0  # type: ignore[arg-type]


def test_compare_two_runs_exits_1_when_a_cpu_ratio_moved_and_2_on_a_bad_file(
    tmp_path: Path,
) -> None:
    import subprocess
    import sys

    from tests.tools._run import ROOT

    first, second, bad = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "bad.json"
    rows = [_row("floor", 1, 1, "floor"), _row("mixle A", 0.5, 0.4)]
    first.write_text(json.dumps({"header": "a", "rows": rows}))
    rows[1] = _row("mixle A", 0.5, 0.5)
    second.write_text(json.dumps({"header": "b", "rows": rows}))
    bad.write_text("{}")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "tools.bench_peers", *args]
        return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)

    moved = run("--compare", str(first), str(second))
    assert moved.returncode == 1 and "+25.0% **>10%**" in moved.stdout
    broken = run("--compare", str(first), str(bad))
    assert broken.returncode == 2 and len(broken.stderr.strip().splitlines()[-1]) < 200
    assert "bad.json: not a bench_peers --json" in broken.stderr


def test_write_readme_replaces_only_the_block_between_its_markers(tmp_path: Path) -> None:
    rows = [
        _row("floor: memory bandwidth", 1.0, 1.0, "floor"),
        _row("mixle StreamingCorpus", 0.5, 0.25, "mixle"),
    ]
    run = {"date": "2026-12-02 15:00 UTC", "header": "100 tokens", "rows": rows}
    readme = tmp_path / "README.md"
    write_readme(readme, run)  # no README yet: the block alone
    block = readme.read_text()
    assert block.startswith(README_BEGIN) and "Recorded 2026-12-02 15:00 UTC: 100 tokens" in block
    assert "| packed rows, concatenate and chunk | **0.25 (StreamingCorpus)** |" in block
    readme.write_text("intro\n" + block.replace("0.25", "9.99") + "outro\n")
    write_readme(readme, run)
    assert readme.read_text() == "intro\n" + block + "outro\n"


def test_readme_table_has_a_column_per_library_and_a_line_per_measure() -> None:
    rows = [
        _row("floor: memory bandwidth", 1.0, 1.0, "floor"),
        _row("mixle StreamingCorpus", 0.9, 0.5, "mixle"),
        _row("mixle TokenStream", 0.9, 0.7, "mixle"),
        _row("Grain BestFitPack", 0.9, 0.01),
    ]
    assert readme_table(rows).splitlines() == [  # type: ignore[arg-type]
        "| × same-run floor (CPU) | mixle | Grain |",
        "|---|---|---|",
        "| packed rows, concatenate and chunk | **0.50 (StreamingCorpus)** | — |",
        "| random windows | **0.70 (TokenStream)** | — |",
        "| packed rows, best-fit | — | 0.01 (BestFitPack) |",
    ]


def test_on_tmpfs_tells_a_tmpfs_path_from_another() -> None:
    with open("/proc/mounts", encoding="ascii", errors="replace") as mounts:
        kinds = {line.split()[1]: line.split()[2] for line in mounts}
    if kinds.get("/dev/shm") != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm")
    assert on_tmpfs(Path("/dev/shm/not-yet-created/corpus"))
    assert on_tmpfs(Path("/")) == (kinds["/"] == "tmpfs")


def test_paired_rounds_bracket_every_slice_of_every_other_method_with_the_floor() -> None:
    from tools._peer_methods import Method
    from tools.bench_peers import results, round_ratios, run_rounds

    log: list[str] = []

    def step(name: str, units: int) -> Callable[[], Callable[[], int]]:
        def make() -> Callable[[], int]:
            def run() -> int:
                log.append(name)
                return units

            return run

        return make

    floor = Method("rows", "floor", "", step("floor", 10), "floor")
    ours = Method("rows", "mixle A", "", step("A", 5), "mixle")
    theirs = Method("rows", "B", "", step("B", 2))
    run_rounds([floor, ours, theirs], 3, 4, 10.0, warm_up=False, paired=True, slices=2)
    assert len(ours.floor_rates) == len(theirs.floor_rates) == 3 and not floor.floor_rates
    # Each measurement: 2 slices of 2 steps (the count split over the slices).
    assert ours.units == [20, 20, 20] and theirs.units == [8, 8, 8]
    runs = [name for index, name in enumerate(log) if index == 0 or log[index - 1] != name]
    assert runs.count("A") == runs.count("B") == 3 * 2
    for index, name in enumerate(runs):
        if name != "floor":  # bracketed: the floor right before and right after each slice
            assert runs[index - 1] == "floor" and runs[index + 1] == "floor", runs
    assert len(round_ratios(ours, floor, "cpu")) == 3
    row = next(r for r in results([floor, ours, theirs]) if r["method"] == "mixle A")
    assert row["cpu_ratio_low"] <= row["cpu_ratio"] <= row["cpu_ratio_high"]
    assert row["cpu_ratio_best"] > 0 and len(row["cpu_rounds"]) == 3


def test_timed_stops_at_the_first_step_past_its_budget() -> None:
    from tools.bench_peers import timed

    def slow() -> int:
        time.sleep(0.02)
        return 1

    units, seconds, _ = timed(slow, 1000, 0.05)
    # Three steps pass the budget (fewer when a sleep overruns); not rounded up to 8.
    assert 1 <= units <= 3 and seconds >= 0.05


def test_trimmed_mean_drops_a_fifth_of_the_values_at_each_end() -> None:
    from tools.bench_peers import trimmed_mean

    assert trimmed_mean([3.0, 1.0, 2.0]) == pytest.approx(2.0)  # under five: the mean
    # Ten values: the lowest two and the highest two dropped, whatever their size.
    values = [100.0, -50.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 1e9, -1e9]
    assert trimmed_mean(values) == pytest.approx(3.5)


def test_versus_peers_compares_packed_rows_with_the_fastest_peer_per_round() -> None:
    from tools.bench_peers import versus_peers

    def row(method: str, kind: str, rounds: list[float], best: float) -> dict[str, object]:
        return {
            "group": "rows",
            "method": method,
            "kind": kind,
            "cpu_ratio": sorted(rounds)[1],
            "cpu_rounds": rounds,
            "wall_rounds": [2 * r for r in rounds],
            "cpu_ratio_best": best,
        }

    rows = [
        row("floor: memory bandwidth", "floor", [1.0, 1.0, 1.0], 1.0),
        row("mixle StreamingCorpus", "mixle", [0.2, 0.3, 0.4], 0.5),
        row("mixle TokenStream", "mixle", [0.6, 0.6, 0.6], 0.6),  # windows: not compared
        row("LitData TokensLoader", "peer", [0.1, 0.2, 0.2], 0.25),
        row("Megatron GPTDataset", "peer", [0.05, 0.05, 0.05], 0.05),
    ]
    versus = versus_peers(rows)  # type: ignore[arg-type]
    assert [v["method"] for v in versus] == ["mixle StreamingCorpus"]
    assert versus[0]["peer"] == "LitData TokensLoader"
    # Per round 0.2 / 0.1, 0.3 / 0.2, 0.4 / 0.2: 2.0, 1.5, 2.0 (three rounds: none trimmed).
    assert versus[0]["cpu_ratio"] == versus[0]["ratio"] == pytest.approx(5.5 / 3)
    assert (versus[0]["cpu_ratio_low"], versus[0]["cpu_ratio_high"]) == pytest.approx((1.5, 2.0))
    assert versus[0]["cpu_ratio_best"] == pytest.approx(2.0)


@pytest.mark.skipif(importlib.util.find_spec("grain") is None, reason="grain not installed")
def test_grain_rows_are_int64_batches_of_the_corpus_documents(tmp_path: Path) -> None:
    from tools._grain_methods import FlatSource, as_int64

    corpus = make_corpus(20_000, 50, seed=0, work=tmp_path)
    corpus.flat_path.parent.mkdir(parents=True)
    np.concatenate(corpus.documents).tofile(corpus.flat_path)
    source = FlatSource(corpus.flat_path, corpus.offsets)
    assert len(source) == 50
    for index in (0, 17, 49):
        np.testing.assert_array_equal(source[index]["tokens"], corpus.documents[index])
    import grain
    import grain.experimental as experimental

    documents = grain.MapDataset.source(source).shuffle(seed=0).to_iter_dataset()
    rows = experimental.ConcatThenSplitIterDataset(documents, length_struct={"tokens": 65})
    batches = list(as_int64(iter(rows.batch(4))))
    assert batches and all(b["tokens"].dtype == np.int64 for b in batches)
    assert batches[0]["tokens"].shape == (4, 65)
    shuffled = grain.MapDataset.source(source).shuffle(seed=0)
    expected = np.concatenate([shuffled[i]["tokens"] for i in range(len(shuffled))])
    stream = np.concatenate([batch["tokens"].ravel() for batch in batches[:-1]])  # last: padded
    np.testing.assert_array_equal(stream, expected[: stream.shape[0]])  # concatenated, cut


def test_olmo_loader_asks_for_synchronous_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from tools._olmo_methods import olmo_loader

    made: dict[str, object] = {}

    def loader(dataset: object, **options: object) -> dict[str, object]:
        made.update(options)
        return made

    data = types.ModuleType("olmo_core.data")
    data.DataCollator = lambda **options: None  # type: ignore[attr-defined]
    data.NumpyFSLDataLoader = loader  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "olmo_core", types.ModuleType("olmo_core"))
    monkeypatch.setitem(sys.modules, "olmo_core.data", data)
    olmo_loader(types.SimpleNamespace(sequence_length=65), Path("work"), 4)
    assert made["num_threads"] == 0 and made["num_workers"] == 0
    assert made["global_batch_size"] == 4 * 65


@pytest.mark.slow  # imports olmo_core (~5 s); the short form is the test above
@pytest.mark.skipif(importlib.util.find_spec("olmo_core") is None, reason="olmo not installed")
def test_olmo_loader_reads_synchronously_and_yields_the_flat_files_instances(
    tmp_path: Path,
) -> None:
    from tools._olmo_methods import EOS, olmo_dataset, olmo_loader, write_olmo_tokens

    corpus = make_corpus(20_000, 50, seed=0, work=tmp_path)
    path = write_olmo_tokens(corpus.documents, tmp_path)
    loader = olmo_loader(olmo_dataset(tmp_path, 65, packed=False), tmp_path, 4)
    assert loader.num_threads == 0  # no reader threads (the module notes say why)
    loader.reshuffle()
    batch = next(iter(loader))
    assert tuple(batch["input_ids"].shape) == (4, 65)
    flat = np.fromfile(path, dtype=np.uint16)
    assert flat.shape[0] == 20_000 + 50 and int((flat == EOS).sum()) == 50
    starts = {flat[i : i + 65].tobytes() for i in range(0, flat.shape[0] - 64, 65)}
    assert all(row.numpy().astype(np.uint16).tobytes() in starts for row in batch["input_ids"])
