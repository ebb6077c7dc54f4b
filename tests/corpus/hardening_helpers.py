"""Helpers of the hostile-input tests (issue #18): deadlines, re-sealed manifests, CLI runs."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from mixle.corpus.format.manifest import _manifest_sha256, compute_fingerprint

ROOT = Path(__file__).resolve().parents[2]


class Hang(BaseException):
    """The operation under test did not finish within its deadline (a BaseException,
    so that no ``except Exception`` in the code under test can swallow it)."""


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail with :class:`Hang` if the block runs longer than ``seconds`` (SIGALRM)."""

    def alarm(signum: int, frame: Any) -> None:
        raise Hang(f"did not finish within {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def reseal(corpus: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Apply ``edit`` to the manifest and re-seal it (fingerprint and self-checksum),
    as an attacker who rewrites a whole corpus would."""
    path = corpus / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    # The edit may break an entry on purpose, so the entries are not validated here:
    # the fingerprint only reads the two digests of each.
    digests = [SimpleNamespace(**entry) for entry in manifest["shards"]]
    manifest["fingerprint"] = compute_fingerprint(manifest["dtype"], digests)  # type: ignore[arg-type]
    manifest["manifest_sha256"] = _manifest_sha256(manifest)
    path.write_text(json.dumps(manifest))


def run_mixle(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``python -m mixle.cli ARGS`` on this checkout; fail the test on a hang."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        return subprocess.run(
            [sys.executable, "-m", "mixle.cli", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=ROOT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise Hang(f"mixle {' '.join(args)} did not finish within {timeout} s") from exc
