"""Every ``mixle`` subcommand on broken inputs: a one-line message and exit 2 (``verify``
says 1 for a corpus it read and found corrupt), never a traceback (issue #18).

The commands come from the CLI's own registry, so a newly registered subcommand is
run against the same inputs without editing this test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mixle.cli import _COMMANDS
from mixle.corpus import CorpusWriter
from tests.corpus.hardening_helpers import ROOT, reseal

_DRIVER = """
import json, sys, traceback
from mixle.cli import main
codes = []
for argv in json.loads(sys.argv[1]):
    try:
        codes.append(main(argv))
    except SystemExit as exc:  # argparse usage errors
        codes.append(exc.code)
    except BaseException:
        traceback.print_exc()
        codes.append("raised")
    print("===", file=sys.stderr, flush=True)
print(json.dumps(codes))
"""


def _corpus(path: Path) -> Path:
    with CorpusWriter(path, vocab_size=50, shard_max_bytes=16) as writer:
        writer.add_many([np.arange(n) % 40 for n in (3, 9, 4, 11)])
    return path


def _broken_inputs(root: Path) -> dict[str, Path]:
    cases: dict[str, Path] = {"missing": root / "missing", "empty-dir": root / "empty"}
    cases["empty-dir"].mkdir()
    cases["plain-file"] = root / "file.bin"  # not a corpus, and half a Megatron pair
    cases["plain-file"].write_text("not a corpus\n")
    for name, text in {
        "garbage-manifest": "{not json",
        "deep-manifest": "[" * 100_000 + "]" * 100_000,
        "huge-int-manifest": '{"num_tokens": ' + "9" * 5000 + "}",
    }.items():
        path = _corpus(root / name)
        (path / "manifest.json").write_text(text)
        cases[name] = path
    fifo = _corpus(root / "fifo-offsets")
    offsets = sorted(fifo.glob("*.offsets"))[0]
    offsets.unlink()
    os.mkfifo(offsets)
    cases["fifo-offsets"] = fifo
    unsafe = _corpus(root / "unsafe-name")
    reseal(unsafe, lambda m: m["shards"][0].update(tokens="%2e%2e%2fx"))
    cases["unsafe-name"] = unsafe
    truncated = _corpus(root / "truncated-tokens")
    tokens = sorted(truncated.glob("*.tokens"))[0]
    tokens.write_bytes(tokens.read_bytes()[:-2])
    cases["truncated-tokens"] = truncated
    return cases


def _argv(command: str, path: Path, out: Path) -> list[str]:
    if command in ("inspect", "verify"):
        return [command, str(path)]
    if command == "train":
        return [command, str(path), "--steps", "1", "--d-model", "16", "--n-layer", "1"]
    return [command, str(path), str(out)]  # ingest, convert and any later two-path command


@pytest.mark.parametrize("command", sorted(_COMMANDS))
def test_command_on_broken_inputs_never_prints_a_traceback(command: str, tmp_path: Path) -> None:
    cases = _broken_inputs(tmp_path)
    argvs = [_argv(command, path, tmp_path / f"out-{name}") for name, path in sorted(cases.items())]
    result = subprocess.run(
        [sys.executable, "-c", _DRIVER, json.dumps(argvs)],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        cwd=tmp_path,
        check=False,
    )
    assert "Traceback" not in result.stderr, result.stderr[-4000:]
    codes = json.loads(result.stdout.strip().splitlines()[-1])
    messages = result.stderr.split("===\n")[:-1]
    for name, code, message in zip(sorted(cases), codes, messages, strict=True):
        corrupt_verdict = command == "verify" and code == 1
        assert code == 2 or corrupt_verdict, (name, code, message)
        if command in _KNOWN and not corrupt_verdict:
            lines = message.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith(f"mixle {command}: "), (name, message)


_KNOWN = ("convert", "ingest", "inspect", "train", "verify")


def test_inspect_plot_into_a_missing_directory_is_a_one_line_error(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "good")
    target = tmp_path / "no" / "such" / "dir" / "lengths.png"
    result = subprocess.run(
        [sys.executable, "-m", "mixle.cli", "inspect", str(corpus), "--plot", str(target)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        check=False,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "does not exist" in result.stderr and len(result.stderr.strip().splitlines()) == 1
