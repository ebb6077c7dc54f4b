"""Long names, a full disk, odd timeouts, reject reasons (issue #32, classes 10 and 11).

Names up to NAME_MAX (255 bytes) work everywhere an ingest writes (the temporary
names derived from them are shortened with a digest); longer ones are refused before
any work. A full disk names the file that could not be written. ``--scheduler-timeout``
must be a finite, positive number. A reject reason is one sentence joined by "; ".
"""

from __future__ import annotations

import errno
import gzip
import json
import os
from pathlib import Path

import pytest

from mixle._io import temporary_name
from mixle.cli import main
from mixle.corpus import IngestPlan, ingest, verify_corpus
from mixle.corpus.format.shard import ShardWriter
from mixle.errors import ArgumentError
from tests.corpus.ingestion.distributed_helpers import OPTIONS


def _jsonl(path: Path, bad: bool = False) -> Path:
    lines = [json.dumps({"input_ids": [i, i + 1, i + 2]}) for i in range(20)]
    if bad:
        lines.insert(3, json.dumps({"input_ids": [1, -5]}))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("length", [235, 250, 255])
def test_long_rejects_names_work(tmp_path: Path, length: int) -> None:
    rejects = tmp_path / ("r" * (length - len(".jsonl")) + ".jsonl")
    out = tmp_path / "out"
    summary = ingest(_jsonl(tmp_path / "a.jsonl", bad=True), out, on_error="skip", rejects=rejects)
    assert summary.skipped == 1 and rejects.read_text().count("\n") == 1
    assert verify_corpus(out).ok


@pytest.mark.parametrize("length", [235, 250, 255])
def test_long_output_and_plan_names_work(tmp_path: Path, length: int) -> None:
    source = _jsonl(tmp_path / "a.jsonl")
    out = tmp_path / ("o" * length)
    ingest(source, out, **OPTIONS)
    assert verify_corpus(out).ok
    plan = tmp_path / ("p" * (length - 5) + ".json")
    code = main(["ingest", str(source), "--write-plan", str(plan), "--vocab-size", "1000", "-q"])
    assert code == 0 and IngestPlan.read(plan).units
    tasks = tmp_path / ("t" * length)
    assert main(["ingest", "--plan", str(plan), str(tasks), "--task", "0/1", "-q"]) == 0
    assert main(["ingest", "--commit", str(tasks), "-q"]) == 0 and verify_corpus(tasks).ok


def test_temporary_names_always_fit_and_stay_distinct() -> None:
    for length in (1, 200, 240, 250, 255):
        for unique in (False, True):
            name = os.path.basename(temporary_name("/d/" + "x" * length, unique=unique))
            assert len(os.fsencode(name)) <= 255 and name.startswith(".x")
    assert temporary_name("/d/" + "a" * 250 + "1") != temporary_name("/d/" + "a" * 250 + "2")
    multibyte = os.path.basename(temporary_name("/d/" + "é" * 127, unique=True))
    assert len(os.fsencode(multibyte)) <= 255


@pytest.mark.parametrize("what", ["rejects", "output"])
def test_a_name_over_name_max_is_refused_before_any_work(tmp_path: Path, what: str) -> None:
    source = _jsonl(tmp_path / "a.jsonl")
    long = "n" * 256
    out = tmp_path / (long if what == "output" else "out")
    rejects = tmp_path / long if what == "rejects" else None
    with pytest.raises(ArgumentError, match=rf"`{what}`: the name n+\.\.\. .* is 256 bytes long"):
        ingest(source, out, on_error="skip", rejects=rejects)
    assert sorted(os.listdir(tmp_path)) == ["a.jsonl"]


def test_a_full_disk_names_the_shard_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def full(self: ShardWriter, tokens: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ShardWriter, "_write_bytes", full)
    source = _jsonl(tmp_path / "a.jsonl")
    out = tmp_path / "out"
    with pytest.raises(OSError, match="No space left on device") as caught:
        ingest(source, out)
    assert caught.value.errno == errno.ENOSPC
    assert caught.value.filename == str(
        out / ".mixle-ingest" / "unit-000000" / "shard-00000.tokens"
    )
    assert main(["ingest", str(source), str(tmp_path / "again"), "-q"]) == 2
    error = capsys.readouterr().err
    assert "shard-00000.tokens" in error and error.count("\n") == 1


def test_a_full_disk_names_the_record_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import mixle._io

    real = mixle._io.fsync_file

    def full(handle: object) -> None:
        if str(getattr(handle, "name", "")).find("done.json") >= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(handle)  # type: ignore[arg-type]

    monkeypatch.setattr(mixle._io, "fsync_file", full)
    out = tmp_path / "out"
    with pytest.raises(OSError, match="No space left on device") as caught:
        ingest(_jsonl(tmp_path / "a.jsonl"), out)
    assert caught.value.filename == str(out / ".mixle-ingest" / "unit-000000" / "done.json")


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "0", "1e300"])
def test_a_scheduler_timeout_that_is_not_a_finite_positive_number_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    args = ["ingest", str(_jsonl(tmp_path / "a.jsonl")), str(tmp_path / "out"), "--vocab-size"]
    args += ["1000", "--executor", "dask", "--scheduler", "tcp://127.0.0.1:9"]
    assert main([*args, "--scheduler-timeout", value, "-q"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "ArgumentError" in error and "scheduler_timeout" in error
    assert not (tmp_path / "out").exists()


def test_a_skip_reason_is_joined_without_a_stray_period(tmp_path: Path) -> None:
    source = tmp_path / "a.jsonl.gz"
    data = gzip.compress(
        b"".join(json.dumps({"input_ids": [i]}).encode() + b"\n" for i in range(500))
    )
    source.write_bytes(data[: len(data) // 2])
    rejects = tmp_path / "rejects.jsonl"
    ingest(source, tmp_path / "out", on_error="skip", rejects=rejects)
    (record,) = [json.loads(line) for line in rejects.read_text().splitlines()]
    assert ".;" not in record["reason"]
    assert "none of its records were read; nothing after this point" in record["reason"]
