"""Issue #13: ``mixle train`` resumes on another number of processes or batch size.

The global layout's row cursor is the only data state of a run, so a job started with
``torchrun --nproc_per_node 2``, killed, resumed on 1 process and then on 2 again trains
on exactly the global batches of an uninterrupted 1-process run (hash of every step's
concatenated batch in the metrics log), and ends with the same weights to float
tolerance.
"""

from __future__ import annotations

import signal
from pathlib import Path

import torch

from mixle.train import read_metrics, train
from tests.torchrun_launch import torchrun_command
from tests.train._helpers import final_tensors, last_step, run_until, tiny_config

STEPS = 18


def _quiet(line: str) -> None:
    del line


def _global_hashes(metrics: Path) -> list[str]:
    return [r["global_batch"] for r in read_metrics(str(metrics)) if r["type"] == "step"]


def _job(corpus: Path, run: Path, nproc: int, batch_size: int, steps: int) -> list[str]:
    return torchrun_command(
        nproc,
        "-m",
        "mixle.cli",
        "train",
        str(corpus),
        *("--d-model", "32", "--n-layer", "1", "--n-head", "2", "--block", "32"),
        *("--batch-size", str(batch_size), "--threads", "1", "--log-every", "0"),
        *("--steps", str(steps), "--checkpoint-dir", str(run), "--checkpoint-every", "2"),
        *("--no-progress", "--resume"),
    )


def test_torchrun_two_ranks_killed_resumed_on_one_then_two_matches_one_process(
    text_corpus: Path, tmp_path: Path
) -> None:
    reference = tmp_path / "reference"
    train(
        tiny_config(text_corpus, steps=STEPS, batch_size=4, checkpoint_dir=str(reference)),
        log=_quiet,
    )
    run = tmp_path / "elastic"
    code, killed = run_until(
        _job(text_corpus, run, 2, 2, STEPS), run / "metrics.jsonl", 5, signal.SIGKILL
    )
    assert killed and code == -signal.SIGKILL
    run_until(_job(text_corpus, run, 1, 4, 12), run / "metrics.jsonl", None, 0)
    assert last_step(run / "metrics.jsonl") == 12
    run_until(_job(text_corpus, run, 2, 2, STEPS), run / "metrics.jsonl", None, 0)

    records = read_metrics(str(run / "metrics.jsonl"))
    steps = {r["step"]: r["global_batch"] for r in records if r["type"] == "step"}
    assert sorted(steps) == list(range(1, STEPS + 1))
    assert [steps[s] for s in range(1, STEPS + 1)] == _global_hashes(reference / "metrics.jsonl")
    starts = [r for r in records if r["type"] == "start"]
    assert starts[1]["changed"] == {"world_size": [2, 1], "batch_size": [2, 4]}
    assert starts[2]["changed"] == {"world_size": [1, 2], "batch_size": [4, 2]}
    output = (run.parent / "elastic.out").read_text()
    assert "world_size 2 -> 1; batch_size 2 -> 4" in output
    got, want = final_tensors(run), final_tensors(reference)
    for name, tensor in want["model"].items():
        torch.testing.assert_close(got["model"][name], tensor, rtol=1e-3, atol=1e-4)


def test_resume_with_another_batch_size_continues_at_the_same_row(
    text_corpus: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    train(tiny_config(text_corpus, steps=3, batch_size=4, checkpoint_dir=str(run)), log=_quiet)
    lines: list[str] = []
    train(
        tiny_config(text_corpus, epochs=1, batch_size=6, checkpoint_dir=str(run), resume=True),
        log=lines.append,
    )
    assert any("(epoch 0, row 12); batch_size 4 -> 6" in line for line in lines)
    records = read_metrics(str(run / "metrics.jsonl"))
    rows = [r["batches"][0][:2] for r in records if r["type"] == "step"]
    assert rows[:3] == [[0, 0], [0, 4], [0, 8]]
    assert [row for _, row in rows[3:]] == list(range(12, 12 + 6 * (len(rows) - 3), 6))
    # Exactly once: the epoch's real targets, counted over both batch sizes.
    from mixle.corpus import open_corpus

    corpus = open_corpus(str(text_corpus))
    end = [r for r in records if r["type"] == "end"][-1]
    assert end["summary"]["total_tokens"] == sum(int(n) for n in corpus.lengths) - 1


def test_windows_objective_resumes_with_another_batch_size_at_the_same_window(
    text_corpus: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    config = {"objective": "windows", "checkpoint_dir": str(run)}
    train(tiny_config(text_corpus, steps=3, batch_size=4, **config), log=_quiet)
    lines: list[str] = []
    train(tiny_config(text_corpus, steps=6, batch_size=7, resume=True, **config), log=lines.append)
    assert any("(epoch 0, window 12); batch_size 4 -> 7" in line for line in lines)
    records = read_metrics(str(run / "metrics.jsonl"))
    positions = [r["batches"][0][1] for r in records if r["type"] == "step"]
    assert positions == [0, 4, 8, 12, 19, 26]  # global windows: none repeated or skipped
