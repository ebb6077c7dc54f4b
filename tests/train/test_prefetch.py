"""Overlapped input: prefetching changes no batch, no checkpoint and stops cleanly."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mixle.errors import ArgumentError
from mixle.train import read_metrics, train
from mixle.train._prefetch import PrefetchedBatches
from mixle.train._sources import Batch, BatchId, batch_digest
from tests.train._helpers import (
    assert_bitwise_equal,
    final_tensors,
    packed_source,
    step_records,
    tiny_config,
)


def _quiet(line: str) -> None:
    del line


def _prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "mixle-prefetch"]


@pytest.mark.parametrize("objective", ["packed", "windows"])
def test_prefetch_changes_no_batch_and_no_weight(
    text_corpus: Path, tmp_path: Path, objective: str
) -> None:
    runs = {}
    for depth in (0, 1, 3):
        run = tmp_path / f"prefetch-{depth}"
        train(
            tiny_config(
                text_corpus, objective=objective, steps=12, prefetch=depth, checkpoint_dir=str(run)
            ),
            log=_quiet,
        )
        runs[depth] = run
    base = step_records(runs[0] / "metrics.jsonl")
    assert len(base) == 12
    for depth in (1, 3):
        assert step_records(runs[depth] / "metrics.jsonl") == base
        assert_bitwise_equal(final_tensors(runs[0]), final_tensors(runs[depth]))
    assert not _prefetch_threads()


def test_resume_with_prefetch_matches_the_synchronous_run(
    text_corpus: Path, tmp_path: Path
) -> None:
    whole = tmp_path / "whole"
    train(tiny_config(text_corpus, steps=20, prefetch=0, checkpoint_dir=str(whole)), log=_quiet)
    parts = tmp_path / "parts"
    # Stops at 7 and 13 leave prefetched, untrained batches behind in the queue: the
    # checkpoints must point at the first batch not trained on.
    for steps, depth in ((7, 4), (13, 2), (20, 4)):
        config = tiny_config(
            text_corpus, steps=steps, prefetch=depth, checkpoint_dir=str(parts), resume=True
        )
        assert train(config, log=_quiet).step == steps
    assert step_records(whole / "metrics.jsonl") == step_records(parts / "metrics.jsonl")
    assert_bitwise_equal(final_tensors(whole), final_tensors(parts))
    assert not _prefetch_threads()


def test_step_records_carry_the_data_wait(text_corpus: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    train(tiny_config(text_corpus, steps=5, checkpoint_dir=str(run)), log=_quiet)
    steps = [r for r in read_metrics(str(run / "metrics.jsonl")) if r["type"] == "step"]
    assert len(steps) == 5
    for record in steps:
        assert 0.0 <= record["data_wait_s"] <= record["step_s"]


def test_negative_prefetch_is_rejected(text_corpus: Path) -> None:
    with pytest.raises(ArgumentError, match="prefetch"):
        tiny_config(text_corpus, prefetch=-1)


def test_wrapper_yields_the_source_batches_and_reports_the_consumed_state(
    text_corpus: Path,
) -> None:
    plain = packed_source(text_corpus)
    expected = []
    for (batch, batch_id), _ in zip(plain, range(10), strict=False):
        expected.append((batch_digest(batch), batch_id, plain.cursor, plain.state_dict()))
    wrapped = PrefetchedBatches(packed_source(text_corpus), depth=3)
    assert wrapped.cursor == (0, 0)
    iterator = iter(wrapped)
    for digest, batch_id, cursor, state in expected:
        batch, got_id = next(iterator)
        assert (batch_digest(batch), got_id) == (digest, batch_id)
        # The producer is ahead, but the wrapper reports the batch the caller took.
        assert wrapped.cursor == cursor
        assert wrapped.state_dict() == state
    wrapped.close()
    assert not _prefetch_threads()
    resumed = packed_source(text_corpus)
    resumed.load_state_dict(expected[4][3])
    assert batch_digest(next(iter(resumed))[0]) == expected[5][0]


class _FailingSource:
    """A source whose third batch raises; counts how far the producer got."""

    def __init__(self) -> None:
        self.produced = 0
        self.position = 0

    @property
    def cursor(self) -> BatchId:
        return (0, self.position)

    def steps_in_epoch(self, epoch: int) -> int:
        return 10

    def steps_left(self, epoch: int, index: int) -> int:
        return 10 - index

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position}

    def load_state_dict(self, state: Any) -> None:
        self.position = state["position"]

    def __iter__(self) -> Iterator[tuple[Batch, BatchId]]:
        while True:
            if self.position == 2:
                raise ValueError("document 7 is broken")
            self.produced += 1
            batch_id = self.cursor
            self.position += 1
            yield (np.full((1, 2), batch_id[1]),), batch_id


def test_a_producer_error_is_raised_in_order_and_stops_the_thread() -> None:
    wrapped = PrefetchedBatches(_FailingSource(), depth=4)
    iterator = iter(wrapped)
    assert next(iterator)[1] == (0, 0)
    assert next(iterator)[1] == (0, 1)
    assert wrapped.state_dict() == {"position": 2}
    with pytest.raises(ValueError, match="document 7"):
        next(iterator)
    assert not _prefetch_threads()


def test_close_stops_a_producer_blocked_on_a_full_queue(text_corpus: Path) -> None:
    source = packed_source(text_corpus)
    wrapped = PrefetchedBatches(source, depth=2)
    iterator = iter(wrapped)
    next(iterator)
    for _ in range(3000):  # let the producer fill the queue and block on it
        if wrapped._queue.full():
            break
        threading.Event().wait(0.01)
    assert wrapped._queue.full()
    wrapped.close()
    assert not _prefetch_threads()
    # One batch taken, two queued, at most one more in the producer's hand.
    assert source.cursor[0] == 0 and 3 <= source.cursor[1] <= 4
    with pytest.raises(RuntimeError, match="once"):
        iter(wrapped)


def test_an_exception_in_the_step_stops_the_thread(
    text_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mixle.train import _trainer

    calls = []

    def failing_step(self: Any, batch: Batch, stop: bool) -> tuple[float, float, bool]:
        calls.append(batch)
        raise RuntimeError("step failed")

    monkeypatch.setattr(_trainer._Trainer, "train_step", failing_step)
    with pytest.raises(RuntimeError, match="step failed"):
        train(tiny_config(text_corpus, steps=5, prefetch=3), log=_quiet)
    assert len(calls) == 1
    assert not _prefetch_threads()
