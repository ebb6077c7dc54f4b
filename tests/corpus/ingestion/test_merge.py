"""``mixle merge``: concatenation in argument order, hard links, reused digests, widening."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from mixle.cli import main
from mixle.corpus import CorpusWriter, merge_corpora, open_corpus, verify_corpus
from mixle.errors import ArgumentError, CorpusExistsError
from tests.corpus.ingest_helpers import random_docs


def _corpus(path: Path, docs: list[np.ndarray], **options: object) -> Path:
    with CorpusWriter(path, shard_max_bytes=600, **options) as writer:  # type: ignore[arg-type]
        writer.add_many(docs)
    return path


def _docs(path: Path) -> list[list[int]]:
    corpus = open_corpus(path)
    return [corpus[i].tolist() for i in range(len(corpus))]


def test_merge_concatenates_in_argument_order_with_hard_links(tmp_path: Path) -> None:
    a_docs, b_docs, c_docs = random_docs(1, 80), random_docs(2, 50), random_docs(3, 20)
    a = _corpus(tmp_path / "a", a_docs, vocab_size=1000)
    b = _corpus(tmp_path / "b", b_docs, vocab_size=1000)
    c = _corpus(tmp_path / "c", c_docs, vocab_size=1000)
    out = tmp_path / "merged"
    manifest = merge_corpora([str(b), str(a), str(c)], out)
    expected = [d.tolist() for d in (*b_docs, *a_docs, *c_docs)]
    assert _docs(out) == expected
    assert verify_corpus(out).ok
    sources = [open_corpus(p).manifest["shards"] for p in (b, a, c)]
    flat = [entry for shards in sources for entry in shards]
    assert [e["tokens_sha256"] for e in manifest["shards"]] == [e["tokens_sha256"] for e in flat]
    first = open_corpus(b).manifest["shards"][0]["tokens"]
    assert os.stat(out / "shard-00000.tokens").st_ino == os.stat(b / first).st_ino  # no copy
    assert manifest["metadata"]["merged_from"][0]["corpus"] == str(b)


def test_the_merge_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _corpus(tmp_path / "a", random_docs(4, 30), vocab_size=1000)
    b = _corpus(tmp_path / "b", random_docs(5, 30), vocab_size=1000)
    assert main(["merge", str(a), str(b), str(tmp_path / "m")]) == 0
    assert "merged 2 corpora" in capsys.readouterr().out
    assert main(["merge", str(a), str(b), str(tmp_path / "m")]) == 2
    assert "already holds a corpus" in capsys.readouterr().err
    assert main(["merge", str(b), str(a), str(tmp_path / "m"), "--overwrite", "-q"]) == 0
    assert _docs(tmp_path / "m")[:30] == _docs(b)


def test_different_dtypes_are_refused_unless_widened_and_only_narrow_shards_are_rewritten(
    tmp_path: Path,
) -> None:
    small = _corpus(tmp_path / "small", random_docs(6, 40), vocab_size=1000)
    wide_docs = random_docs(7, 40, vocab=100_000)
    wide = _corpus(tmp_path / "wide", wide_docs, vocab_size=100_000)
    with pytest.raises(ArgumentError, match=r"different dtypes .*uint16.*uint32.*--dtype"):
        merge_corpora([str(small), str(wide)], tmp_path / "x", vocab_size=100_000)
    with pytest.raises(ArgumentError, match="different vocab sizes"):
        merge_corpora([str(small), str(wide)], tmp_path / "x", dtype="uint32")
    with pytest.raises(ArgumentError, match="narrower than"):
        merge_corpora([str(small), str(wide)], tmp_path / "x", dtype="uint16", vocab_size=100_000)
    out = tmp_path / "widened"
    before = {p.name: p.read_bytes() for p in small.iterdir()}
    merge_corpora([str(small), str(wide)], out, dtype="uint32", vocab_size=100_000)
    assert {p.name: p.read_bytes() for p in small.iterdir()} == before  # input untouched
    assert _docs(out) == _docs(small) + _docs(wide)
    assert open_corpus(out).dtype == np.uint32 and verify_corpus(out).ok
    n_small = len(open_corpus(small).manifest["shards"])
    wide_first = open_corpus(wide).manifest["shards"][0]["tokens"]
    merged_wide = out / f"shard-{n_small:05d}.tokens"
    assert os.stat(merged_wide).st_ino == os.stat(wide / wide_first).st_ino  # linked, not rewritten
    assert os.stat(out / "shard-00000.tokens").st_nlink == 1  # the narrow one was rewritten


def test_bad_merges_are_refused(tmp_path: Path) -> None:
    a = _corpus(tmp_path / "a", random_docs(8, 10))
    with pytest.raises(ArgumentError, match="at least two"):
        merge_corpora([str(a)], tmp_path / "x")
    with pytest.raises(ArgumentError, match="is the input"):
        merge_corpora([str(a), str(a)], a)
    b = _corpus(tmp_path / "b", random_docs(9, 10))
    with pytest.raises(CorpusExistsError, match="already holds a corpus"):
        merge_corpora([str(a), str(a)], b)
    assert _docs(b) == [d.tolist() for d in random_docs(9, 10)]
    merge_corpora([str(a), str(a)], tmp_path / "twice")
    assert _docs(tmp_path / "twice") == _docs(a) + _docs(a)
