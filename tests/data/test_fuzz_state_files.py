"""Mutation fuzzing of mixture files, epoch-plan files and loader states (issue #32).

Short form (default suite): 200 mutated inputs per kind, in-process. Long form
(``-m slow``): 10,000 per kind, each kind in its own subprocess. Both require zero raw
exceptions, zero hangs and zero silent changes (see ``tests/data/fuzz_state_files.py``).
"""

from __future__ import annotations

import pytest

from tests.corpus.fuzz_harness import run_in_subprocess
from tests.data.fuzz_state_files import KINDS, run

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
    counts = run_in_subprocess("tests.data.fuzz_state_files", kind, LONG_INPUTS, 32)
    assert counts["inputs"] == LONG_INPUTS
    assert (counts["raw"], counts["hangs"], counts["wrong"]) == (0, 0, 0), counts["examples"]
