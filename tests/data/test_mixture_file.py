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
