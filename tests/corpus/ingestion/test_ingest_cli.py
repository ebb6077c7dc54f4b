"""``mixle ingest`` command line: help, summary, quiet, progress, exit codes."""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from mixle.cli import main
from tests.corpus.ingest_helpers import random_docs, read_all, write_jsonl

ROOT = Path(__file__).resolve().parents[3]


def test_help_explains_every_option_with_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["ingest", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    options = sorted(set(re.findall(r"^\s+(--[a-z-]+)", text, flags=re.MULTILINE)) - {"--help"})
    assert len(options) >= 15
    blocks = re.split(r"\n(?=  -)", text.split("options:")[1].split("examples:")[0])
    for block in blocks:
        if "--help" in block or not block.strip():
            continue
        assert "e.g." in block, f"option without an example: {block.strip()[:60]}"
    assert "examples:" in text and "--resume" in text.split("examples:")[1]


def test_summary_is_printed_and_quiet_prints_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = random_docs(31, 30)
    write_jsonl(tmp_path / "a.jsonl", docs)
    assert main(["ingest", str(tmp_path / "a.jsonl"), str(tmp_path / "out"), "--workers", "1"]) == 0
    out = capsys.readouterr().out
    for word in (
        "documents",
        "tokens",
        "shards:",
        "bytes:",
        "dtype: uint16",
        "tokens/s",
        "skipped: 0",
    ):
        assert word in out
    assert f"{len(docs)} documents" in out
    code = main(["ingest", str(tmp_path / "a.jsonl"), str(tmp_path / "q"), "-q", "--workers", "1"])
    assert code == 0 and capsys.readouterr() == ("", "")
    assert read_all(tmp_path / "q") == [d.tolist() for d in docs]


def test_bad_input_exits_non_zero_with_location(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.jsonl").write_text('{"input_ids": [1]}\n{"input_ids": [2, -1]}\n')
    assert main(["ingest", str(tmp_path / "a.jsonl"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "a.jsonl line 2: token id -1 at position 1 is negative" in err
    assert not (tmp_path / "out").exists()
    assert (
        main(["ingest", str(tmp_path / "a.jsonl"), str(tmp_path / "out"), "--on-error", "skip"])
        == 0
    )
    assert "skipped: 1" in capsys.readouterr().out


def test_progress_bar_only_on_a_terminal(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", random_docs(32, 50))
    command = [sys.executable, "-m", "mixle.cli", "ingest", str(tmp_path / "a.jsonl")]
    piped = subprocess.run(
        [*command, str(tmp_path / "piped"), "--workers", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert piped.returncode == 0 and piped.stderr == ""
    leader, follower = os.openpty()
    # A terminal 100 columns wide (a fresh pty reports 0 columns and tqdm draws nothing).
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    with subprocess.Popen(
        [*command, str(tmp_path / "tty"), "--workers", "1"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=follower,
    ) as process:
        os.close(follower)
        chunks = []
        while True:
            try:
                data = os.read(leader, 4096)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        assert process.wait() == 0
    os.close(leader)
    shown = b"".join(chunks).decode(errors="replace")
    assert "ingest" in shown and "documents=50" in shown
