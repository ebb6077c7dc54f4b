"""Options declared once (issue #28 item 3): the flags of ``mixle ingest`` and ``mixle
train`` are built from the fields of ``IngestOptions`` and ``TrainConfig``, and nothing
a user sees changed.

``tests/snapshots/cli_options.json`` was recorded with the hand-written parsers (see
``tests/_cli_snapshot.py``): for every command line the options or config handed to
the library, the exit code and the error line, and for every flag its help, choices,
metavar and default must still be the same.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import pytest

from mixle._checks import nonnegative_int, positive_int
from mixle._options import option, section
from mixle.cli import main
from mixle.cli._flags import add_option_flags, option_values
from mixle.corpus import CorpusShape, IngestOptions, IngestOutput, IngestRun, input_formats
from mixle.errors import ArgumentError
from mixle.train import DataConfig, ModelConfig, RuntimeConfig, TrainConfig
from tests import _cli_snapshot

SNAPSHOT = json.loads(_cli_snapshot.SNAPSHOT.read_text())
# What changed in the argparse actions, (before, after), with the same outcome: the
# library default instead of None-then-default, and a switch that now sets
# ``tie_head`` False instead of ``untied_head`` True.
CHANGED_ACTIONS = {
    ("ingest --help", "--shard-size"): {"default": (None, 256 * 1024 * 1024)},
    ("train --help", "--untied-head"): {"default": (False, True), "const": (True, False)},
    # The input-format registry (#28 item 1): the help lists every format's extensions.
    ("ingest --help", "--input-format"): {
        "help": (
            "force the input format instead of detecting it by extension (e.g. "
            "--input-format text for .log files)",
            "force the input format instead of detecting it by extension ("
            + "; ".join(f"{f.name}: {' '.join(f.extensions)}" for f in input_formats())
            + "; e.g. --input-format text for .log files)",
        )
    },
}
# Train options added after the snapshot was recorded (the blocks order, best-fit packing,
# document masking, length buckets, block schedules, VSL buckets), with the defaults that leave
# every recorded run as it was.
ADDED_TRAIN_OPTIONS = {
    "order": None,
    "packing": "concatenate",
    "document_mask": False,
    "length_buckets": None,
    "block_schedule": None,
    "vsl_buckets": None,
    "vsl_curriculum": "natural",
}
ADDED_TRAIN_FLAGS = {
    "--order",
    "--packing",
    "--document-mask",
    "--length-buckets",
    "--block-schedule",
    "--vsl-buckets",
    "--vsl-curriculum",
}
# Ingest flags added after the snapshot was recorded (issue #29: document ids in the origins).
ADDED_INGEST_FLAGS = {"--id-field"}


def _without_added_defaults(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` without the options added since the snapshot, where at their default."""
    return {
        k: v
        for k, v in config.items()
        if k not in ADDED_TRAIN_OPTIONS or v != ADDED_TRAIN_OPTIONS[k]
    }


def _same_outcome(now: dict[str, Any], then: dict[str, Any]) -> None:
    # The usage synopsis lists the flags section by section now; the message is the same.
    assert now["stderr"].splitlines()[-1:] == then["stderr"].splitlines()[-1:]
    assert now["stderr"].startswith("usage:") == then["stderr"].startswith("usage:")
    if "config" in now:
        now = {**now, "config": _without_added_defaults(now["config"])}
    assert {k: v for k, v in now.items() if k != "stderr"} == {
        k: v for k, v in then.items() if k != "stderr"
    }


@pytest.mark.parametrize("line", list(SNAPSHOT["ingest"]))
def test_an_ingest_command_line_gives_the_options_and_errors_it_gave(line: str) -> None:
    _same_outcome(_cli_snapshot.run_line("ingest", line), SNAPSHOT["ingest"][line])


@pytest.mark.parametrize("line", list(SNAPSHOT["train"]))
def test_a_train_command_line_gives_the_config_and_errors_it_gave(line: str) -> None:
    _same_outcome(_cli_snapshot.run_line("train", line), SNAPSHOT["train"][line])


@pytest.mark.parametrize("command", ["ingest", "train"])
def test_help_lists_every_flag_with_its_help_choices_and_default(command: str) -> None:
    key = f"{command} --help"
    now, then = _cli_snapshot.help_flags(command), SNAPSHOT[key]
    added = ADDED_TRAIN_FLAGS if command == "train" else ADDED_INGEST_FLAGS
    assert added <= set(now)
    assert sorted(set(now) - added) == sorted(then)
    for flag, spec in then.items():
        changed = CHANGED_ACTIONS.get((key, flag), {})
        assert {name: spec[name] for name in changed} == {n: b for n, (b, _) in changed.items()}
        assert now[flag] == {**spec, **{n: a for n, (_, a) in changed.items()}}, flag


