"""Mutation fuzzing of every input format and corpus file kind (issue #18).

Short forms (CI): hypothesis drives a handful of mutations per kind in-process.
Long forms (``-m slow``): 10,000 mutated inputs per kind, each kind in its own
subprocess under a wall-clock limit, every input under a per-input timeout.
Both require zero raw exceptions, zero hangs and zero silently wrong ids.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.corpus.fuzz_harness import CORPUS_KINDS, INPUT_KINDS, Fuzzer, run_in_subprocess

LONG_INPUTS = 10_000


@pytest.fixture(scope="module", params=INPUT_KINDS + CORPUS_KINDS)
def fuzzer(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fuzzer]:
    if request.param == "parquet":
        pytest.importorskip("pyarrow")
    yield Fuzzer(request.param, str(tmp_path_factory.mktemp(request.param.replace(".", "-"))))


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(rng=st.randoms(use_true_random=False))
def test_mutated_input_is_read_exactly_or_reported(fuzzer: Fuzzer, rng: random.Random) -> None:
    outcome, _ = fuzzer.once(rng)
    assert outcome == "clean", f"{fuzzer.kind}: {outcome}"


@pytest.mark.slow
@pytest.mark.parametrize("kind", INPUT_KINDS + CORPUS_KINDS)
def test_ten_thousand_mutations_per_kind(kind: str) -> None:
    if kind == "parquet":
        pytest.importorskip("pyarrow")
    counts = run_in_subprocess("tests.corpus.fuzz_harness", kind, LONG_INPUTS, 18)
    assert counts["inputs"] == LONG_INPUTS
    assert (counts["raw"], counts["hangs"], counts["wrong"]) == (0, 0, 0), counts["examples"]
