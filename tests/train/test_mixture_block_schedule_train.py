"""``mixle train --mixture`` with a block schedule (issue #27, item 1, mixtures).

The schedule comes from the mixture file (``block_schedule = "..."``) or from
``--block-schedule``; the model is built for the largest block, every step logs its
phase and block and trains the same tokens, a run stopped before the switch and
resumed after it (in process, or SIGKILLed in a subprocess: slow) is bitwise the
uninterrupted one, and ``mixle show`` rebuilds every step's batches with the digests
the run recorded.
"""

from __future__ import annotations

import itertools
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mixle.cli import main
from mixle.corpus import open_corpus
from mixle.errors import ArgumentError
from mixle.provenance import render_step, resolve_run, show_step, where
from mixle.train import read_metrics, train
from tests.train._helpers import (
    assert_bitwise_equal,
    cli,
    final_tensors,
    run_until,
    step_records,
    tiny_config,
    write_text_corpus,
)

STEPS = 8


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("mixture-blocks")
    write_text_corpus(directory / "big", documents=40, seed=1)
    write_text_corpus(directory / "small", documents=8, seed=2)
    return directory


def _mix(directory: Path, corpora: Path, schedule: str | None) -> Path:
    """A mixture file over ``corpora``; its ``block_schedule`` first (a TOML key after
    a table header would belong to the table)."""
    directory.mkdir(parents=True, exist_ok=True)
    head = "" if schedule is None else f'block_schedule = "{schedule}"\n\n'
    path = directory / "mix.toml"
    path.write_text(
        head + f'[[source]]\nname = "big"\npath = "{corpora / "big"}"\nweight = 0.75\n\n'
        f'[[source]]\nname = "small"\npath = "{corpora / "small"}"\nweight = 0.25\n'
    )
    return path


def _train(mix: Path, run: Path, steps: int = STEPS, **changes: Any) -> list[str]:
    lines: list[str] = []
    options: dict[str, Any] = {
        "mixture": str(mix),
        "block": 16,
        "batch_size": 4,
        "steps": steps,
        "checkpoint_dir": str(run),
        "checkpoint_every": 4,
        "log_every": 1,
        **changes,
    }
    train(tiny_config(mix, **options), log=lines.append)
    return lines


def _steps(run: Path) -> list[dict[str, Any]]:
    return [r for r in read_metrics(str(run / "metrics.jsonl")) if r["type"] == "step"]


def test_the_file_schedule_switches_blocks_and_logs_each_step(
    corpora: Path, tmp_path: Path
) -> None:
    mix = _mix(tmp_path, corpora, "16:0.5,64")  # 4 x 16 tokens a step, then 1 x 64
    lines = _train(mix, tmp_path / "run")
    steps = _steps(tmp_path / "run")
    assert [(r["phase"], r["block"]) for r in steps] == [(0, 16)] * 4 + [(1, 64)] * 4
    assert {r["tokens"] for r in steps} == {64}
    assert [r["batches"][0][1] for r in steps] == [64 * k for k in range(STEPS)]  # tokens
    assert sum(r["mixture"]["big"]["rows"] + r["mixture"]["small"]["rows"] for r in steps[-1:]) == (
        16 + 4
    )
    progress = [line for line in lines if line.startswith("step ")]
    assert progress[-1].endswith("| phase 1 block 64")
    position = final_tensors(tmp_path / "run")["model"]["position"]
    assert position.shape[0] == 64  # the model is built for the largest block


def test_the_option_schedule_resumes_bitwise_across_the_switch(
    corpora: Path, tmp_path: Path
) -> None:
    mix = _mix(tmp_path, corpora, None)
    by_tokens = {"block_schedule": "16:192,64"}  # three steps of 4 x 16, then 1 x 64
    _train(mix, tmp_path / "reference", **by_tokens)
    _train(mix, tmp_path / "split", steps=2, **by_tokens)  # phase 0 only
    _train(mix, tmp_path / "split", resume=True, **by_tokens)
    assert step_records(tmp_path / "split" / "metrics.jsonl") == step_records(
        tmp_path / "reference" / "metrics.jsonl"
    )
    assert [r["block"] for r in _steps(tmp_path / "split")] == [16] * 3 + [64] * 5
    assert_bitwise_equal(final_tensors(tmp_path / "reference"), final_tensors(tmp_path / "split"))


