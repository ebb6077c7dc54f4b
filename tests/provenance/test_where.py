"""``where`` / ``mixle where``: a document named by index, origin or id, over a corpus given
with stream options (the run resolution is ``mixle show``'s, tested with it)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mixle.cli import main
from mixle.corpus import ingest, open_corpus
from mixle.data import StreamingCorpus, sightings
from mixle.errors import ArgumentError
from mixle.provenance import render_where, resolve_run, where
from mixle.train import DataConfig


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 documents from two JSONL files (line ``n`` of each is one document)."""
    root = tmp_path_factory.mktemp("where")
    rng = np.random.default_rng(3)
    inputs = []
    for name, lines in (("a.jsonl", 25), ("b.jsonl", 15)):
        path = root / name
        with open(path, "w", encoding="utf-8") as handle:
            for _ in range(lines):
                ids = rng.integers(1, 500, size=int(rng.integers(3, 30))).tolist()
                handle.write(json.dumps({"input_ids": ids}) + "\n")
        inputs.append(str(path))
    ingest(inputs, root / "corpus", workers=1, vocab_size=1000, shard_size=512)
    return root / "corpus"


def _data(corpus: Path, **options: object) -> DataConfig:
    return DataConfig(corpus=str(corpus), block=8, batch_size=2, **options)  # type: ignore[arg-type]


def test_index_origin_and_id_lookups_agree_with_the_data_layer(corpus: Path) -> None:
    data = _data(corpus, layout="global")
    spec = resolve_run(str(corpus), data=data, world_size=2)
    documents = open_corpus(str(corpus))
    origin = documents.origin(30)
    assert origin is not None
    report = where(spec, 30, epochs=3)
    stream = StreamingCorpus(
        documents, rank=0, world_size=2, block=8, batch_size=2, layout="global"
    )
    assert list(report.documents[0].sightings) == sightings(stream, 30, epochs=3)
    assert report.closed_form and report.epochs == (0, 1, 2) and report.last_step is None
    by_origin = where(spec, f"{Path(origin.path).name}:{origin.record}", epochs=3)
    assert [d.document for d in by_origin.documents] == [30]
    assert by_origin.documents[0].sightings == report.documents[0].sightings
    text = render_where(report)
    assert "blocks order inverted" in text and f"origin {origin.path}" in text


def test_permutation_order_says_it_passes_over_each_epoch(corpus: Path) -> None:
    spec = resolve_run(str(corpus), data=_data(corpus, layout="per-rank"), world_size=3)
    report = where(spec, "7", epochs=2)
    assert not report.closed_form
    assert {s.epoch for s in report.documents[0].sightings} == {0, 1}
    assert "one pass over each epoch's order" in render_where(report)


def test_held_out_documents_are_never_trained_on(corpus: Path) -> None:
    spec = resolve_run(str(corpus), data=_data(corpus, holdout_documents=4), world_size=1)
    assert where(spec, 37).documents[0].held_out
    assert where(spec, 37).documents[0].sightings == ()
    assert not where(spec, 35).documents[0].held_out


def test_bad_documents_are_named(corpus: Path) -> None:
    spec = resolve_run(str(corpus), data=_data(corpus), world_size=1)
    with pytest.raises(ArgumentError, match="document index 40 is out of range"):
        where(spec, 40)
    with pytest.raises(ArgumentError, match=r"no document has origin or id 'a\.jsonl:99'"):
        where(spec, "a.jsonl:99")
    with pytest.raises(ArgumentError, match="no document has id 'nothing'"):
        where(spec, "nothing")
    with pytest.raises(ArgumentError, match="`epochs` must be a positive integer"):
        where(spec, 1, epochs=0)


def test_cli_prints_text_and_json(corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["--block", "8", "--batch-size", "2", "--layout", "global", "--world-size", "2"]
    assert main(["where", str(corpus), "12", "--epochs", "2", "--json", *flags]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["epochs"] == [0, 1] and report["closed_form"] is True
    (found,) = report["documents"]
    assert found["document"] == 12 and found["origin"]["kind"] == "line"
    assert {s["epoch"] for s in found["sightings"]} == {0, 1}
    assert main(["where", str(corpus), "12", *flags]) == 0
    assert "document 12 of" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["40"], "document index 40 is out of range"),
        (["b.jsonl:15"], "no document has origin or id 'b.jsonl:15'"),
        (["1", "--epochs", "0"], "`epochs` must be a positive integer"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(
    corpus: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    assert main(["where", str(corpus), *arguments, "--block", "8"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_cli_refuses_a_directory_that_is_not_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["where", str(tmp_path), "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "neither a mixle train run" in err and len(err.splitlines()) == 1


def _run(tmp_path: Path, corpus: Path | None = None, **changes: object) -> Path:
    """A tiny ``mixle train`` run of 12 steps (checkpoint at the end; trains with torch,
    hence the slow mark: the default suite covers ``where`` on corpora above)."""
    from mixle.train import train
    from tests.train._helpers import tiny_config, write_text_corpus

    corpus = corpus or write_text_corpus(tmp_path / "text", documents=40)
    run = tmp_path / "run"
    config = tiny_config(corpus, steps=12, checkpoint_dir=str(run), block=16, **changes)
    train(config, log=lambda line: None)
    return run


def _trained_rows(spec: object, sighting: object) -> np.ndarray:
    """The document ids of the targets of the sighting's row, as `mixle show` rebuilds it."""
    batch = spec.batch(sighting.step, sighting.rank)  # type: ignore[attr-defined]
    row = sighting.row  # type: ignore[attr-defined]
    return batch.document_ids[row][batch.loss_mask[row]]


@pytest.mark.slow
@pytest.mark.parametrize("mixture", [False, True])
def test_a_run_bounds_the_answer_by_its_last_step(tmp_path: Path, mixture: bool) -> None:
    from tests.train._helpers import write_mixture

    if mixture:
        mix = write_mixture(tmp_path, documents=(30, 12), seed=1)
        run = _run(tmp_path, corpus=mix, mixture=str(mix))
    else:
        run = _run(tmp_path)
    spec = resolve_run(str(run))
    assert spec.last_step == 12
    names = spec.source_names
    seen = 0
    for source in names:
        for document in range(len(spec.corpora[names.index(source)])):
            report = where(spec, document, source=source if mixture else None)
            assert report.last_step == 12
            for sighting in report.documents[0].sightings:
                assert 1 <= sighting.step <= 12
                assert document in _trained_rows(spec, sighting)
                seen += 1
            longer = where(spec, document, epochs=50, source=source if mixture else None)
            assert longer.documents[0].sightings == report.documents[0].sightings
    assert seen >= 12 * 4  # every row of the 12 steps trains some document


def test_a_mixture_needs_the_source_of_an_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.train._helpers import write_mixture

    mix = write_mixture(tmp_path, documents=(30, 12), seed=1)
    spec = resolve_run(None, data=DataConfig(corpus=str(mix), mixture=str(mix), block=16))
    with pytest.raises(ArgumentError, match="a document index needs its source"):
        where(spec, 3)
    report = where(spec, 3, source="small", epochs=2)
    (found,) = report.documents
    assert found.source == "small" and {s.epoch for s in found.sightings} == {0, 1}
    assert all(s.source == "small" for s in found.sightings)
    assert main(["where", "--mixture", str(mix), "3", "--source", "small", "--block", "16"]) == 0
    assert "document 3 of small" in capsys.readouterr().out
    assert main(["where", "--mixture", str(mix), "3", "--source", "nope", "--block", "16"]) == 2
    assert "`source` must be one of ['big', 'small']" in capsys.readouterr().err
