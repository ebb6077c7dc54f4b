"""``mixle export``: the command wraps export_corpus; errors exit 1 with the message."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from mixle.cli import main
from mixle.corpus import open_corpus
from tests.corpus.export.conftest import documents


def test_export_megatron_prints_prefixes_and_links(
    make_corpus: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = make_corpus(documents(0, 100), vocab_size=50_257, shard_max_bytes=5000)
    out = tmp_path / "m"
    assert main(["export", str(corpus), str(out), "--format", "megatron"]) == 0
    printed = capsys.readouterr().out
    shards = open_corpus(corpus).num_shards
    assert f"{shards} Megatron prefixes" in printed and "0 copied" in printed
    assert f"prefixes: {out / 'shard-00000'}" in printed
    marker = json.loads((out / ".mixle-export.json").read_text())
    assert marker["target"] == "megatron"
    assert marker["source"]["fingerprint"] == open_corpus(corpus).fingerprint
    assert len(marker["files"]) == 2 * shards


def test_export_litdata_with_block_size_and_chunk_bytes(
    make_corpus: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = documents(1, 100)
    corpus = make_corpus(docs, vocab_size=50_257)
    out = tmp_path / "l"
    argv = ["export", str(corpus), str(out), "--format", "litdata"]
    assert main([*argv, "--block-size", "100", "--chunk-bytes", "1KiB"]) == 0
    assert "LitData chunks" in capsys.readouterr().out
    index = json.loads((out / "index.json").read_text())
    assert all(chunk["dim"] == 500 for chunk in index["chunks"][:-1])
    assert sum(chunk["dim"] for chunk in index["chunks"]) == int(sum(map(len, docs)))
    assert main([*argv, "--single"]) == 2  # exists, and --single is megatron-only
    assert "`single` applies to format='megatron' only" in capsys.readouterr().err


def test_export_errors_exit_2_with_the_reason(
    make_corpus: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = make_corpus([np.array([3_000_000_000])], dtype="uint32")
    assert main(["export", str(corpus), str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mixle export: error: ExportError:") and "int32" in err
    assert not (tmp_path / "m").exists()
    assert main(["export", str(tmp_path / "missing"), str(tmp_path / "m")]) == 2
    assert "CorpusNotFoundError" in capsys.readouterr().err
