"""Real multi-process jobs under ``torchrun`` (gloo, CPU) for the tests.

One place builds the launcher's command line and the job's environment, so every
multi-process test launches the same way:

- :func:`run_torchrun` runs a rank script on ``nproc`` processes and returns one output
  folder per rank, for the common "each rank writes what it saw, the test compares" shape.
  The script finds its folder with :func:`rank_output_dir`::

      # tests/<area>/my_check.py, run under torchrun
      from tests._torchrun import rank_output_dir

      (rank_output_dir() / "result.json").write_text(json.dumps(result))

      # tests/<area>/test_my_check.py
      folders = run_torchrun(ROOT / "tests" / "<area>" / "my_check.py", output=tmp_path)
      results = [json.loads((f / "result.json").read_text()) for f in folders]

- :func:`torchrun_command` and :func:`launch_env` are the two halves for a test that
  drives the job itself (e.g. kills it mid-run, as ``tests/train/_helpers.run_until``
  does).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "OUTPUT_ENV",
    "ROOT",
    "launch_env",
    "rank_output_dir",
    "run_torchrun",
    "torchrun_command",
]

ROOT = Path(__file__).resolve().parents[1]

#: The environment variable that names the folder holding every rank's output folder.
OUTPUT_ENV = "MIXLE_TEST_TORCHRUN_OUTPUT"

# Set by a launcher this test may itself run under; the job must get its own.
_INHERITED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def launch_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a launched job: this checkout's ``mixle`` and ``tests`` first on
    ``PYTHONPATH``, one OpenMP thread per process (2 ranks share the test machine's cores),
    no inherited rank variables, then ``extra`` on top."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    for name in _INHERITED:
        env.pop(name, None)
    env.update(extra or {})
    return env


def torchrun_command(nproc: int, *target: str, monitor_interval: float | None = None) -> list[str]:
    """``python -m torch.distributed.run --standalone --nproc_per_node nproc ... target``.

    Parameters
    ----------
    nproc
        Processes (ranks) on this machine.
    *target
        What each rank runs: a script path and its arguments, or ``"-m", module, ...``.
    monitor_interval
        Seconds between the launcher's checks of its workers (``None``: torchrun's
        default); a short one lets a test that kills ranks see the launcher react soon.
    """
    monitor = () if monitor_interval is None else ("--monitor-interval", str(monitor_interval))
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(nproc),
        *monitor,
        *target,
    ]


def run_torchrun(
    script: Path,
    *args: str,
    output: Path,
    nproc: int = 2,
    env: Mapping[str, str] | None = None,
    timeout: float = 120.0,
) -> list[Path]:
    """Run ``script args...`` on ``nproc`` torchrun ranks; return each rank's output folder.

    Rank ``r`` writes into ``output / f"rank-{r}"`` (created empty beforehand), found in
    the script with :func:`rank_output_dir`.

    Parameters
    ----------
    script
        The rank program (a file; it may import ``mixle`` and ``tests``).
    *args
        Its command-line arguments.
    output
        A folder for the ranks' folders (created if missing).
    nproc
        Number of ranks.
    env
        Extra environment variables for every rank (on top of :func:`launch_env`).
    timeout
        Seconds the whole job may take.

    Returns
    -------
    list of Path
        ``[output/rank-0, ..., output/rank-(nproc-1)]``.

    Raises
    ------
    AssertionError
        The job exits non-zero (the message holds the end of its stderr).
    subprocess.TimeoutExpired
        It runs longer than ``timeout``.
    """
    folders = [output / f"rank-{rank}" for rank in range(nproc)]
    for folder in folders:
        folder.mkdir(parents=True)
    completed = subprocess.run(
        torchrun_command(nproc, str(script), *args),
        env=launch_env({**(env or {}), OUTPUT_ENV: str(output)}),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return folders


def rank_output_dir() -> Path:
    """This rank's output folder under :func:`run_torchrun` (call it in the rank script).

    Raises
    ------
    KeyError
        Not running under :func:`run_torchrun` (no output folder or no ``RANK``).
    """
    return Path(os.environ[OUTPUT_ENV]) / f"rank-{os.environ['RANK']}"
