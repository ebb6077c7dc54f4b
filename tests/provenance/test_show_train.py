"""``mixle show`` of real ``mixle train`` runs: at every step, every rank's rebuilt batch
has the digest the run's ``metrics.jsonl`` recorded for it, for the global and per-rank
layouts, concatenate and best-fit packing, windows, mixtures, a resume with another
batch size and two-rank torchrun jobs; steps past the run and foreign options are
refused."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from mixle.cli import main
from mixle.errors import ArgumentError, CheckpointError
from mixle.provenance import resolve_run, show_step
from mixle.train import read_metrics, train
from tests._torchrun import launch_env, torchrun_command
from tests.provenance._helpers import assert_rows_hold_their_documents, write_jsonl_corpus
from tests.train._helpers import tiny_config, write_mixture

STEPS = 6


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_jsonl_corpus(tmp_path_factory.mktemp("show-train"), (24, 16))


def _recorded(run: Path) -> dict[int, list[str]]:
    """Every step's per-rank digests, as the run logged them."""
    return {
        r["step"]: [digest for _, _, digest in r["batches"]]
        for r in read_metrics(str(run / "metrics.jsonl"))
        if r["type"] == "step"
    }


def _assert_shown_as_trained(run: Path) -> None:
    spec = resolve_run(str(run))
    recorded = _recorded(run)
    assert recorded and spec.last_step == max(recorded)
    for step, digests in recorded.items():
        assert [r.digest for r in show_step(spec, step).ranks] == digests, step


def _train(corpus: Path, run: Path, **changes: object) -> None:
    options: dict[str, object] = {
        "steps": STEPS,
        "checkpoint_dir": str(run),
        "checkpoint_every": 4,
        "keep_last": 1,
        "block": 16,
        "batch_size": 3,
        **changes,
    }
    config = tiny_config(corpus, **options)
    train(config, log=lambda _: None)


