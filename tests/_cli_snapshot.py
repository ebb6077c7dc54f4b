"""What ``mixle ingest`` and ``mixle train`` make of a command line, as JSON-able data.

Used by ``tests/test_cli_options.py`` to pin the parsed-arguments -> options mapping,
the usage errors and the flags of ``--help`` against ``tests/snapshots/cli_options.json``,
which was recorded with the hand-written parsers the declared options replaced
(regenerate only for an intended change: ``python -m tests._cli_snapshot``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

SNAPSHOT = Path(__file__).parent / "snapshots" / "cli_options.json"

INGEST_LINES = [
    "in.jsonl out",
    "a.jsonl b.jsonl out --field ids --workers 3",
    "books/ out --input-format text --split paragraphs --append-eos 0",
    "d.jsonl out --tokenizer bytes --field text --append-eos 255",
    "p out --vocab-size 50257",
    "t.npz out --shard-size 512MiB --unit-size 1GB",
    "d/ out --on-error skip --rejects bad.jsonl",
    "d/ out --resume -q",
    "d/ out --overwrite --quiet",
    "d/ s3://b/c --storage-option anon=true --storage-option client_kwargs.region_name=x",
    "d/ out.zarr --layout zarr --staging-dir /tmp/stage",
    "d/ out --vocab-size 50257 --executor dask --scheduler tcp://h:8786 --scheduler-timeout 5 --retries 7",
    "d/ out --dtype uint32 --task 3/16",
    "--plan plan.json out --task 0/2",
    "--plan plan.json out",
    "d/ out --dtype int64 --shard-size 4096 --unit-size 4096",
]

INGEST_ERRORS = [
    "d/ out --workers 0",
    "d/ out --workers x",
    "d/ out --shard-size 0",
    "d/ out --shard-size 12XB",
    "d/ out --unit-size -5",
    "d/ out --dtype int8",
    "d/ out --split lines",
    "d/ out --on-error ignore",
    "d/ out --layout tar",
    "d/ out --executor ray",
    "d/ out --input-format csv",
    "d/ out --scheduler tcp://h:1",
    "d/ out --task 4/4",
    "d/ out --task x",
    "d/ out --task 0/2 --executor dask --dtype uint16",
    "d/ out --scheduler-timeout 0 --executor dask --dtype uint16",
    "d/ out --scheduler-timeout inf --executor dask --dtype uint16",
    "d/ out --retries -1",
    "d/ out --vocab-size 0",
    "d/ out --append-eos -1",
    "d/ out --append-eos 300 --vocab-size 256",
    "d/ out --append-eos 70000 --dtype uint16",
    "d/ out --executor dask",
    "d/ out --task 0/2",
    "d/ out --task 0/2 --dtype uint16 --layout zarr",
    "out",
    "--commit a b",
    "--commit out --plan p.json",
]

TRAIN_LINES = [
    "corpus",
    "corpus --steps 300 --checkpoint-dir runs/a --plot runs/a/loss.png",
    "corpus --steps 600 --checkpoint-dir runs/a --resume",
    "--mixture mix.toml --steps 300 --checkpoint-dir runs/m",
    "corpus --objective windows --layout per-rank --block 32 --batch-size 4 --boundary-id 0",
    "corpus --holdout 8 --eval-every 10 --eval-batches 2 --vocab 300",
    "corpus --d-model 64 --n-layer 2 --n-head 2 --untied-head --lr 0.01 --seed 5",
    "corpus --epochs 2 --device cuda:1 --threads 3",
    "corpus --checkpoint-dir c --checkpoint-every 5 --keep-last 1 --metrics m.jsonl",
    "corpus --log-every 0 --prefetch 0 --progress",
    "corpus --no-progress",
]

TRAIN_ERRORS = [
    "",
    "corpus --mixture mix.toml",
    "corpus --block 0",
    "corpus --block x",
    "corpus --lr -1",
    "corpus --lr nan",
    "corpus --objective masked",
    "corpus --layout ring",
    "corpus --d-model 10 --n-head 3",
    "corpus --eval-every 5",
    "corpus --resume",
    "corpus --checkpoint-every 3",
    "corpus --keep-last 0",
    "corpus --threads 0",
    "corpus --holdout -1",
    "corpus --boundary-id -2",
    "corpus --steps -1",
    "corpus --seed -1",
    "corpus --progress --no-progress",
    "--mixture mix.toml",
    "--mixture mix.toml --steps 5 --layout per-rank --holdout 2",
]


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


#: The 24 options of ``ingest`` (the flat keywords of ``IngestOptions``).
INGEST_OPTIONS = (  # noqa: SIM905 (one line per group reads better)
    "input_format field tokenizer split append_eos shard_size vocab_size dtype workers "
    "on_error rejects resume overwrite unit_size progress layout storage_options "
    "staging_dir executor scheduler task retries scheduler_timeout plan"
).split()


@contextlib.contextmanager
def _captured() -> Iterator[dict[str, Any]]:
    seen: dict[str, Any] = {}

    def run_ingest(inputs: Any, output: Any, options: Any) -> Any:
        seen.update(inputs=list(inputs), output=os.fspath(output), options=options)
        raise SystemExit(0)

    def train(config: Any, **_: Any) -> Any:
        seen.update(config=config.to_dict())
        raise SystemExit(0)

    with (
        mock.patch("mixle.corpus.ingestion.pipeline.run_ingest", run_ingest),
        mock.patch("mixle.train.train", train),
        mock.patch("os.cpu_count", return_value=4),
    ):
        yield seen


def run_line(command: str, line: str) -> dict[str, Any]:
    """Run ``mixle COMMAND LINE`` with the library call replaced by a recorder."""
    from mixle.cli import main

    stderr = io.StringIO()
    with (
        _captured() as seen,
        contextlib.redirect_stderr(stderr),
        contextlib.redirect_stdout(io.StringIO()),
    ):
        try:
            code: Any = main([command, *line.split()])
        except SystemExit as exc:
            code = exc.code
    result: dict[str, Any] = {"exit": code, "stderr": stderr.getvalue()}
    if "options" in seen:
        result.update(inputs=seen["inputs"], output=seen["output"])
        result["options"] = {
            name: _jsonable(getattr(seen["options"], name)) for name in INGEST_OPTIONS
        }
    if "config" in seen:
        result["config"] = _jsonable(seen["config"])
    return result


def help_flags(command: str) -> dict[str, Any]:
    """Every optional argument of ``mixle COMMAND``: its help, choices, metavar, default."""
    import mixle.cli as cli

    with mock.patch("os.cpu_count", return_value=4):
        parser = cli._build_parser(command)
    sub = next(
        action for action in parser._actions if isinstance(action, argparse._SubParsersAction)
    ).choices[command]
    flags = {}
    for action in sub._actions:
        if not action.option_strings or action.option_strings == ["-h", "--help"]:
            continue
        flags[" ".join(action.option_strings)] = {
            "help": action.help,
            "choices": None if action.choices is None else list(action.choices),
            "metavar": action.metavar,
            "default": _jsonable(action.default),
            "nargs": action.nargs,
            "const": _jsonable(action.const),
        }
    return flags


def record() -> dict[str, Any]:
    """The snapshot of the current code."""
    return {
        "ingest": {line: run_line("ingest", line) for line in INGEST_LINES + INGEST_ERRORS},
        "train": {line: run_line("train", line) for line in TRAIN_LINES + TRAIN_ERRORS},
        "ingest --help": help_flags("ingest"),
        "train --help": help_flags("train"),
    }


if __name__ == "__main__":
    SNAPSHOT.write_text(json.dumps(record(), indent=1, sort_keys=True) + "\n")
