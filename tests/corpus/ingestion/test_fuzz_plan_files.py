"""Mutation fuzzing of ingest plan files and unit records (issue #32).

Short form (CI): a few hundred mutated inputs per kind, in-process, in seconds.
Long form (``-m slow``): 10,000 per kind, each kind in its own subprocess. Both
require zero raw exceptions, zero hangs and zero silent changes: a mutated plan or
record is refused with a mixle error, or gives exactly the intact corpus.
"""

from __future__ import annotations

import pytest

from tests.corpus.fuzz_harness import run_in_subprocess
from tests.corpus.ingestion.plan_fuzz import KINDS, run

SHORT_INPUTS = 150
LONG_INPUTS = 10_000


def _assert_clean(counts: dict[str, object], inputs: int) -> None:
    assert counts["inputs"] == inputs
    assert (counts["raw"], counts["hangs"], counts["wrong"]) == (0, 0, 0), counts["examples"]
    assert counts["refused"] > 0  # the mutations do reach the checks


@pytest.mark.parametrize("kind", KINDS)
def test_mutated_plans_and_records_are_refused_or_give_the_intact_corpus(kind: str) -> None:
    _assert_clean(run(kind, SHORT_INPUTS, seed=32), SHORT_INPUTS)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_ten_thousand_mutations_per_kind(kind: str) -> None:
    counts = run_in_subprocess("tests.corpus.ingestion.plan_fuzz", kind, LONG_INPUTS, 3232)
    _assert_clean(counts, LONG_INPUTS)