def test_a_global_run_is_shown_as_it_trained(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    _train(corpus, run)
    _assert_shown_as_trained(run)
    spec = resolve_run(str(run))
    assert spec.record is not None and spec.record.step == STEPS
    assert_rows_hold_their_documents(show_step(spec, 3), spec, {str(corpus): corpus})
    # The run's last step is named; stream options are refused (the run has its own).
    with pytest.raises(ArgumentError, match=f"at most {STEPS}, the last step of the run"):
        show_step(spec, STEPS + 1)
    assert main(["show", str(run), "--step", str(STEPS + 1)]) == 2
    assert f"at most {STEPS}" in capsys.readouterr().err
    assert main(["show", str(run), "--step", "2", "--block", "8"]) == 2
    assert "Got block=8" in capsys.readouterr().err
    assert main(["show", str(run), "--step", "2", "--rank", "1"]) == 2
    assert "world size 1" in capsys.readouterr().err
    assert main(["show", str(run), "--step", "2", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["stream"]["run"] == str(run) and shown["stream"]["order"] == "blocks"
    assert [r["digest"] for r in shown["ranks"]] == _recorded(run)[2]
    # One checkpoint named by itself is the run as of that checkpoint.
    checkpoint = spec.record.checkpoint
    assert resolve_run(checkpoint).last_step == STEPS


def test_a_run_whose_corpus_changed_is_refused(tmp_path: Path) -> None:
    corpus = write_jsonl_corpus(tmp_path, (24, 16))
    run = tmp_path / "run"
    _train(corpus, run, steps=2)
    shutil.rmtree(corpus)
    assert write_jsonl_corpus(tmp_path, (30, 10)) == corpus  # other documents, same path
    with pytest.raises(CheckpointError, match="has the corpus or the mixture file changed"):
        show_step(resolve_run(str(run)), 1)


@pytest.mark.slow
@pytest.mark.parametrize(
    "changes",
    [
        {"layout": "per-rank"},
        {"packing": "best_fit"},
        {"order": "permutation"},
        {"document_mask": True},
        {"objective": "windows"},
        {"objective": "windows", "layout": "per-rank"},
        {"holdout_documents": 5},
    ],
    ids=lambda changes: ",".join(f"{k}={v}" for k, v in changes.items()),
)
def test_every_layout_and_packing_is_shown_as_it_trained(
    corpus: Path, tmp_path: Path, changes: dict[str, object]
) -> None:
    run = tmp_path / "run"
    _train(corpus, run, **changes)
    _assert_shown_as_trained(run)


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["packed", "windows"])
def test_a_mixture_run_is_shown_as_it_trained(
    tmp_path: Path, objective: str, capsys: pytest.CaptureFixture[str]
) -> None:
    mix = write_mixture(tmp_path / "mix", documents=(30, 8), seed=3)
    run = tmp_path / "run"
    config = tiny_config(
        mix, mixture=str(mix), objective=objective, steps=STEPS, checkpoint_dir=str(run)
    )
    train(config, log=lambda _: None)
    _assert_shown_as_trained(run)
    report = show_step(resolve_run(str(run)), 3)
    sources = {row.source for rank in report.ranks for row in rank.rows}
    assert sources <= {"big", "small"} and sources
    if objective == "packed":
        spans = [s for rank in report.ranks for row in rank.rows for s in row.documents]
        assert spans and all(
            s.source == row.source for row in report.ranks[0].rows for s in row.documents
        )
    # The same rows from the mixture file and the stream options, without the run.
    assert (
        main(
            [
                "show",
                "--mixture",
                str(mix),
                "--step",
                "3",
                "--block",
                "32",
                "--batch-size",
                "4",
                "--objective",
                objective,
                "--json",
            ]
        )
        == 0
    )
    given = json.loads(capsys.readouterr().out)
    assert [r["digest"] for r in given["ranks"]] == [r.digest for r in report.ranks]


@pytest.mark.slow
def test_a_run_resumed_with_another_batch_size_shows_the_steps_after_its_checkpoint(
    corpus: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    _train(corpus, run, steps=3)
    _train(corpus, run, steps=STEPS, batch_size=5, resume=True, checkpoint_every=0)
    spec = resolve_run(str(run))
    recorded = _recorded(run)
    assert spec.record is not None and spec.record.step == STEPS
    # Every step, before and after the resume, with the shape that trained it.
    for step, digests in recorded.items():
        report = show_step(spec, step)
        assert [r.digest for r in report.ranks] == digests, step
        assert report.stream["batch_size"] == (3 if step <= 3 else 5)
    # Without the metrics log, only the newest checkpoint anchors: the steps after it.
    (run / "metrics.jsonl").rename(run / "moved.jsonl")
    with pytest.raises(ArgumentError, match="resumed with another world size or batch size"):
        show_step(resolve_run(str(run)), 2)
    (run / "moved.jsonl").rename(run / "metrics.jsonl")
    # A run that went on past its newest checkpoint (a crash): the steps after it are
    # placed from it, the last one named by the metrics log.
    _train(corpus, run, steps=STEPS + 2, batch_size=5, resume=True, keep_last=2)
    shutil.rmtree(run / f"step-{STEPS + 2:08d}")
    spec = resolve_run(str(run))
    assert spec.record is not None and spec.record.step == STEPS
    assert spec.last_step == STEPS + 2
    for step in (STEPS + 1, STEPS + 2):
        assert [r.digest for r in show_step(spec, step).ranks] == _recorded(run)[step]
    assert recorded[STEPS] == _recorded(run)[STEPS]


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["global", "per-rank"])
def test_a_two_rank_torchrun_job_is_shown_as_each_rank_trained(
    corpus: Path, tmp_path: Path, layout: str
) -> None:
    run = tmp_path / "run"
    args = [
        *("train", str(corpus), "--layout", layout, "--steps", str(STEPS)),
        *("--d-model", "32", "--n-layer", "1", "--n-head", "2", "--block", "16"),
        *("--batch-size", "3", "--threads", "1", "--log-every", "0", "--no-progress"),
        *("--checkpoint-dir", str(run)),
    ]
    job = subprocess.run(
        torchrun_command(2, "-m", "mixle.cli", *args),
        env=launch_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert job.returncode == 0, job.stderr[-3000:]
    _assert_shown_as_trained(run)
    assert len(show_step(resolve_run(str(run)), 2).ranks) == 2
