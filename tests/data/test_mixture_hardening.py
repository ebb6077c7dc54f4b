"""Mixture files, weights, names and states that mixle must refuse by name or honour
(issue #32, classes 5, 10 and 11)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.data import Mixture, MixtureSource
from mixle.data._mixture import MAX_ROW
from mixle.data._mixture_file import MAX_BYTES, read_mixture_file
from mixle.data._schedule import RESOLUTION, round_weights
from mixle.errors import ArgumentError, StateMismatchError
from tests.corpus.hardening_helpers import deadline

_DOCUMENTS = [np.arange(i, i + 9, dtype=np.int64) for i in range(6)]


def _source(name: str, weight: float = 1.0) -> MixtureSource:
    return MixtureSource(_DOCUMENTS, weight, name)


def _toml(*sources: tuple[str, str]) -> str:
    """A mixture file whose sources have these ``(name, weight literal)`` pairs."""
    return "".join(
        f'[[source]]\nname = "{name}"\npath = "c{i}"\nweight = {weight}\n'
        for i, (name, weight) in enumerate(sources)
    )


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


# -- class 11: a positive weight always gets its share ------------------------------
@pytest.mark.parametrize("tiny", [1e-13, 1e-300, 5e-324])
def test_a_tiny_positive_weight_never_rounds_to_zero(tiny: float) -> None:
    counts = round_weights([1.0, tiny])
    assert counts[1] >= 1 and sum(counts) == RESOLUTION
    mixture = Mixture([_source("big"), _source("tiny", tiny)], block=4)
    assert mixture.schedule.phases[0].counts[1] >= 1
    assert 1 in mixture.schedule.rows_between(0, RESOLUTION)[0].tolist()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.just(0.0),
            st.floats(min_value=5e-324, max_value=1e300, allow_nan=False, allow_infinity=False),
        ),
        min_size=1,
        max_size=8,
    ).filter(any)
)
def test_every_positive_weight_gets_a_row_per_period(weights: list[float]) -> None:
    counts = round_weights(weights)
    assert 0 < sum(counts) <= RESOLUTION
    for weight, count in zip(weights, counts, strict=True):
        assert (count >= 1) if weight > 0 else count == 0


# -- class 10: overflowing weights ----------------------------------------------------
def test_weights_whose_sum_overflows_are_refused_by_name() -> None:
    with pytest.raises(ArgumentError, match="sum to more than the largest float"):
        Mixture([_source("a", 1e308), _source("b", 1e308)], block=4)
    with pytest.raises(ArgumentError, match=r"phase 1 \(from row 8\).*largest float"):
        Mixture([_source("a"), _source("b")], block=4, phases=[(8, {"a": 1e308, "b": 1e308})])


def test_a_weight_of_400_digits_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ArgumentError, match=r"weight of source 'a'.*an integer of 1329 bits"):
        _source("a", 10**400)  # type: ignore[arg-type]
    for name, text in (
        ("mix.toml", _toml(("a", "9" * 400))),
        (
            "mix.json",
            json.dumps({"source": [{"name": "a", "path": "c", "weight": 1}]}).replace(
                '"weight": 1', '"weight": ' + "9" * 400
            ),
        ),
    ):
        path = _write(tmp_path, name, text)
        with pytest.raises(ArgumentError, match=str(tmp_path)):
            read_mixture_file(path)


def test_a_mixture_file_whose_weights_overflow_is_refused_naming_it(tmp_path: Path) -> None:
    path = _write(tmp_path, "mix.toml", _toml(("a", "1e308"), ("b", "1e308")))
    with pytest.raises(ArgumentError, match=f"{path}: the sources sum to more"):
        read_mixture_file(path)


@pytest.mark.parametrize("name", ["mix.toml", "mix.json"])
def test_a_mixture_file_nested_100k_deep_is_refused_naming_it(tmp_path: Path, name: str) -> None:
    nested = "[" * 100_000 + "]" * 100_000
    text = f"source = {nested}\n" if name.endswith(".toml") else nested
    path = _write(tmp_path, name, text)
    with pytest.raises(ArgumentError, match="nested") as caught:
        read_mixture_file(path)
    assert path in str(caught.value)


# -- class 5: special files -------------------------------------------------------------
@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "directory"])
def test_a_mixture_file_that_is_not_a_regular_file_is_refused_without_hanging(
    tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "mix.toml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")
    with deadline(10), pytest.raises(ArgumentError, match="expected a regular file") as caught:
        read_mixture_file(str(path))
    assert str(path) in str(caught.value)


def test_a_mixture_file_over_the_size_bound_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "mix.toml"
    with open(path, "wb") as handle:
        handle.truncate(MAX_BYTES + 1)  # sparse: nothing is written
    with deadline(10), pytest.raises(ArgumentError, match=f"larger than the {MAX_BYTES} bytes"):
        read_mixture_file(str(path))


# -- class 11: one name, two spellings ------------------------------------------------
_NFC, _NFD = "caf\u00e9", "cafe\u0301"


def test_names_equal_once_nfc_normalised_are_one_name() -> None:
    assert _NFC != _NFD
    with pytest.raises(ArgumentError, match=r"'cafe\\u0301' is the same name as 'caf\\xe9'"):
        Mixture([_source(_NFC), _source(_NFD)], block=4)


def test_a_mixture_file_with_two_spellings_of_a_name_is_refused_naming_it(tmp_path: Path) -> None:
    path = _write(tmp_path, "mix.toml", _toml((_NFC, "1"), (_NFD, "1")))
    with pytest.raises(ArgumentError, match="NFC") as caught:
        read_mixture_file(path)
    assert path in str(caught.value)


# -- class 10: a mixture state's row ----------------------------------------------------
@pytest.mark.parametrize("row", [2**63, 2**64 + 5, MAX_ROW + 1])
def test_a_mixture_state_row_beyond_int64_arithmetic_is_refused_at_load(row: int) -> None:
    mixture = Mixture([_source("a"), _source("b", 2.0)], block=4, batch_size=2)
    state = {**mixture.state_dict(), "row": row}
    with pytest.raises(StateMismatchError, match=f"field `row` must be at most {MAX_ROW}.*{row}"):
        mixture.load_state_dict(state)
    assert mixture.cursor == (0, 0)  # nothing moved
    with pytest.raises(ArgumentError, match="`row` must"):
        mixture.seek(row)


@pytest.mark.parametrize("objective", ["packed", "windows"])
def test_the_largest_accepted_row_gives_batches(objective: str) -> None:
    mixture = Mixture([_source("a"), _source("b", 2.0)], block=4, batch_size=2, objective=objective)
    mixture.load_state_dict({**mixture.state_dict(), "row": MAX_ROW})
    batches = [b for _, b in zip(range(3), mixture, strict=False)]
    assert len(batches) == 3 and mixture.cursor == (0, MAX_ROW + 6)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (
            _toml(("a", "1")).replace("weight = 1", "weight = 1\nmax_epochs = " + "9" * 400),
            "max_epochs of .*source 'a' must be a positive number.*an integer of",
        ),
        ("phase = 3\n" + _toml(("a", "1")), "`phase` must be a list"),
        (
            _toml(("a", "1")) + "[[phase]]\nstart_row = 4\nweights = { b = 1 }\n",
            "phase 1 names unknown source 'b'",
        ),
        (
            _toml(("a", "1"), ("b", "1"))
            + "[[phase]]\nstart_row = 4\nweights = { a = 1e308, b = 1e308 }\n",
            "phase 1 sum to more than the largest float",
        ),
        (
            _toml(("a", "1")) + "[[phase]]\nstart_row = 4\nweights = { a = [1] }\n",
            "weight of .*source 'a' in phase 1 must be a number",
        ),
    ],
)
def test_a_mixture_file_phase_or_limit_is_checked_at_read_time_naming_the_file(
    tmp_path: Path, text: str, match: str
) -> None:
    path = _write(tmp_path, "mix.toml", text)
    with pytest.raises(ArgumentError, match=match) as caught:
        read_mixture_file(path)
    assert path in str(caught.value)
