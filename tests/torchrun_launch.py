"""Launch a script under ``torchrun --standalone`` (gloo on CPU) for the multi-process tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["ROOT", "launch_torchrun", "torchrun_command"]


def torchrun_command(nproc: int, *args: str) -> list[str]:
    """``python -m torch.distributed.run --standalone --nproc_per_node N args...``."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(nproc),
        "--monitor-interval",
        "0.1",
        *args,
    ]


def launch_torchrun(script: Path, *args: str, nproc: int = 2, timeout: float = 180.0) -> str:
    """Run ``script args`` on ``nproc`` local processes; return its stdout.

    The processes import this checkout's ``mixle`` (``PYTHONPATH``), use one thread
    each, and get a fresh rendezvous (any ``RANK``/``WORLD_SIZE`` of the caller is
    dropped). Raises ``AssertionError`` with the tail of stderr when the job fails.
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    completed = subprocess.run(
        torchrun_command(nproc, str(script), *args),
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed.stdout
