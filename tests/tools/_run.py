"""Run a script of ``tools/`` the way a user does: a fresh interpreter, this checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_tool(script: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run ``python -m tools.<script>`` from the checkout root with ``args``; fail the
    test with its output if it fails or runs past ``timeout`` seconds."""
    module = "tools." + script.removesuffix(".py")
    result = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result
