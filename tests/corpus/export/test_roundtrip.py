"""Round trip: ``mixle ingest`` of a Megatron export gives back the same fingerprint."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from mixle.corpus import ingest, open_corpus
from mixle.corpus.export import export_corpus
from tests.corpus.export.conftest import documents


@pytest.mark.parametrize(
    ("dtype", "vocab"), [("uint16", 50_000), ("uint32", 70_000), ("int64", 2**40)]
)
def test_ingest_of_a_megatron_export_has_the_corpus_fingerprint(
    make_corpus: Callable[..., Path], tmp_path: Path, dtype: str, vocab: int
) -> None:
    docs = documents(0, 300, vocab=vocab)
    shard_bytes = 12_000
    corpus = make_corpus(docs, dtype=dtype, shard_max_bytes=shard_bytes)
    original = open_corpus(corpus)
    assert original.num_shards > 3
    export_corpus(original, tmp_path / "megatron", "megatron")
    ingest(
        tmp_path / "megatron",
        tmp_path / "again",
        input_format="megatron",
        dtype=dtype,
        shard_size=shard_bytes,
    )
    again = open_corpus(tmp_path / "again", verify=True)
    assert again.fingerprint == original.fingerprint
    assert again.manifest["shards"] == original.manifest["shards"]


def test_cli_round_trip_with_the_printed_ingest_command(
    make_corpus: Callable[..., Path], tmp_path: Path
) -> None:
    docs = documents(1, 300)
    corpus = make_corpus(docs, vocab_size=50_257, shard_max_bytes=15_000)
    cli = [sys.executable, "-m", "mixle.cli"]
    done = subprocess.run(
        [*cli, "export", str(corpus), str(tmp_path / "m"), "--format", "megatron"],
        capture_output=True,
        text=True,
        check=True,
    )
    hint = next(line for line in done.stdout.splitlines() if line.startswith("round trip"))
    command = hint.split(": ", 1)[1].replace("NEW_CORPUS", str(tmp_path / "again")).split()
    assert command[:2] == ["mixle", "ingest"]
    subprocess.run([*cli, *command[1:]], capture_output=True, check=True)
    assert open_corpus(tmp_path / "again").fingerprint == open_corpus(corpus).fingerprint


def test_single_prefix_round_trips_every_document(
    make_corpus: Callable[..., Path], tmp_path: Path
) -> None:
    docs = documents(2, 200)
    corpus = make_corpus(docs, vocab_size=50_257, shard_max_bytes=9000)
    summary = export_corpus(corpus, tmp_path / "m", "megatron", single=True)
    ingest(summary.prefixes[0], tmp_path / "again", dtype="uint16")
    again = open_corpus(tmp_path / "again")
    assert len(again) == len(docs)
    for got, want in zip(again, docs, strict=True):
        np.testing.assert_array_equal(got, want)
