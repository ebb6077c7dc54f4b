"""``mixle show`` and ``mixle where`` of runs whose batches change shape: a block
schedule (rows per global batch change at the phase switch), variable-sequence-length
buckets (one bucket per step) and a best-fit mixture: every rebuilt batch has the
digest the run's ``metrics.jsonl`` recorded, and every sighting lies in its step's rows.
A run whose batches follow the training losses (a VSL bandit) is refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mixle.cli import main
from mixle.errors import ArgumentError
from mixle.provenance import render_where, resolve_run, show_step, where
from mixle.train import read_metrics, train
from tests.provenance._helpers import write_jsonl_corpus
from tests.train._helpers import tiny_config, write_mixture

STEPS = 6


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_jsonl_corpus(tmp_path_factory.mktemp("show-curricula"), (24, 16))


def _train(config_of: Path, run: Path, **changes: object) -> Path:
    options: dict[str, object] = {
        "steps": STEPS,
        "checkpoint_dir": str(run),
        "checkpoint_every": 4,
        "keep_last": 1,
        "block": 16,
        "batch_size": 4,
        **changes,
    }
    train(tiny_config(config_of, **options), log=lambda _: None)
    return run


def _assert_shown_as_trained(run: Path) -> None:
    spec = resolve_run(str(run))
    recorded = {
        r["step"]: [digest for _, _, digest in r["batches"]]
        for r in read_metrics(str(run / "metrics.jsonl"))
        if r["type"] == "step"
    }
    assert recorded and spec.last_step == max(recorded)
    for step, digests in recorded.items():
        assert [r.digest for r in show_step(spec, step).ranks] == digests, step


SHAPES = [
    {"block_schedule": "16:0.5,32"},
    {"block_schedule": "16:0.5,32", "layout": "per-rank"},
    {"vsl_buckets": 4},
    {"vsl_buckets": 4, "vsl_curriculum": "grow_p2"},
]


def _named(changes: dict[str, object]) -> str:
    return ",".join(f"{k}={v}" for k, v in changes.items())


@pytest.fixture(scope="module")
def runs(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One trained run per shape, by :func:`_named`."""
    return {
        _named(changes): _train(corpus, tmp_path_factory.mktemp("run"), **changes)
        for changes in SHAPES
    }


@pytest.mark.parametrize("changes", SHAPES, ids=_named)
def test_runs_whose_batches_change_shape_are_shown_as_they_trained(
    runs: dict[str, Path], changes: dict[str, object]
) -> None:
    _assert_shown_as_trained(runs[_named(changes)])


def _assert_sightings_are_shown(run: Path, vsl: bool) -> None:
    """Every sighting of a document (those the first and last steps show) is in the
    rows its step shows and, with VSL buckets (one piece a row, its inputs its
    targets), every shown piece is a sighting with the piece's target count."""
    spec = resolve_run(str(run))
    shown = {
        (step, rank, row, span.document): span.targets
        for step in (1, STEPS)
        for rank, rows in enumerate(show_step(spec, step).ranks)
        for row, report in enumerate(rows.rows)
        for span in report.documents
    }
    for document in sorted({document for *_, document in shown})[:4]:
        report = where(spec, document)
        if vsl:
            assert report.closed_form and "piece orders inverted" in render_where(report)
        sighted = {}
        for sighting in report.documents[0].sightings:
            rows = show_step(spec, sighting.step).ranks[sighting.rank].rows
            assert sighting.row < len(rows), (document, sighting)
            row = rows[sighting.row]
            held = [s for s in row.documents if s.document == document]
            if not held and (sighting.start, sighting.stop) == (0, 1):
                # The row's last target is the document's first token, predicted from
                # the document before it: `where` counts targets, `show` lists inputs.
                last = row.documents[-1]
                held = [last] if last.end == last.length else []
            assert held, (document, sighting)
            sighted[sighting.step, sighting.rank, sighting.row] = sighting.stop - sighting.start
        assert sighted, document
        if vsl:
            pieces = {
                (step, rank, row): targets
                for (step, rank, row, d), targets in shown.items()
                if d == document and targets
            }
            assert pieces.items() <= sighted.items(), document


@pytest.mark.parametrize("changes", SHAPES[2:], ids=_named)
def test_vsl_sightings_lie_in_the_rows_shown(
    runs: dict[str, Path], changes: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    run = runs[_named(changes)]
    _assert_sightings_are_shown(run, vsl=True)
    assert main(["where", str(run), "3", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["closed_form"] is True and report["documents"][0]["sightings"]


@pytest.mark.parametrize("changes", SHAPES[:2], ids=_named)
def test_block_schedule_sightings_lie_in_the_rows_shown(
    runs: dict[str, Path], changes: dict[str, object]
) -> None:
    _assert_sightings_are_shown(runs[_named(changes)], vsl=False)


def test_a_best_fit_mixture_run_is_shown_as_it_trained(tmp_path: Path) -> None:
    mix = write_mixture(tmp_path / "mix", documents=(30, 8), seed=3)
    run = tmp_path / "run"
    config = tiny_config(
        mix, mixture=str(mix), packing="best_fit", steps=STEPS, checkpoint_dir=str(run)
    )
    train(config, log=lambda _: None)
    _assert_shown_as_trained(run)
    rows = show_step(resolve_run(str(run)), 2).ranks[0].rows
    assert rows and all(np.all([s.source == row.source for s in row.documents]) for row in rows)


def test_a_vsl_bandit_run_is_refused_by_name(corpus: Path, tmp_path: Path) -> None:
    run = _train(corpus, tmp_path / "run", vsl_buckets=4, vsl_curriculum="bandit")
    with pytest.raises(ArgumentError, match="vsl_curriculum='bandit'"):
        resolve_run(str(run))
