"""Mixing rules: ``TemperatureSchedule`` (weights x size ** alpha) and the rule contract."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.data import (
    ExactSchedule,
    MixingRule,
    Mixture,
    MixturePhase,
    MixtureSource,
    RowSchedule,
    TemperatureSchedule,
)
from mixle.data._mixture_file import read_mixture_file
from mixle.data._schedule import RESOLUTION, MixtureSchedule, round_weights
from mixle.errors import ArgumentError, ArgumentTypeError, StateMismatchError
from mixle.train import open_mixture
from tests.data.mixture_case import BLOCK, SOURCES
from tests.data.resume_helpers import (
    assert_items_equal,
    assert_resumes_at_every_step,
    assert_resumes_on_two_ranks,
)


def _mixture(*, weights: Sequence[float] = (1.0, 1.0, 1.0), **kwargs: Any) -> Mixture:
    """The shared three sources (web 40, code 9, math 4 documents), equal weights."""
    options: dict[str, Any] = {"block": BLOCK, "batch_size": 3, "boundary_id": 999, "seed": 5}
    options.update(kwargs)
    sources = [
        MixtureSource(docs, weight, name)
        for (name, docs), weight in zip(SOURCES, weights, strict=True)
    ]
    return Mixture(sources, **options)


def _prefix_counts(schedule: RowSchedule, rows: int, sources: int) -> np.ndarray:
    """``counts[t, i]``: rows of source ``i`` among global rows ``[0, t]``, by lookup."""
    owner, _ = schedule.lookup(np.arange(rows, dtype=np.int64))
    onehot = np.zeros((rows, sources), dtype=np.int64)
    onehot[np.arange(rows), owner] = 1
    return onehot.cumsum(axis=0)


sizes_and_weights = st.integers(1, 6).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(1, 10**12), min_size=n, max_size=n),
        st.lists(
            st.one_of(st.just(0.0), st.floats(min_value=1e-3, max_value=1e3)),
            min_size=n,
            max_size=n,
        ).filter(any),
    )
)
alphas = st.floats(min_value=0.05, max_value=3.0)


@given(sizes_and_weights, alphas)
def test_derived_weights_are_weight_times_size_to_the_alpha(
    case: tuple[list[int], list[float]], alpha: float
) -> None:
    sizes, weights = case
    derived = TemperatureSchedule(alpha=alpha).weights(weights, sizes)
    raw = [w * n**alpha for w, n in zip(weights, sizes, strict=True)]
    total = math.fsum(raw)
    assert math.isclose(math.fsum(derived), 1.0, rel_tol=1e-12)
    for got, expected, weight in zip(derived, raw, weights, strict=True):
        assert (got > 0) == (weight > 0)  # a zero weight stays out, a positive one stays in
        assert math.isclose(got, expected / total, rel_tol=1e-9, abs_tol=1e-300)


@settings(max_examples=25, deadline=None)
@given(sizes_and_weights, alphas)
def test_every_prefix_is_within_one_row_of_the_derived_weights(
    case: tuple[list[int], list[float]], alpha: float
) -> None:
    sizes, weights = case
    rule = TemperatureSchedule(alpha=alpha)
    schedule = rule.build([0], [weights], sizes)
    phase = schedule.phases[0]
    derived = rule.weights(weights, sizes)
    # The derived weights, rounded as the exact rule rounds any weights.
    assert phase.counts == round_weights(derived)
    assert [share for share, _ in phase.rounding] == pytest.approx(derived, rel=1e-12)
    used = np.array(phase.counts, dtype=np.float64) / phase.period
    assert np.abs(used - np.array(derived)).max() <= len(sizes) / RESOLUTION
    rows = min(2 * phase.period + 17, 140_000)
    counts = _prefix_counts(schedule, rows, len(sizes))
    prefix = np.arange(1, rows + 1, dtype=np.float64)[:, None]
    assert float(np.abs(counts - prefix * used).max()) < 1.0
    for t in (0, 1, phase.period - 1, phase.period, rows):
        expected = counts[t - 1] if t else np.zeros(len(sizes), dtype=np.int64)
        assert schedule.counts_before(t).tolist() == expected.tolist()


def test_phases_are_derived_alike_and_each_source_continues_across_the_boundary() -> None:
    rule = TemperatureSchedule(alpha=0.5)
    sizes = [4000, 90, 7]
    schedule = rule.build([0, 50], [[1.0, 1.0, 1.0], [0.0, 1.0, 3.0]], sizes)
    assert schedule.phases[1].counts[0] == 0
    owned = [0, 0, 0]
    for row in range(300):
        source, own = schedule.source_of(row)
        assert own == owned[source]  # every source's rows in order, none skipped
        owned[source] += 1
        assert schedule.counts_before(row + 1).tolist() == owned


def test_alpha_one_reads_every_source_at_the_same_pace() -> None:
    mixture = _mixture(schedule=TemperatureSchedule(alpha=1.0))
    epochs = [entry.epochs for entry in mixture.budget(rows=20_000)]
    # Shares are of targets; an epoch's last row is partly padding, so a source's rows
    # per epoch exceed its targets / block by less than one row.
    shortest = min(rows.rows_per_epoch for rows in mixture.rows)
    assert max(epochs) / min(epochs) < 1 + 1.5 / shortest, epochs
    exact = [entry.epochs for entry in _mixture().budget(rows=20_000)]
    assert max(exact) / min(exact) > 5  # equal weights read the small sources far faster


def test_small_alpha_flattens_the_mix_towards_uniform() -> None:
    shares = {
        alpha: [e["weight"] for e in _mixture(schedule=TemperatureSchedule(alpha=alpha)).rounding()]
        for alpha in (1.0, 0.5, 0.1)
    }
    assert shares[1.0][0] > shares[0.5][0] > shares[0.1][0] > 1 / 3
    assert shares[1.0][2] < shares[0.5][2] < shares[0.1][2] < 1 / 3


def test_batches_are_deterministic_across_instances() -> None:
    rule = TemperatureSchedule(alpha=0.3)
    first = _mixture(schedule=rule, document_ids=True).rows_at(0, 200)
    again = _mixture(schedule=TemperatureSchedule(alpha=0.3), document_ids=True).rows_at(0, 200)
    assert_items_equal(again, first)
    assert _mixture(schedule=rule).state_dict() == _mixture(schedule=rule).state_dict()


@pytest.mark.parametrize("objective", ["packed", "windows"])
def test_resumes_at_every_step_and_with_another_world_size(objective: str) -> None:
    rule = TemperatureSchedule(alpha=0.4)
    assert_resumes_at_every_step(lambda: _mixture(schedule=rule, objective=objective), steps=20)
    assert_resumes_on_two_ranks(
        lambda **kw: _mixture(schedule=rule, objective=objective, **kw), skip=5
    )


def test_a_phase_appended_after_the_saved_row_still_resumes() -> None:
    rule = TemperatureSchedule(alpha=0.4)
    first = _mixture(schedule=rule)
    first.seek(30)
    resumed = _mixture(schedule=rule, phases=[MixturePhase(30, {"web": 1.0, "math": 2.0})])
    resumed.load_state_dict(first.state_dict())
    assert resumed.cursor == (0, 30)


def test_a_state_saved_under_another_rule_is_refused_by_name() -> None:
    exact = _mixture().state_dict()
    warm = _mixture(schedule=TemperatureSchedule(alpha=0.5)).state_dict()
    assert warm["stream"]["schedule"] == {"name": "temperature", "alpha": 0.5}
    with pytest.raises(StateMismatchError, match="schedule in checkpoint: '<absent>'"):
        _mixture(schedule=TemperatureSchedule(alpha=0.5)).load_state_dict(exact)
    with pytest.raises(StateMismatchError, match=r"schedule in checkpoint: .*'temperature'"):
        _mixture().load_state_dict(warm)
    with pytest.raises(
        StateMismatchError, match=r"schedule in checkpoint: .*0\.5.* in stream: .*0\.7"
    ):
        _mixture(schedule=TemperatureSchedule(alpha=0.7)).load_state_dict(warm)


def test_the_default_rule_leaves_states_and_batches_as_they_were() -> None:
    plain, explicit = _mixture(), _mixture(schedule=ExactSchedule())
    assert "schedule" not in plain.state_dict()["stream"]
    assert explicit.state_dict() == plain.state_dict()
    assert_items_equal(explicit.rows_at(0, 120), plain.rows_at(0, 120))
    weights = [s.weight for s in plain.sources]
    reference = MixtureSchedule([0], [weights])
    assert plain.schedule.phases[0].counts == reference.phases[0].counts


@pytest.mark.parametrize("alpha", [0, 0.0, -1, -1e-9, math.nan, math.inf, -math.inf])
def test_a_bad_alpha_raises_a_value_error_naming_it(alpha: float) -> None:
    with pytest.raises(
        ArgumentError, match="`alpha` of TemperatureSchedule must be a finite number > 0"
    ):
        TemperatureSchedule(alpha=alpha)
    assert issubclass(ArgumentError, ValueError)


@pytest.mark.parametrize("alpha", [True, "0.5", None, [0.5]])
def test_an_alpha_that_is_not_a_number_raises_a_type_error(alpha: Any) -> None:
    with pytest.raises(ArgumentTypeError, match="`alpha` of TemperatureSchedule must be a real"):
        TemperatureSchedule(alpha=alpha)


def test_a_schedule_that_is_not_a_rule_is_refused() -> None:
    with pytest.raises(ArgumentTypeError, match="`schedule` must be a mixing rule"):
        _mixture(schedule=0.5)


class _EqualRows:
    """A third rule in one class: every source with a positive weight gets equal rows."""

    name = "equal-rows"

    def params(self) -> dict[str, Any]:
        return {}

    def build(
        self, starts: Sequence[int], weights: Sequence[Sequence[float]], sizes: Sequence[int]
    ) -> MixtureSchedule:
        return MixtureSchedule(starts, [[1.0 if w > 0 else 0.0 for w in p] for p in weights])


def test_a_new_rule_is_one_class_and_names_itself_in_the_state() -> None:
    rule = _EqualRows()
    assert isinstance(rule, MixingRule)
    mixture = _mixture(weights=(0.7, 0.2, 0.1), schedule=rule)
    assert mixture.schedule.phases[0].counts == (1, 1, 1)
    assert mixture.state_dict()["stream"]["schedule"] == {"name": "equal-rows"}
    assert_resumes_at_every_step(lambda: _mixture(schedule=_EqualRows()), steps=6)


_FILE = """
[[source]]
name = "a"
path = "{sample}"
weight = 1

