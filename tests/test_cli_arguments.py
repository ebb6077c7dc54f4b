"""CLI argument handling (issue #32 classes 8, 10, 11): ``--storage-option`` merges
without loss in any order, nothing escapes ``main``'s handler, URLs are redacted."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.cli import _corpus_args, main
from mixle.cli._corpus_args import merge_storage_options, parse_storage_option
from mixle.errors import ArgumentError, CorpusError, CorpusNotFoundError, redact_userinfo

ENDPOINT = "client_kwargs.endpoint_url=http://127.0.0.1:9000"
REGION = 'client_kwargs={"region_name": "us-east-1"}'


def _merged(*texts: str) -> dict[str, Any] | None:
    return merge_storage_options([parse_storage_option(text) for text in texts])


# -- class 8: a later option never drops an earlier one --------------------------------------


@pytest.mark.parametrize("order", [(ENDPOINT, REGION), (REGION, ENDPOINT)])
def test_nested_options_merge_deeply_in_either_order(order: tuple[str, str]) -> None:
    assert _merged(*order) == {
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "us-east-1"}
    }


@pytest.mark.parametrize(
    "pair",
    [
        ("client_kwargs=1", ENDPOINT),
        ("anon=true", "anon=false"),
        ("anon=true", "anon=1"),
        ('a={"b": {"c": 1}}', "a.b.c=2"),
        ('a={"b": {}}', "a.b=3"),
    ],
)
def test_a_value_that_would_replace_another_is_refused_in_both_orders(
    pair: tuple[str, str],
) -> None:
    for first, second in (pair, pair[::-1]):
        with pytest.raises(ArgumentError, match=r"already has .* would replace it"):
            _merged(first, second)


def test_the_same_value_twice_is_kept_once() -> None:
    assert _merged("anon=true", "anon=true", REGION, REGION) == {
        "anon": True,
        "client_kwargs": {"region_name": "us-east-1"},
    }


def test_a_json_object_with_a_repeated_key_is_refused() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="'a' twice"):
        parse_storage_option('x={"a": 1, "a": 2}')


_KEYS = st.sampled_from(["a", "b", "c"])
_LEAVES = st.one_of(st.booleans(), st.integers(-3, 3), st.sampled_from(["s", "t"]))
_VALUES = st.recursive(
    _LEAVES, lambda inner: st.dictionaries(_KEYS, inner, max_size=3), max_leaves=6
)
_OPTION_TEXT = st.tuples(st.lists(_KEYS, min_size=1, max_size=3), _VALUES).map(
    lambda pair: f"{'.'.join(pair[0])}={json.dumps(pair[1])}"
)


def _leaves(parts: list[str], value: Any) -> list[tuple[tuple[str, ...], str]]:
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in _leaves([*parts, key], item)]
    return [(tuple(parts), json.dumps(value))]


def _lookup(options: dict[str, Any], path: tuple[str, ...]) -> Any:
    for part in path:
        options = options[part]
    return options


def _check_lossless_and_order_independent(texts: list[str]) -> None:
    outcomes = []
    for order in itertools.permutations(texts):
        try:
            outcomes.append(_merged(*order))
        except ArgumentError:
            outcomes.append(None)
    assert all(outcome == outcomes[0] for outcome in outcomes)  # same result or refused
    merged = outcomes[0]
    if merged is not None:
        for parts, value in (parse_storage_option(text) for text in texts):
            for path, leaf in _leaves(parts, value):
                assert json.dumps(_lookup(merged, path)) == leaf  # nothing given is lost


def _check_any_text(text: str) -> None:
    """Parsing and merging any text: a usage error, an ArgumentError or a value; never
    another exception (the CLI would print a traceback)."""
    try:
        parsed = parse_storage_option(text)
    except argparse.ArgumentTypeError:
        return
    assert parsed[0] and all(parsed[0])
    with contextlib.suppress(ArgumentError):
        _check_lossless_and_order_independent([text, text])


_ANY_TEXT = st.one_of(
    st.text(max_size=60),
    st.builds(
        lambda key, value: f"{key}={value}",
        st.text(st.sampled_from("ab._= "), max_size=12),
        st.text(st.sampled_from('{}[]":,1a.tn '), max_size=40),
    ),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_OPTION_TEXT, min_size=1, max_size=4))
def test_merging_is_lossless_and_independent_of_order(texts: list[str]) -> None:
    _check_lossless_and_order_independent(texts)


@pytest.mark.slow
@settings(max_examples=10_000, deadline=None)
@given(st.lists(_OPTION_TEXT, min_size=1, max_size=4))
def test_merging_is_lossless_and_independent_of_order_long(texts: list[str]) -> None:
    _check_lossless_and_order_independent(texts)


@settings(max_examples=300, deadline=None)
@given(_ANY_TEXT)
def test_any_storage_option_text_parses_or_is_a_usage_error(text: str) -> None:
    _check_any_text(text)


@pytest.mark.slow
@settings(max_examples=10_000, deadline=None)
@given(_ANY_TEXT)
def test_any_storage_option_text_parses_or_is_a_usage_error_long(text: str) -> None:
    _check_any_text(text)


# -- class 10: nothing escapes main's handler ------------------------------------------------


@pytest.mark.parametrize(
    "option",
    [
        "x=" + "[" * 50_000 + "]" * 50_000,
        "x=" + "[" * 50_000,
        ".".join(["a"] * 50_000) + "=1",
        "a.b=" + '{"c":' * 63 + "1" + "}" * 63,
    ],
    ids=["deep-json", "deep-broken-json", "deep-key", "key-plus-value"],
)
def test_deep_options_are_one_line_naming_the_key(
    option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["merge", str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "c"),
              "--storage-option", option])  # fmt: skip
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "levels deep; at most 64" in err and "Traceback" not in err
    assert err.splitlines()[-1].startswith("mixle merge: error: argument --storage-option: ")
    assert len(err.splitlines()[-1]) < 400


def test_an_argparse_type_that_raises_anything_is_one_line_exit_2(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def explode(data: bytes) -> int:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(_corpus_args, "json_depth", explode)
    code = main(["merge", str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "c"),
                 "--storage-option", "x=1"])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert err == "mixle merge: error: RecursionError: maximum recursion depth exceeded\n"


# -- class 11: URL userinfo is never printed -------------------------------------------------


def test_userinfo_is_redacted_from_every_url_in_a_text() -> None:
    text = "s3://key:secret@minio/b and https://token@host:9/x?q=a@b, s3://bucket/k@v2 /local@x"
    assert redact_userinfo(text) == (
        "s3://***@minio/b and https://***@host:9/x?q=a@b, s3://bucket/k@v2 /local@x"
    )
    assert redact_userinfo(redact_userinfo(text)) == redact_userinfo(text)


def test_errors_of_the_family_never_hold_a_password() -> None:
    error = CorpusNotFoundError("no corpus at https://user:hunter2@host/corpus")
    assert "hunter2" not in str(error) and "hunter2" not in repr(error)
    assert isinstance(error, FileNotFoundError) and "https://***@host/corpus" in str(error)


def test_a_password_in_a_url_is_not_printed_by_a_failing_command(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = "http://user:hunter2@127.0.0.1:9/corpus"
    assert main(["inspect", url]) == 2
    assert main(["merge", url, str(tmp_path / "b"), str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert "hunter2" not in captured.err + captured.out and "***@127.0.0.1" in captured.err


def test_report_redacts_errors_outside_the_family(capsys: pytest.CaptureFixture[str]) -> None:
    from mixle.cli._errors import report

    assert report("ingest", OSError("cannot reach https://a:hunter2@h/x")) == 2
    assert "hunter2" not in capsys.readouterr().err
    assert not issubclass(OSError, CorpusError)
