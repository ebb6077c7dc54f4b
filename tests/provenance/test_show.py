"""``show_step`` / ``mixle show`` on a corpus given with stream options: the rows are the
trainer's source's own batches, each row's documents hold exactly its tokens, origins
and text come through, and bad input is one line, exit 2."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.cli import main
from mixle.corpus import ORIGINS_NAME, Origin, open_corpus
from mixle.corpus.format.documents import ShardedDocuments
from mixle.errors import ArgumentError
from mixle.provenance import load_decoder, render_step, resolve_run, show_step
from mixle.train import DataConfig
from mixle.train._sources import batch_digest, make_source
from tests.provenance._helpers import (
    assert_rows_hold_their_documents,
    document_text,
    write_jsonl_corpus,
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_jsonl_corpus(tmp_path_factory.mktemp("show"))


def _spec(corpus: Path, world_size: int = 1, **data: object):  # type: ignore[no-untyped-def]
    options = {"block": 16, "batch_size": 3, **data}
    return resolve_run(
        str(corpus), data=DataConfig(corpus=str(corpus), **options), world_size=world_size
    )


def _trainer_digests(corpus: Path, rank: int, world_size: int, steps: int, **data: object):  # type: ignore[no-untyped-def]
    """The digests (as metrics.jsonl writes them) of the trainer's source's first batches."""
    config = DataConfig(corpus=str(corpus), **{"block": 16, "batch_size": 3, **data})
    source = make_source(
        config.objective,
        open_corpus(corpus),
        rank=rank,
        world_size=world_size,
        layout=config.layout,
        order=config.order,
        packing=config.packing,
        block=config.block,
        batch_size=config.batch_size,
        seed=0,
        boundary_id=None,
    )
    digests = []
    for batch, _ in source:
        digests.append(f"{int(batch_digest(batch), 16) >> 1:016x}")
        if len(digests) == steps:
            return digests
    return digests


@pytest.mark.parametrize(
    ("data", "world_size"),
    [
        ({}, 2),
        ({"layout": "per-rank"}, 2),
        ({"packing": "best_fit"}, 1),
        ({"order": "permutation"}, 3),
    ],
)
def test_every_step_is_the_trainers_batch_and_its_rows_hold_their_documents(
    corpus: Path, data: dict[str, object], world_size: int
) -> None:
    spec = _spec(corpus, world_size, **data)
    steps = 12  # past the end of epoch 0 on every shape here
    for rank in range(world_size):
        expected = _trainer_digests(corpus, rank, world_size, steps, **data)
        shown = [show_step(spec, s, rank=rank).ranks[0].digest for s in range(1, steps + 1)]
        assert shown == expected
    for step in (1, 5, steps):
        assert_rows_hold_their_documents(show_step(spec, step), spec, {str(corpus): corpus})


@settings(max_examples=15, deadline=None)
@given(
    block=st.integers(1, 40),
    batch_size=st.integers(1, 4),
    world_size=st.integers(1, 3),
    step=st.integers(1, 30),
)
def test_any_shape_and_step_rebuilds_rows_of_whole_tokens(
    corpus: Path, block: int, batch_size: int, world_size: int, step: int
) -> None:
    spec = _spec(corpus, world_size, block=block, batch_size=batch_size)
    report = show_step(spec, step)
    assert [r.rank for r in report.ranks] == list(range(world_size))
    assert_rows_hold_their_documents(report, spec, {str(corpus): corpus})


def test_documents_name_their_file_line_and_text(corpus: Path) -> None:
    report = show_step(_spec(corpus), 4, decoder=load_decoder("bytes"))
    spans = [span for row in report.ranks[0].rows for span in row.documents]
    assert spans
    lines = {}
    for span in spans:
        origin = span.origin
        assert origin is not None and span.origin_note is None
        assert origin.kind == "line" and origin.path.endswith(".jsonl")
        file = int(Path(origin.path).stem.removeprefix("part"))
        text = document_text(file, origin.record)
        assert span.text == text.encode()[span.start : span.end].decode()
        lines[span.document] = (file, origin.record)
    assert len(lines) >= 2
    json.dumps(report.to_dict())  # JSON-able


def test_an_id_on_the_origin_is_reported(corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    @dataclasses.dataclass(frozen=True)
    class OriginWithId(Origin):
        id: str = ""

    def origin(self: ShardedDocuments, index: int) -> OriginWithId:
        return OriginWithId("in.jsonl", "line", index, f"id-{index}")

    monkeypatch.setattr(ShardedDocuments, "origin", origin)
    span = show_step(_spec(corpus), 1).ranks[0].rows[0].documents[0]
    assert span.id == f"id-{span.document}"
    assert span.to_dict()["id"] == span.id


def test_a_tokenizer_json_decodes_and_a_file_that_is_not_one_is_refused(
    corpus: Path, tmp_path: Path
) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {chr(b): b for b in range(256)}  # one token per byte: ASCII text decodes as is
    model = tokenizers.models.WordLevel(vocab, unk_token=chr(0))
    tokenizer = tokenizers.Tokenizer(model)
    tokenizer.decoder = tokenizers.decoders.Fuse()
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    decode = load_decoder(str(path))
    assert decode(np.array([104, 105])) == "hi"
    report = show_step(_spec(corpus), 2, decoder=decode)
    as_bytes = show_step(_spec(corpus), 2, decoder=load_decoder("bytes"))
    texts = [s.text for row in report.ranks[0].rows for s in row.documents]
    assert texts == [s.text for row in as_bytes.ranks[0].rows for s in row.documents]
    assert all(texts)
    bad = tmp_path / "not.json"
    bad.write_text("{]")
    with pytest.raises(ArgumentError, match=r"not a tokenizer\.json"):
        load_decoder(str(bad))
    with pytest.raises(ArgumentError, match="not a file"):
        load_decoder(str(tmp_path / "missing.json"))


@pytest.mark.parametrize("damage", ["missing", "forged"])
def test_a_damaged_sidecar_still_shows_rows_and_says_why(
    tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = write_jsonl_corpus(tmp_path, (12,))
    sidecar = corpus / ORIGINS_NAME
    if damage == "missing":
        sidecar.unlink()
    else:
        data = sidecar.read_bytes()
        sidecar.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    report = show_step(_spec(corpus), 1)
    spans = [span for row in report.ranks[0].rows for span in row.documents]
    assert spans and all(span.origin is None for span in spans)
    assert all(ORIGINS_NAME in (span.origin_note or "") for span in spans)
    assert main(["show", str(corpus), "--step", "1", "--block", "16"]) == 0
    out = capsys.readouterr().out
    assert "unavailable" in out and f"origins of {corpus} unavailable" in out


def test_the_cli_prints_a_table_with_snippets_and_stable_json(
    corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["show", str(corpus), "--step", "3", "--block", "16", "--batch-size", "3"]
    assert main([*args, "--world-size", "2", "--rank", "1", "--tokenizer", "bytes"]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"step 3: corpus {corpus}")
    assert "rank 1  digest" in text and "rank 0" not in text
    assert "document  tokens" in text and "part" in text and '"' in text
    assert main([*args, "--json", "--tokenizer", "bytes", "--max-chars", "5"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["step"] == 3 and report["stream"]["block"] == 16
    assert set(report["ranks"][0]["rows"][0]["documents"][0]) == {
        "source",
        "document",
        "start",
        "end",
        "length",
        "targets",
        "origin",
        "origin_note",
        "id",
        "text",
    }
    expected = show_step(_spec(corpus), 3, decoder=load_decoder("bytes"))
    assert report == json.loads(json.dumps(expected.to_dict()))
    assert main([*args, "--tokenizer", "bytes", "--max-chars", "4"]) == 0
    assert "... (+" in capsys.readouterr().out
    assert render_step(expected, max_chars=0).count("\n") > 4


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--step", "0"], "`step` must be"),
        (["--step", "2", "--rank", "2", "--world-size", "2"], "`rank` must be below"),
        (["--step", "2", "--tokenizer", "nope.json"], "not a file"),
        ([], "--step N is required"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    corpus: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", str(corpus), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_directory_that_is_neither_a_run_nor_a_corpus_says_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", str(tmp_path), "--step", "1"]) == 2
    err = capsys.readouterr().err
    assert "neither a mixle train run" in err and "nor a corpus" in err
    assert len(err.strip().splitlines()) == 1


def test_a_step_past_a_finite_stream_or_a_bad_spec_is_refused(corpus: Path) -> None:
    with pytest.raises(ArgumentError, match="length_buckets"):
        _spec(corpus, length_buckets="8")
    with pytest.raises(ArgumentError, match="`world_size`"):
        resolve_run(str(corpus), world_size=0)
