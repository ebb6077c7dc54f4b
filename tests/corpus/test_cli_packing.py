"""`mixle inspect CORPUS --packing best_fit --block N`: both packings side by side."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from mixle.cli import main
from mixle.data import compare_packings


@pytest.fixture
def corpus(make_corpus: Callable[..., Path]) -> Path:
    rng = np.random.default_rng(0)
    documents = [rng.integers(0, 100, int(n)) for n in rng.integers(1, 300, 300)]
    return make_corpus(documents, vocab_size=100)


def test_inspect_prints_both_packings(corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(corpus), "--packing", "best_fit", "--block", "128"]) == 0
    out = capsys.readouterr().out
    assert "concatenate" in out and "best_fit" in out
    assert "docs cut" in out and "padding" in out and "rows/epoch" in out


def test_inspect_json_holds_the_library_figures(
    corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["inspect", str(corpus), "--packing", "best_fit", "--block", "128", "--json"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    from mixle.corpus import open_corpus

    expected = compare_packings(open_corpus(corpus).lengths, block=128)
    assert summary["packing"] == {s.packing: s.to_dict() for s in expected}


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--block", "2"], "at least 3"), (["--window-documents", "0"], "window_documents")],
)
def test_bad_packing_options_exit_2_with_one_line(
    corpus: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert main(["inspect", str(corpus), "--packing", "best_fit", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
