"""Mutation fuzzing of mixture files, epoch-plan files and loader states (issue #32).

Short form (default suite): 200 mutated inputs per kind, in-process. Long form
(``-m slow``): 10,000 per kind, each kind in its own subprocess. Both require zero raw
exceptions, zero hangs and zero silent changes (see ``tests/data/fuzz_state_files.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.data.fuzz_state_files import KINDS, run

ROOT = Path(__file__).resolve().parents[2]
SHORT_INPUTS = 200
LONG_INPUTS = 10_000

pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
    pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning"),
]


@pytest.mark.parametrize("kind", KINDS)
def test_mutated_state_files_are_refused_or_give_the_intact_result(kind: str) -> None:
    counts = run(kind, SHORT_INPUTS, 32)
    assert counts["inputs"] == SHORT_INPUTS
    assert (counts["raw"], counts["hangs"], counts["wrong"]) == (0, 0, 0), counts["examples"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_ten_thousand_mutations_per_state_file_kind(kind: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-m", "tests.data.fuzz_state_files", kind, str(LONG_INPUTS), "32"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    counts = json.loads(result.stdout.strip().splitlines()[-1])
    print(json.dumps(counts))  # the record quoted in the closing note
    log = os.environ.get("MIXLE_FUZZ_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(counts) + "\n")
    assert counts["inputs"] == LONG_INPUTS
    assert (counts["raw"], counts["hangs"], counts["wrong"]) == (0, 0, 0), counts["examples"]
