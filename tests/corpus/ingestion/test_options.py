"""IngestOptions in sections (issue #28 item 3): every spelling of the options writes
the corpus the flat keywords wrote before the sections, byte for byte."""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

import pytest

from mixle.cli import main
from mixle.corpus import CorpusShape, IngestOptions, IngestRun, ingest
from mixle.errors import ArgumentTypeError

# SHA-256 of manifest.json for the input below; it holds the fingerprint and every shard
# digest. At main 3db65e4 (flat keywords, before the sections) it was 34a295b1...; the
# origins sidecar (#29) added `metadata.origins` to the manifest since, and nothing else
# (fingerprints per input format are pinned in test_format_outputs.py).
MANIFEST_SHA256 = "8965903a9a0de3b141db8473adf971e4c38297a7652877505a45eb2d4b26891e"
KEYWORDS = {"vocab_size": 300, "append_eos": 0, "shard_size": 4096, "unit_size": 8}


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # the manifest records the inputs as given
    Path("in.jsonl").write_text('{"input_ids":[1,2,3]}\n{"input_ids":[4,5]}\n')
    return tmp_path


def _manifest_sha256(output: str) -> str:
    return hashlib.sha256(Path(output, "manifest.json").read_bytes()).hexdigest()


def test_flat_keywords_write_the_corpus_they_wrote_before_the_sections(here: Path) -> None:
    ingest("in.jsonl", "flat", **KEYWORDS)
    assert _manifest_sha256("flat") == MANIFEST_SHA256


def test_an_options_object_and_keyword_overrides_write_the_same_corpus(here: Path) -> None:
    nested = IngestOptions(
        shape=CorpusShape(vocab_size=300, append_eos=0, shard_size=4096, unit_size=8)
    )
    ingest("in.jsonl", "nested", nested)
    ingest("in.jsonl", "override", IngestOptions(**{**KEYWORDS, "unit_size": 1024}), unit_size=8)
    assert _manifest_sha256("nested") == _manifest_sha256("override") == MANIFEST_SHA256


def test_the_command_line_writes_the_same_corpus(here: Path) -> None:
    argv = ["ingest", "in.jsonl", "cli", "-q", "--workers", "1", "--vocab-size", "300"]
    argv += ["--append-eos", "0", "--shard-size", "4096", "--unit-size", "8"]
    assert main(argv) == 0
    assert _manifest_sha256("cli") == MANIFEST_SHA256


def test_options_that_are_not_ingest_options_are_refused(here: Path) -> None:
    with pytest.raises(ArgumentTypeError, match="`options` must be an IngestOptions"):
        ingest("in.jsonl", "out", {"vocab_size": 300})  # type: ignore[arg-type]
    assert not Path("out").exists()


def test_options_pickle_to_spawned_workers_unchanged() -> None:
    options = IngestOptions(run=IngestRun(workers=2, task="0/2"), dtype="uint16")
    copy = pickle.loads(pickle.dumps(options))
    assert copy == options and (copy.task, copy.fixed_dtype) == ((0, 2), "uint16")
