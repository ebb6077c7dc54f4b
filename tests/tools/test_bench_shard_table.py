"""``tools/bench_shard_table.py`` (issue #25 item 6): the three manifests it compares
hold one corpus, and a small run as ``slow``.

Timings are measurements, not asserted. What is checked: the ``list`` form is a
version-1 manifest alone, ``table`` a version-2 manifest beside its binary shard table,
``sidecar`` the table plus the document-offsets sidecar, and all three open as the same
documents; a small run prints a row per form and deletes its corpus.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mixle.corpus import open_corpus
from tests.tools._run import run_tool
from tools.bench_shard_table import FORMS, _build


def test_the_three_forms_are_one_corpus_with_and_without_table_and_sidecar(
    tmp_path: Path,
) -> None:
    _build(tmp_path, shards=12, docs=3, tokens=5)
    files = {form: {p.name for p in (tmp_path / form).iterdir()} for form in FORMS}
    assert "shards.table" not in files["list"] and "document_offsets.bin" not in files["list"]
    assert "shards.table" in files["table"] and "document_offsets.bin" not in files["table"]
    assert {"shards.table", "document_offsets.bin"} <= files["sidecar"]
    versions = {
        form: json.loads((tmp_path / form / "manifest.json").read_text())["format_version"]
        for form in FORMS
    }
    assert versions["list"] == 1 and versions["table"] == versions["sidecar"] == 2
    expected = list(open_corpus(tmp_path / "list"))
    assert len(expected) == 36 and all(len(d) == 5 for d in expected)
    for form in ("table", "sidecar"):
        got = list(open_corpus(tmp_path / form))
        assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True)), form


@pytest.mark.slow
def test_small_run_prints_a_row_per_form_and_deletes_the_corpus(tmp_path: Path) -> None:
    work = tmp_path / "work"
    result = run_tool(
        "bench_shard_table.py", "--shards", "40", "--rounds", "1", "--work", str(work)
    )
    out = result.stdout
    assert "| manifest | metadata bytes | open_corpus wall / CPU | RssAnon of open |" in out
    for form in FORMS:
        assert f"\n| {form} | " in out, form
    assert not work.exists()