@pytest.mark.parametrize("command", ["ingest", "train"])
def test_help_text_shows_every_flag_and_exits_0(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    shown = capsys.readouterr().out
    for flags in SNAPSHOT[f"{command} --help"]:
        for flag in flags.split():
            assert f"{flag} " in shown or f"{flag}\n" in shown or f"{flag}," in shown, flag


@pytest.mark.parametrize("line", _cli_snapshot.TRAIN_LINES)
def test_config_json_written_before_the_sections_loads_and_is_rewritten_the_same(
    line: str,
) -> None:
    old = SNAPSHOT["train"][line]["config"]
    config = TrainConfig.from_dict(old)
    rewritten = _without_added_defaults(config.to_dict())
    assert rewritten == old
    assert json.dumps(rewritten, sort_keys=True) == json.dumps(old, sort_keys=True)


def test_flat_keywords_and_sections_build_the_same_ingest_options() -> None:
    flat = IngestOptions(vocab_size=50257, workers=4, layout="raw", task="1/4")
    nested = IngestOptions(
        shape=CorpusShape(vocab_size=50257),
        run=IngestRun(workers=4, task="1/4"),
        output=IngestOutput(layout="raw"),
    )
    assert flat == nested
    assert (flat.workers, flat.task, flat.fixed_dtype, flat.distributed) == (
        4,
        (1, 4),
        "uint16",
        True,
    )
    assert flat.run.workers == 4 and flat.shape.fields == ("input_ids", "tokens")
    assert IngestOptions(**flat.flat()) == flat
    assert flat.replace(workers=2).run == dataclasses.replace(flat.run, workers=2)
    assert IngestOptions("jsonl").input_format == "jsonl"  # the first flat field, as before


def test_the_id_field_flag_reaches_the_options_and_an_empty_name_is_refused() -> None:
    with _cli_snapshot._captured() as seen, pytest.raises(SystemExit):
        main(["ingest", "in.jsonl", "out", "--id-field", "doc_id"])
    assert seen["options"].id_field == "doc_id" and seen["options"].shape.id_field == "doc_id"
    with pytest.raises(ArgumentError, match="id_field"):
        IngestOptions(id_field="")


def test_flat_fields_and_sections_build_the_same_train_config() -> None:
    flat = TrainConfig("c", d_model=64, n_head=2, steps=5)
    nested = TrainConfig(
        data=DataConfig(corpus="c"), model=ModelConfig(d_model=64, n_head=2), steps=5
    )
    assert flat == nested
    assert (flat.corpus, flat.d_model, flat.steps) == ("c", 64, 5)
    assert flat.model.d_model == 64 and flat.runtime.steps == 5
    assert flat.replace(model=ModelConfig(d_model=32)).d_model == 32
    assert list(flat.to_dict())[:2] == ["version", "corpus"]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: IngestOptions(shape=CorpusShape(), vocab_size=5), "`shape` and its option"),
        (lambda: IngestOptions(wokers=2), "unexpected keyword argument 'wokers'"),
        (lambda: TrainConfig("c", corpus="d"), "multiple values for 'corpus'"),
        (lambda: TrainConfig(data={"corpus": "c"}), "`data` must be a DataConfig"),
    ],
)
def test_a_mixed_up_call_is_a_type_error_naming_the_keyword(make: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        make()


def test_a_flat_name_that_is_no_option_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = IngestOptions().nope


# -- a new option is one field ------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _RunWithLimit(IngestRun):
    max_open_files: int = option(
        64, check=positive_int, help="open at most this many input files (e.g. --max-open-files 8)"
    )


@dataclass(frozen=True, init=False)
class _OptionsWithLimit(IngestOptions):
    run: _RunWithLimit = section(_RunWithLimit, "how it runs")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mixle ingest", exit_on_error=False)
    add_option_flags(parser, _OptionsWithLimit)
    return parser


def test_a_field_added_to_a_section_is_a_flag_with_its_help_and_check() -> None:
    parser = _parser()
    assert "open at most this many input files" in parser.format_help()
    options = _OptionsWithLimit(
        **option_values(parser.parse_args(["--max-open-files", "8"]), _OptionsWithLimit)
    )
    assert (options.max_open_files, options.run.max_open_files) == (8, 8)
    assert (
        _OptionsWithLimit(**option_values(parser.parse_args([]), _OptionsWithLimit)).max_open_files
        == 64
    )
    with pytest.raises(argparse.ArgumentError, match="invalid int value"):
        parser.parse_args(["--max-open-files", "many"])
    with pytest.raises(ArgumentError, match=r"`max_open_files` must be a positive integer\. Got 0"):
        _OptionsWithLimit(
            **option_values(parser.parse_args(["--max-open-files", "0"]), _OptionsWithLimit)
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class _RuntimeWithWarmup(RuntimeConfig):
    warmup_steps: int = option(
        0, check=nonnegative_int, help="linear learning-rate warm-up (e.g. --warmup-steps 100)"
    )


@dataclass(frozen=True, init=False)
class _TrainWithWarmup(TrainConfig):
    runtime: _RuntimeWithWarmup = section(_RuntimeWithWarmup, "run")


def test_a_field_added_to_a_train_section_is_a_flag_and_a_flat_config_field() -> None:
    parser = argparse.ArgumentParser(prog="mixle train", exit_on_error=False)
    add_option_flags(parser, _TrainWithWarmup)
    assert "linear learning-rate warm-up" in parser.format_help()
    values = option_values(parser.parse_args(["--warmup-steps", "100"]), _TrainWithWarmup)
    config = _TrainWithWarmup(**values, corpus="c")
    assert (config.warmup_steps, config.to_dict()["warmup_steps"]) == (100, 100)
    assert _TrainWithWarmup.from_dict(config.to_dict()) == config
    with pytest.raises(ArgumentError, match="`warmup_steps` must be a nonnegative integer"):
        _TrainWithWarmup("c", warmup_steps=-1)