[[source]]
name = "b"
path = "{sample}"
weight = 2
{schedule}
"""
SAMPLE = Path(__file__).resolve().parents[2] / "shards" / "sample"


def _mixture_file(tmp_path: Path, schedule: str) -> str:
    path = tmp_path / "mix.toml"
    path.write_text(_FILE.format(sample=SAMPLE, schedule=schedule))
    return str(path)


def test_a_mixture_file_names_its_rule_in_a_schedule_table(tmp_path: Path) -> None:
    path = _mixture_file(tmp_path, '[schedule]\nrule = "temperature"\nalpha = 0.3\n')
    assert read_mixture_file(path).schedule == TemperatureSchedule(alpha=0.3)
    as_json = tmp_path / "mix.json"
    as_json.write_text(
        json.dumps(
            {
                "source": [{"name": "a", "path": str(SAMPLE), "weight": 1}],
                "schedule": {"rule": "temperature", "alpha": 0.3},
            }
        )
    )
    assert read_mixture_file(str(as_json)).schedule == TemperatureSchedule(alpha=0.3)
    assert read_mixture_file(_mixture_file(tmp_path, "")).schedule is None
    exact = _mixture_file(tmp_path, '[schedule]\nrule = "exact"\n')
    assert read_mixture_file(exact).schedule == ExactSchedule()


def test_open_mixture_builds_the_files_rule(tmp_path: Path) -> None:
    path = _mixture_file(tmp_path, '[schedule]\nrule = "temperature"\nalpha = 0.5\n')
    mixture, _ = open_mixture(path, block=BLOCK, batch_size=2)
    assert mixture.schedule_rule == TemperatureSchedule(alpha=0.5)
    assert mixture.state_dict()["stream"]["schedule"] == {"name": "temperature", "alpha": 0.5}
    # Same source twice at weights 1 and 2: the sizes are equal, so the shares stay 1/3, 2/3.
    assert [e["weight"] for e in mixture.rounding()] == pytest.approx([1 / 3, 2 / 3])
    plain, _ = open_mixture(_mixture_file(tmp_path, ""), block=BLOCK, batch_size=2)
    assert "schedule" not in plain.state_dict()["stream"]


@pytest.mark.parametrize(
    ("schedule", "error", "match"),
    [
        (
            '[schedule]\nrule = "zipf"\n',
            ArgumentError,
            r"\[schedule\] needs `rule`, one of 'exact', 'temperature'",
        ),
        ("[schedule]\nalpha = 0.3\n", ArgumentError, r"\[schedule\] needs `rule`"),
        (
            '[schedule]\nrule = "temperature"\nalpha = 0\n',
            ArgumentError,
            r"\[schedule\]: `alpha` .* > 0",
        ),
        (
            '[schedule]\nrule = "temperature"\nalpha = nan\n',
            ArgumentError,
            r"\[schedule\]: `alpha`",
        ),
        (
            '[schedule]\nrule = "temperature"\nalpha = "hot"\n',
            ArgumentTypeError,
            r"\[schedule\]: `alpha` .* real",
        ),
        (
            '[schedule]\nrule = "temperature"\nbeta = 1\n',
            ArgumentError,
            r"parameters of rule 'temperature' do not fit",
        ),
        ('[schedule]\nrule = "exact"\nalpha = 1\n', ArgumentError, r"parameters of rule 'exact'"),
        ("schedule = 3\n", ArgumentTypeError, r"\[schedule\] must be a table"),
    ],
)
def test_a_bad_schedule_table_is_refused_naming_it(
    tmp_path: Path, schedule: str, error: type[Exception], match: str
) -> None:
    path = tmp_path / "mix.toml"
    path.write_text(schedule + _FILE.format(sample=SAMPLE, schedule=""))
    with pytest.raises(error, match=match):
        read_mixture_file(str(path))


class _Broken:
    """A rule whose schedules break the contract in the way ``mode`` names."""

    name = "broken"

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def params(self) -> dict[str, Any]:
        return {"mode": self.mode}

    def build(
        self, starts: Sequence[int], weights: Sequence[Sequence[float]], sizes: Sequence[int]
    ) -> Any:
        if self.mode == "not a schedule":
            return [0, 1, 2]
        if self.mode == "other phases":
            return MixtureSchedule([0, 10], [weights[0], weights[0]])
        if self.mode == "fewer sources":
            return MixtureSchedule(starts, [list(w)[:-1] for w in weights])
        return MixtureSchedule(starts, [[1.0, 1.0, 0.0] for _ in weights])  # drops "math"


@pytest.mark.parametrize(
    ("mode", "error", "match"),
    [
        ("not a schedule", ArgumentTypeError, "built a list, not a row schedule"),
        ("other phases", ArgumentError, r"phases starting at rows \[0, 10\]"),
        ("fewer sources", ArgumentError, "one count per source"),
        ("drops a source", ArgumentError, r"counts \[1, 1, 0\] .* positive where the weight is"),
    ],
)
def test_a_rule_that_breaks_the_contract_is_refused_at_construction(
    mode: str, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        _mixture(schedule=_Broken(mode))


@pytest.mark.parametrize(
    ("objective", "digest"), [("packed", "db39dffb97df0f39"), ("windows", "1c15132f9702c15c")]
)
def test_default_states_are_byte_identical_to_those_before_rules(
    objective: str, digest: str
) -> None:
    # Digests of json.dumps(state_dict()) computed with the code before mixing rules
    # (and before the blocks order: packed sources in the permutation order).
    order = {"order": "permutation"} if objective == "packed" else {}
    mixture = _mixture(
        weights=(0.6, 0.3, 0.1),
        phases=[MixturePhase(30, {"web": 0.2, "math": 0.8})],
        objective=objective,
        **order,
    )
    mixture.seek(45)
    state = json.dumps(mixture.state_dict()).encode()
    assert hashlib.sha256(state).hexdigest()[:16] == digest
