"""`mixle inspect` and `mixle verify`: output, JSON, plot, exit codes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from mixle.cli import main
from mixle.corpus import describe_corpus


def _flip_byte(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.fixture
def corpus(make_corpus: Callable[..., Path]) -> Path:
    documents = [np.arange(n % 50) for n in range(200)]
    return make_corpus(documents, vocab_size=100, shard_max_bytes=1000)


def test_inspect_prints_counts_and_percentiles(
    corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", str(corpus), "--shards"]) == 0
    out = capsys.readouterr().out
    assert "documents   200 (4 empty)" in out
    assert f"tokens      {sum(n % 50 for n in range(200)):,}" in out
    assert "dtype uint16, vocab_size 100" in out
    assert "p50=" in out and "p99=" in out
    assert out.count("shard-0") == describe_corpus(corpus)["num_shards"]


def test_inspect_json_matches_the_library_summary(
    corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", str(corpus), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary == json.loads(json.dumps(describe_corpus(corpus)))
    lengths = [n % 50 for n in range(200)]
    assert summary["length"]["p50"] == float(np.percentile(lengths, 50))
    assert summary["length"]["p100"] == 49
    assert summary["num_documents"] == 200


def test_inspect_plot_writes_a_png(corpus: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    output = tmp_path / "lengths.png"
    assert main(["inspect", str(corpus), "--plot", str(output)]) == 0
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_inspect_missing_corpus_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(tmp_path / "nope")]) == 2
    assert "CorpusNotFoundError" in capsys.readouterr().err


def test_verify_exit_codes_and_per_shard_report(
    corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["verify", str(corpus)]) == 0
    out = capsys.readouterr().out
    assert "intact" in out
    shards = describe_corpus(corpus)["num_shards"]
    assert out.count("ok    shard-") == shards
    _flip_byte(corpus / "shard-00001.tokens", 3)
    assert main(["verify", str(corpus)]) == 1
    out = capsys.readouterr().out
    assert "FAIL  shard-00001.tokens" in out and "ChecksumError" in out
    assert out.count("ok    shard-") == shards - 1
    assert main(["verify", str(corpus), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    assert [shard["ok"] for shard in report["shards"]].count(False) == 1


def test_verify_missing_corpus_exits_2_and_broken_manifest_exits_1(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["verify", str(tmp_path / "nope")]) == 2
    (corpus / "manifest.json").write_text("{")
    assert main(["verify", str(corpus)]) == 1
    assert "FAIL  manifest" in capsys.readouterr().out


def test_verify_and_inspect_read_a_shard_table_and_catch_its_corruption(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mixle.corpus import CorpusWriter

    path = tmp_path / "tabled"
    with CorpusWriter(path, vocab_size=100, shard_max_bytes=40, shard_table=True) as writer:
        writer.add_flat(np.arange(200) % 100, np.full(20, 10))
    assert main(["verify", str(path)]) == 0
    out = capsys.readouterr().out
    assert "intact" in out and out.count("ok    shard-") == 10
    assert main(["inspect", str(path)]) == 0
    assert "documents   20" in capsys.readouterr().out
    _flip_byte(path / "shards.table", 70)
    assert main(["verify", str(path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL  manifest" in out and "shards.table: SHA-256" in out
