"""A writer killed at any point leaves the previous state or no corpus, never a corrupt one."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from mixle.corpus import CorpusWriter, open_corpus, verify_corpus
from mixle.errors import CorpusNotFoundError

ROOT = Path(__file__).resolve().parents[3]

KILLED_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    import numpy as np
    import mixle.corpus.format.writer as writer_module
    from mixle.corpus import CorpusWriter

    writer_module._BATCH_TOKENS = 16  # write through to disk often
    path, kill_at, overwrite = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
    writer = CorpusWriter(path, vocab_size=1000, shard_max_bytes=64, overwrite=overwrite)
    for index in range(200):
        writer.add(np.arange(index % 30))
        if index == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
    writer.commit()
    """
)


def _run_killed_writer(path: Path, kill_at: int, overwrite: bool = False) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", KILLED_WRITER, str(path), str(kill_at), "1" if overwrite else "0"],
        env=env,
        capture_output=True,
        check=False,
    )
    assert result.returncode == -9, result.stderr.decode()


@pytest.mark.parametrize("kill_at", [0, 37, 150])
def test_killed_writer_leaves_no_corpus_and_a_new_writer_succeeds(
    tmp_path: Path, kill_at: int
) -> None:
    path = tmp_path / "c"
    _run_killed_writer(path, kill_at)
    assert not (path / "manifest.json").exists()
    with pytest.raises(CorpusNotFoundError):
        open_corpus(path)
    with CorpusWriter(path, vocab_size=1000) as writer:
        writer.add_many([[1, 2], [3]])
    assert verify_corpus(path).ok
    assert sorted(os.listdir(path)) == [
        "manifest.json",
        "shard-00000.offsets",
        "shard-00000.tokens",
    ]


def test_killed_overwrite_before_first_shard_keeps_the_old_corpus(tmp_path: Path) -> None:
    path = tmp_path / "c"
    with CorpusWriter(path) as writer:
        writer.add_many([[5, 6, 7]] * 3)
    before = open_corpus(path).fingerprint
    _run_killed_writer(path, 0, overwrite=True)  # 1 tiny document: nothing flushed yet
    assert open_corpus(path, verify=True).fingerprint == before


def test_killed_overwrite_after_shards_leaves_no_corpus_not_a_mixed_one(tmp_path: Path) -> None:
    path = tmp_path / "c"
    with CorpusWriter(path, shard_max_bytes=8) as writer:
        writer.add_many([[5, 6, 7]] * 30)
    _run_killed_writer(path, 120, overwrite=True)
    with pytest.raises(CorpusNotFoundError):
        open_corpus(path)


def test_keyboard_interrupt_inside_with_discards_everything(tmp_path: Path) -> None:
    path = tmp_path / "c"
    with pytest.raises(KeyboardInterrupt), CorpusWriter(path, shard_max_bytes=8) as writer:
        writer.add_many(np.arange(10) for _ in range(50))
        raise KeyboardInterrupt
    assert os.listdir(path) == []


def test_failing_document_generator_discards_everything(tmp_path: Path) -> None:
    def documents() -> object:
        yield from ([1, 2, 3] for _ in range(10))
        raise OSError("input disk vanished")

    path = tmp_path / "c"
    with pytest.raises(OSError, match="vanished"), CorpusWriter(path, shard_max_bytes=8) as writer:
        writer.add_many(documents())  # type: ignore[arg-type]
    assert os.listdir(path) == []
