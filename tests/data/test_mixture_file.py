"""Mixture files: TOML and JSON, every bad key or value named with the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mixle.data._mixture_file import read_mixture_file
from mixle.errors import ArgumentError, ArgumentTypeError, CorpusNotFoundError

_GOOD = """
[[source]]
name = "code"
path = "code"
weight = 3
max_epochs = 4

[[source]]
name = "web"
path = "s3://bucket/web"
weight = 1

[[phase]]
start_row = 100
weights = { code = 1, web = 1 }
"""


def test_toml_and_json_give_the_same_spec(tmp_path: Path) -> None:
    toml = tmp_path / "mix.toml"
    toml.write_text(_GOOD)
    spec = read_mixture_file(str(toml))
    assert [s.name for s in spec.sources] == ["code", "web"]
    assert spec.sources[0].location == str(tmp_path / "code")  # relative to the file
    assert spec.sources[1].location == "s3://bucket/web"
    assert spec.sources[0].max_epochs == 4 and spec.sources[1].max_epochs is None
    assert spec.phases[0].start_row == 100 and dict(spec.phases[0].weights) == {"code": 1, "web": 1}
    as_json = tmp_path / "mix.json"
    as_json.write_text(
        json.dumps(
            {
                "source": [
                    {"name": "code", "path": "code", "weight": 3, "max_epochs": 4},
                    {"name": "web", "path": "s3://bucket/web", "weight": 1},
                ],
                "phase": [{"start_row": 100, "weights": {"code": 1, "web": 1}}],
            }
        )
    )
    assert read_mixture_file(str(as_json)).sources == spec.sources


@pytest.mark.parametrize(
    ("text", "error", "match"),
    [
        (
            '[[source]]\nname = "a"\npath = "a"\nwieght = 1\n',
            ArgumentError,
            "source 1 has unknown key.*'wieght'",
        ),
        (
            'seed = 3\n[[source]]\nname = "a"\npath = "a"\nweight = 1\n',
            ArgumentError,
            "unknown key.*'seed'",
        ),
        (
            '[[source]]\nname = "a"\npath = "a"\nweight = 1\n[[phase]]\nstart = 3\n',
            ArgumentError,
            "phase 1 has unknown key.*'start'",
        ),
        ('[[source]]\nname = "a"\npath = "a"\n', ArgumentError, "source 'a' needs a `weight`"),
        (
            '[[source]]\nname = "a"\npath = "a"\nweight = "high"\n',
            ArgumentTypeError,
            "weight of .*source 'a' must be a number",
        ),
        (
            '[[source]]\nname = "a"\npath = "a"\nweight = -2\n',
            ArgumentError,
            "source 'a' must be a finite number >= 0",
        ),
        (
            '[[source]]\nname = "a"\npath = "a"\nweight = nan\n',
            ArgumentError,
            "source 'a' must be a finite",
        ),
        ('[[source]]\npath = "a"\nweight = 1\n', ArgumentError, "source 1 needs a `name`"),
        ('[[source]]\nname = "a"\nweight = 1\n', ArgumentTypeError, "source 'a' needs `path`"),
        ("", ArgumentError, "at least one"),
        ("[[source]\n", ArgumentError, "not a valid mixture file"),
    ],
)
def test_bad_files_name_the_key_or_source(
    tmp_path: Path, text: str, error: type[Exception], match: str
) -> None:
    path = tmp_path / "mix.toml"
    path.write_text(text)
    with pytest.raises(error, match=match):
        read_mixture_file(str(path))


def test_missing_file_is_a_file_not_found_error(tmp_path: Path) -> None:
    with pytest.raises(CorpusNotFoundError, match="does not exist") as caught:
        read_mixture_file(str(tmp_path / "absent.toml"))
    assert isinstance(caught.value, FileNotFoundError)


_SOURCES = '[[source]]\nname = "a"\npath = "a"\nweight = 1\n'


def test_a_block_schedule_reads_as_text_or_as_phase_tables(tmp_path: Path) -> None:
    text = tmp_path / "text.toml"
    text.write_text('block_schedule = "2048:0.9,8192"\n\n' + _SOURCES)
    tables = tmp_path / "tables.toml"
    tables.write_text(
        _SOURCES + "\n[[block_schedule]]\nblock = 2048\nuntil = 0.9\n\n"
        "[[block_schedule]]\nblock = 8192\nbatch_size = 4\n"
    )
    as_json = tmp_path / "mix.json"
    as_json.write_text(
        json.dumps(
            {
                "source": [{"name": "a", "path": "a", "weight": 1}],
                "block_schedule": [{"block": 2048, "until": 0.9}, {"block": 8192}],
            }
        )
    )
    for path in (text, tables, as_json):
        schedule = read_mixture_file(str(path)).block_schedule
        assert schedule is not None
        assert [(p.until, p.block) for p in schedule.phases] == [(0.9, 2048), (None, 8192)]
    assert read_mixture_file(str(tables)).block_schedule.phases[1].batch_size == 4  # type: ignore[union-attr]
    none = tmp_path / "none.toml"
    none.write_text(_SOURCES)
    assert read_mixture_file(str(none)).block_schedule is None


@pytest.mark.parametrize(
    ("schedule", "error", "match"),
    [
        ('block_schedule = "2048:0.9,0"\n', ArgumentError, "phase 1 `block` must be a positive"),
        ('block_schedule = "2048:zz,8192"\n', ArgumentError, "phase 0 '2048:zz' must read"),
        ('block_schedule = "2048,8192"\n', ArgumentError, "phase 0 `until` is missing"),
        ('block_schedule = "2048:0.9,4096:0.5,8192"\n', ArgumentError, "phase 1 `until` 0.5"),
        ('block_schedule = "2048:1.5,8192"\n', ArgumentError, "strictly between 0 and 1"),
        ("block_schedule = 3\n", ArgumentTypeError, "must be a string .* Got int"),
        ('block_schedule = ""\n', ArgumentError, "must be a non-empty string"),
        ("block_schedule = []\n", ArgumentError, "at least one phase"),
        (
            "[[block_schedule]]\nblock = 0\n",
            ArgumentError,
            "phase 0 `block` must be a positive integer. Got 0",
        ),
        ("[[block_schedule]]\nuntil = 5\n", ArgumentError, "phase 0 needs a `block`"),
        ("[[block_schedule]]\nblok = 5\n", ArgumentError, "phase 0 has unknown key.*'blok'"),
        (
            "[[block_schedule]]\nblock = 64\nuntil = true\n[[block_schedule]]\nblock = 8\n",
            ArgumentTypeError,
            "phase 0 `until` must be a token count",
        ),
    ],
)
def test_bad_block_schedules_name_the_file_phase_and_field(
    tmp_path: Path, schedule: str, error: type[Exception], match: str
) -> None:
    path = tmp_path / "mix.toml"
    head, tables = (schedule, "") if schedule.startswith("block_schedule") else ("", schedule)
    path.write_text(head + _SOURCES + "\n" + tables)
    with pytest.raises(error, match=match) as caught:
        read_mixture_file(str(path))
    assert str(caught.value).startswith(f"{path}: ")
