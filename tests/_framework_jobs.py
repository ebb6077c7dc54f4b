"""Training jobs of real frameworks (Lightning, OLMo-core) over mixle, for the tests.

A job script (``tests/<framework>/<framework>_job.py OUT [options]``) trains a tiny
model on the committed sample corpus on one process or under ``torchrun``, appends
every batch it trains on to ``OUT/rank-<r>.jsonl`` and may SIGKILL itself at a step.
This module holds both halves they share: the job's command line and corpus
(:func:`job_arguments`, :func:`sample_corpus`, :func:`kill_job`, :func:`log_batch`),
and the test's launch and log reading (:func:`run_job`, :func:`logged_batches`,
:func:`batches_after_resume`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from mixle.corpus import open_corpus
from mixle.data import StreamingCorpus
from tests._torchrun import ROOT, launch_env, torchrun_command

SAMPLE = ROOT / "shards" / "sample"
VOCAB = 256  # the sample corpus is byte-level
BLOCK = 16


def job_arguments(description: str) -> argparse.ArgumentParser:
    """The options every job takes; a job adds its own resume option."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("out", type=Path)
    parser.add_argument("--layout", default="global", choices=("global", "per-rank"))
    parser.add_argument("--global-batch", type=int, default=4)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--every", type=int, default=2)
    parser.add_argument("--kill-at", type=int, default=None)
    return parser


def sample_corpus(
    rank: int = 0, world_size: int = 1, *, global_batch: int = 4, seed: int = 11,
    layout: str = "global",
) -> StreamingCorpus:  # fmt: skip
    """Rank ``rank``'s view of the sample corpus, memory-mapped (``block`` 16)."""
    return StreamingCorpus(
        open_corpus(SAMPLE), rank=rank, world_size=world_size, block=BLOCK,
        batch_size=global_batch // world_size, seed=seed, layout=layout,
    )  # fmt: skip


def kill_job() -> None:
    """SIGKILL this process's group: the whole job on one process; under torchrun this
    rank's group, after which the launcher stops the other ranks."""
    os.killpg(os.getpgid(0), signal.SIGKILL)


def log_batch(log: Path, step: int, rows: list[list[int]]) -> None:
    """Append one trained-on batch to the job's log."""
    with open(log, "a") as sink:
        sink.write(json.dumps({"step": step, "rows": rows}) + "\n")


def run_job(script: Path, out: Path, *args: object, nproc: int = 1) -> int:
    """Run ``script OUT args...`` on ``nproc`` processes (torchrun when more than one) in
    a session of its own; return its exit status (``-9`` when it SIGKILLed itself)."""
    out.mkdir(parents=True, exist_ok=True)
    target = (str(script), str(out), *map(str, args))
    command = [sys.executable, *target] if nproc == 1 else torchrun_command(nproc, *target)
    with open(out / "job.log", "ab") as log:
        completed = subprocess.run(
            command, env=launch_env(), stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, timeout=240, check=False,
        )  # fmt: skip
    return completed.returncode


def logged_batches(out: Path, rank: int = 0) -> list[dict]:
    """The log entries ``{"step", "rows"}`` in the order written (a killed run's, then
    its resumed run's)."""
    lines = (out / f"rank-{rank}.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def rows(out: Path, rank: int = 0) -> list[list[list[int]]]:
    """Each logged batch's rows, in order."""
    return [entry["rows"] for entry in logged_batches(out, rank)]


def batches_after_resume(out: Path, rank: int, first_step: int) -> list[list[list[int]]]:
    """The rows of the batches the resumed run trained on: from the last entry of step
    ``first_step`` (its first step) on."""
    entries = logged_batches(out, rank)
    restart = max(i for i, entry in enumerate(entries) if entry["step"] == first_step)
    return [entry["rows"] for entry in entries[restart:]]
