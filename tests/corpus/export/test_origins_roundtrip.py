"""Origins survive the round trips out of a corpus and back: Megatron export (a
``PREFIX.origins`` beside each pair, picked up by ``mixle ingest``), LitData export (an
``origins.bin`` of the corpus's documents), and ``convert`` to zarr and back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mixle.corpus import (
    ORIGINS_NAME,
    Origin,
    convert_corpus,
    ingest,
    open_corpus,
    verify_corpus,
)
from mixle.corpus.export import export_corpus
from mixle.corpus.format.origins import OriginsTable
from mixle.errors import IngestError

OPTIONS = {"unit_size": 500, "shard_size": 400, "vocab_size": 1000}


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """A corpus of 120 one-id documents from two JSONL files, with ids, in many shards."""
    paths = []
    for name, lines in (("a", 70), ("b", 50)):
        path = tmp_path / f"{name}.jsonl"
        rows = (json.dumps({"input_ids": [n], "key": f"{name}{n}"}) for n in range(lines))
        path.write_text("\n".join(rows) + "\n")
        paths.append(str(path))
    ingest(paths, tmp_path / "corpus", id_field="key", **OPTIONS)
    return tmp_path / "corpus"


def _origins(path: Path) -> list[Origin | None]:
    documents = open_corpus(path)
    return [documents.origin(i) for i in range(len(documents))]


@pytest.mark.parametrize("single", [False, True])
def test_a_megatron_export_ingested_again_keeps_every_origin(
    corpus: Path, tmp_path: Path, single: bool
) -> None:
    before = _origins(corpus)
    assert open_corpus(corpus).num_shards > 3 and before[75] == Origin(
        str(tmp_path / "b.jsonl"), "line", 5, "b5"
    )
    summary = export_corpus(corpus, tmp_path / "meg", "megatron", single=single)
    assert all(Path(prefix + ".origins").is_file() for prefix in summary.prefixes)
    ingest([str(tmp_path / "meg")], tmp_path / "again", **OPTIONS)
    assert _origins(tmp_path / "again") == before
    assert (tmp_path / "again" / ORIGINS_NAME).read_bytes() == (corpus / ORIGINS_NAME).read_bytes()
    assert verify_corpus(tmp_path / "again").ok


def test_a_megatron_pair_without_its_sidecar_names_its_own_documents(
    corpus: Path, tmp_path: Path
) -> None:
    summary = export_corpus(corpus, tmp_path / "meg", "megatron", single=True)
    Path(summary.prefixes[0] + ".origins").unlink()
    ingest([summary.prefixes[0]], tmp_path / "again", **OPTIONS)
    assert open_corpus(tmp_path / "again").origin(3) == Origin(
        summary.prefixes[0] + ".bin", "document", 3, None
    )


def test_a_megatron_sidecar_of_other_documents_stops_the_ingest(
    corpus: Path, tmp_path: Path
) -> None:
    summary = export_corpus(corpus, tmp_path / "meg", "megatron")
    first, second = summary.prefixes[:2]
    Path(first + ".origins").write_bytes(Path(second + ".origins").read_bytes())
    with pytest.raises(IngestError, match=r"shard-00000\.origins: origins of \d+ documents"):
        ingest([first], tmp_path / "again", **OPTIONS)
    Path(first + ".origins").write_bytes(b"junk")
    with pytest.raises(IngestError, match=r"shard-00000\.origins: not an origins sidecar"):
        ingest([first], tmp_path / "again", **OPTIONS)


def test_a_litdata_export_carries_the_corpus_origins(corpus: Path, tmp_path: Path) -> None:
    export_corpus(corpus, tmp_path / "lit", "litdata")
    table = OriginsTable.of_file((tmp_path / "lit" / ORIGINS_NAME).read_bytes(), "lit")
    assert [table.origin(i) for i in range(table.documents)] == _origins(corpus)


def test_zarr_and_back_keep_the_sidecar(corpus: Path, tmp_path: Path) -> None:
    pytest.importorskip("zarr")
    before = _origins(corpus)
    convert_corpus(corpus, tmp_path / "c.zarr", layout="zarr")
    assert _origins(tmp_path / "c.zarr") == before
    assert open_corpus(tmp_path / "c.zarr").find_id("a7").tolist() == [7]
    assert verify_corpus(tmp_path / "c.zarr").ok
    convert_corpus(tmp_path / "c.zarr", tmp_path / "back", layout="raw")
    assert _origins(tmp_path / "back") == before
    assert (tmp_path / "back" / ORIGINS_NAME).read_bytes() == (corpus / ORIGINS_NAME).read_bytes()


def test_a_damaged_zarr_sidecar_is_named_and_the_corpus_still_reads(
    corpus: Path, tmp_path: Path
) -> None:
    pytest.importorskip("zarr")
    convert_corpus(corpus, tmp_path / "c.zarr", layout="zarr")
    for chunk in (tmp_path / "c.zarr" / ORIGINS_NAME / "c").iterdir():
        chunk.write_bytes(b"\0" * 16)
    report = verify_corpus(tmp_path / "c.zarr", raise_errors=False)
    assert report.origins_error is not None and ORIGINS_NAME in str(report.origins_error)
    documents = open_corpus(tmp_path / "c.zarr")
    assert int(documents[4][0]) == 4
