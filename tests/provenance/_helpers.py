"""Helpers for the provenance tests: a byte-level corpus ingested from JSONL (so it has
origins), and the rebuilt rows checked against the corpus and the trainer's source."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mixle.corpus import ingest, open_corpus
from mixle.provenance import RunSpec, StepReport

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]


def document_text(file: int, line: int) -> str:
    """The text of line ``line`` of input ``file``: a few words, then its own tag."""
    rng = np.random.default_rng(1000 * file + line)
    words = " ".join(WORDS[int(i)] for i in rng.integers(0, len(WORDS), int(rng.integers(1, 12))))
    return f"{words} [{file}:{line}]\n"


def write_jsonl_corpus(directory: Path, lines: tuple[int, ...] = (30, 20)) -> Path:
    """Ingest one JSONL file per entry of ``lines`` (``input_ids`` of UTF-8 bytes, an
    ``id`` field) into ``directory/corpus``: a corpus with an origins sidecar."""
    inputs = []
    for file, count in enumerate(lines):
        path = directory / f"part{file}.jsonl"
        with open(path, "w", encoding="utf-8") as handle:
            for line in range(count):
                ids = list(document_text(file, line).encode())
                handle.write(json.dumps({"input_ids": ids, "id": f"doc-{file}-{line}"}) + "\n")
        inputs.append(str(path))
    out = directory / "corpus"
    ingest(inputs, out, vocab_size=256, shard_size=2048)
    return out


def assert_rows_hold_their_documents(
    report: StepReport, spec: RunSpec, corpora: dict[str, Path]
) -> None:
    """Every row's documents, read from the corpora at their token ranges and put end to
    end, are the row's inputs (no boundary id), and the targets add up to the mask."""
    opened = {name: open_corpus(path) for name, path in corpora.items()}
    for rank in report.ranks:
        batch = spec.batch(report.step, rank.rank)
        assert len(rank.rows) == batch.num_rows
        for row in rank.rows:
            if not row.documents:  # the fully masked rows that complete a last global batch
                assert row.targets == 0 and row.padding == row.positions
                continue
            pieces = []
            for span in row.documents:
                document = np.asarray(opened[span.source][span.document])
                assert span.length == len(document)
                assert 0 <= span.start < span.end <= span.length
                pieces.append(document[span.start : span.end])
            held = np.concatenate(pieces)
            context = batch.context[row.row]
            assert np.array_equal(held, context[: len(held)])
            assert row.padding == len(context) - len(held)
            assert sum(span.targets for span in row.documents) == row.targets
            assert row.targets == int(batch.loss_mask[row.row].sum())