def test_show_rebuilds_every_step_as_it_trained(corpora: Path, tmp_path: Path) -> None:
    mix = _mix(tmp_path, corpora, "16:0.5,64")
    run = tmp_path / "run"
    _train(mix, run)
    spec = resolve_run(str(run))
    recorded = {r["step"]: [digest for _, _, digest in r["batches"]] for r in _steps(run)}
    blocks = {r["step"]: r["block"] for r in _steps(run)}
    for step, digests in recorded.items():
        report = show_step(spec, step)
        assert [r.digest for r in report.ranks] == digests, step
        # The step's own shape (4 x 16, then 1 x 64), said in the header when it differs.
        shape = (report.stream["step_rows"], report.stream["step_block"])
        assert shape == ((4, 16) if blocks[step] == 16 else (1, 64)), step
        header = render_step(report).splitlines()[1]
        assert header.endswith("this step: 1 row of 64 tokens per rank") == (shape == (1, 64))


def test_a_changed_file_schedule_is_refused_on_resume(
    corpora: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    _train(_mix(tmp_path / "a", corpora, "16:128,64"), run, steps=4)
    changed = _mix(tmp_path / "a", corpora, "16:192,64")
    with pytest.raises(Exception, match="block_schedule in checkpoint"):
        _train(changed, run, resume=True)


@pytest.mark.parametrize(
    ("schedule", "changes", "message"),
    [
        ("16:0.5,0", {}, "mix.toml: block schedule phase 1 `block` must be a positive integer"),
        ("16:0.5,64", {"block": 32}, r"`block` must be the block schedule's first block \(16\)"),
        ("16:0.5,64", {"block_schedule": "16:0.5,64"}, "give it once"),
        ("16:0.5,64", {"objective": "windows"}, "does not support objective='windows'"),
        ("16:0.5,64", {"packing": "best_fit"}, "does not support packing='best_fit'"),
    ],
)
def test_bad_schedules_are_refused_before_any_batch(
    corpora: Path, tmp_path: Path, schedule: str, changes: dict[str, Any], message: str
) -> None:
    mix = _mix(tmp_path, corpora, schedule)
    with pytest.raises(ArgumentError, match=message):
        _train(mix, tmp_path / "run", **changes)


def test_cli_bad_file_schedule_is_one_line_exit_2(
    corpora: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mix = _mix(tmp_path, corpora, "16:zz,64")
    args = ["train", "--mixture", str(mix), "--block", "16", "--steps", "4", "--no-progress"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "mix.toml: block schedule phase 0 '16:zz' must read" in err[0]


@pytest.mark.slow
def test_sigkilled_mixture_run_resumes_bitwise_across_the_switch(
    corpora: Path, tmp_path: Path
) -> None:
    mix = _mix(tmp_path, corpora, "16:0.5,64")
    command = [
        *cli("--mixture", str(mix), "--d-model", "32", "--n-layer", "1", "--n-head", "2"),
        *("--block", "16", "--batch-size", "4", "--threads", "1", "--log-every", "0"),
        *("--no-progress", "--steps", "30", "--checkpoint-every", "3", "--resume"),
    ]
    reference = tmp_path / "reference"
    run_until([*command, "--checkpoint-dir", str(reference)], reference / "metrics.jsonl", None, 0)
    run = tmp_path / "killed"
    metrics = run / "metrics.jsonl"
    for target in (7, 16, 22):  # before, right after, and well after the switch at 15
        _, killed = run_until(
            [*command, "--checkpoint-dir", str(run)], metrics, target, signal.SIGKILL
        )
        assert killed
    run_until([*command, "--checkpoint-dir", str(run)], metrics, None, 0)
    assert step_records(metrics) == step_records(reference / "metrics.jsonl")
    assert_bitwise_equal(final_tensors(reference), final_tensors(run))
    assert {r["block"] for r in _steps(run)} == {16, 64}


def test_where_finds_the_rows_that_train_each_document(corpora: Path, tmp_path: Path) -> None:
    mix = _mix(tmp_path, corpora, "16:0.5,64")
    run = tmp_path / "run"
    _train(mix, run)
    spec = resolve_run(str(run))
    corpus = {name: open_corpus(str(corpora / name)) for name in ("big", "small")}
    shown: dict[tuple[str, int], set[tuple[int, int, int]]] = {}
    for step in range(1, STEPS + 1):
        for rank, rows in enumerate(show_step(spec, step).ranks):
            for index, row in enumerate(rows.rows):
                for span in row.documents:
                    if span.targets > 1:  # two inputs of it: one of its tokens is a target
                        shown.setdefault((str(span.source), span.document), set()).add(
                            (step, rank, index)
                        )
    assert {name for name, _ in shown} == {"big", "small"}
    for (name, document), rows_shown in sorted(shown.items())[::3]:
        sightings = where(spec, document, source=name).documents[0].sightings
        tokens = np.asarray(corpus[name][document])
        covered: dict[int, list[tuple[int, int]]] = {}
        for s in sightings:
            batch = spec.batch(s.step, s.rank)
            targets = batch.targets[s.row][batch.loss_mask[s.row]].tolist()
            piece = tokens[s.start : s.stop].tolist()
            # The document's tokens [start, stop) are targets of that row, in order.
            assert any(targets[k : k + len(piece)] == piece for k in range(len(targets))), (
                name,
                document,
                s,
            )
            covered.setdefault(s.epoch, []).append((s.start, s.stop))
        for spans in covered.values():  # each token a target at most once an epoch
            spans.sort()
            assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
        assert rows_shown <= {(s.step, s.rank, s.row) for s in sightings}, (name, document)


def test_inspect_budgets_the_phases_of_the_file_schedule(
    corpora: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mix = _mix(tmp_path, corpora, "16:0.5,64")
    args = ["inspect", "--mixture", str(mix), "--steps", "8", "--block", "16"]
    assert main([*args, "--batch-size", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "4 rows x block 16 then 1 rows x block 64 (block_schedule" in lines[0]
    total = lines[[line.split()[0] for line in lines].index("total")].split()
    assert total[1:] == ["20", "512"]  # 4 steps x 4 rows + 4 x 1; 8 x 64 targets


@pytest.mark.slow
def test_two_rank_job_killed_before_the_switch_resumes_on_one_rank_exactly(
    corpora: Path, tmp_path: Path
) -> None:
    from tests._torchrun import torchrun_command

    # 2 ranks x 2 rows x 32 = 128 tokens a step: 6 steps of block 32, then 1 row of 64 per
    # rank; resumed on 1 rank x 4 rows (the same 128 tokens), then 2 rows of 64.
    mix = _mix(tmp_path, corpora, "32:768,64")
    steps = 12

    def options(run: Path, batch_size: int) -> list[str]:
        return [
            *("--mixture", str(mix), "--d-model", "32", "--n-layer", "1", "--n-head", "2"),
            *("--block", "32", "--batch-size", str(batch_size), "--threads", "1"),
            *("--log-every", "0", "--steps", str(steps), "--checkpoint-dir", str(run)),
            *("--checkpoint-every", "2", "--no-progress", "--resume"),
        ]

    reference = tmp_path / "reference"
    run_until(cli(*options(reference, 4)), reference / "metrics.jsonl", None, 0)
    run = tmp_path / "job"
    job = torchrun_command(2, "-m", "mixle.cli", "train", *options(run, 2), monitor_interval=0.1)
    _, killed = run_until(job, run / "metrics.jsonl", 5, signal.SIGKILL)
    assert killed
    run_until(cli(*options(run, 4)), run / "metrics.jsonl", None, 0)

    def trajectory(path: Path) -> dict[int, tuple[Any, ...]]:
        return {r["step"]: (r["global_batch"], r["mixture"], r["block"]) for r in _steps(path)}

    got, want = trajectory(run), trajectory(reference)
    assert sorted(got) == list(range(1, steps + 1)) and got == want
    assert {block for _, _, block in want.values()} == {32, 64}
