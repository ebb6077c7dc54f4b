"""The corpus each built-in format makes is pinned: its fingerprint (a hash over every
shard's checksum: ids, offsets, dtype, shard boundaries) for fixed inputs, as the
code before the format registry (3db65e4) made it. Any change to what a format
reads, how it cuts units or how the units become shards fails here."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mixle.corpus import ingest
from tests.corpus.ingest_helpers import random_docs, write_jsonl, write_megatron

#: case -> (fingerprint prefix, documents, skipped), recorded with 3db65e4's mixle.
EXPECTED = {
    "jsonl": ("af04c1c23f04c213", 300, 0),
    "jsonl-small-units": ("520fd891958340da", 300, 0),
    "jsonl-gz": ("af04c1c23f04c213", 300, 0),
    "jsonl-bad-skip": ("57a1500e877ce24c", 2, 2),
    "parquet": ("25546f2af6fe2f43", 300, 0),
    "npy": ("a4b9034f4cdf6913", 40, 0),
    "npz": ("5da9a17bfac99aa6", 300, 0),
    "npy-pair": ("af04c1c23f04c213", 300, 0),
    "megatron": ("9e822a1d3151cad4", 300, 0),
    "text": ("6594603d839da36b", 5, 0),
    "text-paragraphs": ("f58040d2629d9bb8", 40, 0),
    "text-forced": ("c7f3a38f535eb1ad", 1, 0),
    "mixed": ("002b5cc168fc4faa", 345, 0),
}


def _cases(src: Path) -> dict[str, tuple[list[str], dict[str, object]]]:
    docs = random_docs(7, 300, vocab=70000, max_len=60)
    write_jsonl(src / "a.jsonl", docs)
    with gzip.open(src / "b.jsonl.gz", "wb") as handle:
        handle.write((src / "a.jsonl").read_bytes())
    (src / "bad.jsonl").write_text(
        '{"input_ids": [1,2]}\nnot json\n{"input_ids": [1,-3]}\n{"tokens": [5]}\n'
    )
    table = pa.table({"input_ids": [doc.tolist() for doc in docs]})
    pq.write_table(table, src / "c.parquet", row_group_size=50)
    (src / "npy").mkdir()
    for index, doc in enumerate(docs[:40]):
        np.save(src / "npy" / f"d{index:03d}.npy", doc.astype(np.int32))
    flat = np.concatenate(docs)
    offsets = np.concatenate(([0], np.cumsum([len(doc) for doc in docs])))
    np.savez(src / "e.npz", tokens=flat, offsets=offsets)
    np.save(src / "f.tokens.npy", flat)
    np.save(src / "f.offsets.npy", offsets)
    write_megatron(src / "g", [[doc[:5], doc[5:]] for doc in docs], np.dtype(np.int32))
    (src / "txt").mkdir()
    for index in range(5):
        (src / "txt" / f"t{index}.txt").write_text(
            "".join(f"para {index} {j} é\n\nsecond line\n" for j in range(7))
        )
    small: dict[str, object] = {"unit_size": 4000, "shard_size": 4000}
    return {
        "jsonl": ([str(src / "a.jsonl")], {}),
        "jsonl-small-units": ([str(src / "a.jsonl")], {"unit_size": 997}),
        "jsonl-gz": ([str(src / "b.jsonl.gz")], {}),
        "jsonl-bad-skip": ([str(src / "bad.jsonl")], {"on_error": "skip"}),
        "parquet": ([str(src / "c.parquet")], {}),
        "npy": ([str(src / "npy")], {"unit_size": 1000}),
        "npz": ([str(src / "e.npz")], small),
        "npy-pair": ([str(src / "f.tokens.npy")], {}),
        "megatron": ([str(src / "g")], small),
        "text": ([str(src / "txt")], {}),
        "text-paragraphs": ([str(src / "txt")], {"split": "paragraphs", "append_eos": 256}),
        "text-forced": ([str(src / "txt" / "t0.txt")], {"input_format": "text"}),
        "mixed": ([str(src / "a.jsonl"), str(src / "npy"), str(src / "txt")], {"unit_size": 3000}),
    }


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, int, int]]:
    src = tmp_path_factory.mktemp("inputs")
    found = {}
    for name, (inputs, options) in _cases(src).items():
        out = tmp_path_factory.mktemp(name) / "corpus"
        summary = ingest(inputs, str(out), workers=1, **options)  # type: ignore[arg-type]
        manifest = json.loads((out / "manifest.json").read_text())
        found[name] = (manifest["fingerprint"][:16], summary.documents, summary.skipped)
    return found


def test_every_format_makes_the_corpus_it_made_before_the_registry(
    outputs: dict[str, tuple[str, int, int]],
) -> None:
    changed = {name: found for name, found in outputs.items() if EXPECTED.get(name) != found}
    assert not changed, f"(fingerprint, documents, skipped) changed: {changed}"
