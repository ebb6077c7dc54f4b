"""``loader_state_for`` refuses StatefulDataLoader states that do not add up (issue #32,
classes 7 and 10): every worker ``0 .. n-1`` exactly once, every field well-typed and in
range, each refusal naming the worker or the field."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from torchdata.stateful_dataloader import StatefulDataLoader

from mixle.data import StreamingCorpus
from mixle.data.torch import StreamingDataset
from mixle.errors import StateMismatchError

pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
    pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning"),
]

DOCUMENTS = [np.arange(1000 * i, 1000 * i + (i * 37) % 53 + 1, dtype=np.int64) for i in range(60)]


def dataset() -> StreamingDataset:
    corpus = StreamingCorpus(
        DOCUMENTS, rank=1, world_size=2, block=16, batch_size=3, layout="global"
    )
    return StreamingDataset(corpus, num_epochs=2)


def saved_state(num_workers: int, taken: int = 5) -> dict[str, Any]:
    """A real ``StatefulDataLoader`` state after ``taken`` batches."""
    loader = StatefulDataLoader(
        dataset(),
        batch_size=None,
        num_workers=num_workers,
        multiprocessing_context="fork" if num_workers else None,
    )
    iterator = iter(loader)
    for _ in range(taken):
        next(iterator)
    state = loader.state_dict()
    del iterator
    return state


@pytest.fixture(scope="module")
def three() -> dict[str, Any]:
    return saved_state(3)


@pytest.fixture(scope="module")
def single() -> dict[str, Any]:
    return saved_state(0)


def _workers(state: dict[str, Any]) -> dict[str, Any]:
    snapshots: dict[str, Any] = state["_snapshot"]["_worker_snapshots"]
    return snapshots


def _refused(state: dict[str, Any], edit: Callable[[dict[str, Any]], None], match: str) -> None:
    edited = copy.deepcopy(state)
    edit(edited)
    with pytest.raises(StateMismatchError, match=match):
        dataset().loader_state_for(edited, num_workers=2)


def test_an_intact_state_is_accepted(three: dict[str, Any]) -> None:
    out = dataset().loader_state_for(copy.deepcopy(three), num_workers=2)
    assert sorted(out["_snapshot"]["_worker_snapshots"]) == ["worker_0", "worker_1"]


@pytest.mark.parametrize("worker", [0, 1, 2])
def test_a_missing_worker_snapshot_is_refused_naming_the_worker(
    three: dict[str, Any], worker: int
) -> None:
    _refused(three, lambda s: _workers(s).pop(f"worker_{worker}"), f"lacks .* worker {worker}")


def test_a_duplicated_worker_snapshot_is_refused_naming_the_worker(three: dict[str, Any]) -> None:
    def duplicate(s: dict[str, Any]) -> None:
        _workers(s)["worker_1"] = copy.deepcopy(_workers(s)["worker_0"])

    _refused(three, duplicate, "snapshot of worker 0 appears twice")

    def relabelled(s: dict[str, Any]) -> None:  # the copy's id edited, its state not
        _workers(s)["worker_1"] = copy.deepcopy(_workers(s)["worker_0"])
        _workers(s)["worker_1"]["worker_id"] = 1

    _refused(three, relabelled, r"saved for worker 1 of 3 says \(worker, num_workers\) = \(0, 3\)")


def test_a_snapshot_of_a_worker_beyond_the_count_is_refused(three: dict[str, Any]) -> None:
    def extra(s: dict[str, Any]) -> None:
        _workers(s)["worker_3"] = copy.deepcopy(_workers(s)["worker_2"])
        _workers(s)["worker_3"]["worker_id"] = 3

    _refused(three, extra, "of worker 3; a loader of 3 workers")


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(state: dict[str, Any]) -> None:
        target: Any = state
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return edit


_SNAP = ("_snapshot",)
_MAIN = ("_snapshot", "_main_snapshot")
_W0 = ("_snapshot", "_worker_snapshots", "worker_0")
_D0 = (*_W0, "dataset_state")

MALFORMED: list[tuple[tuple[Any, ...], Any, str]] = [
    ((*_SNAP, "_worker_snapshots"), [1, 2], "`_worker_snapshots` must be a dict"),
    ((*_SNAP, "_main_snapshot"), None, "`_main_snapshot` must be a dict"),
    ((*_MAIN, "_num_workers"), "3", "`_num_workers` must be an integer"),
    ((*_MAIN, "_num_workers"), True, "`_num_workers` must be an integer"),
    ((*_MAIN, "_num_workers"), 0, r"`_num_workers` must be an integer in \[1, 2\*\*63\)"),
    ((*_MAIN, "_num_workers"), 2**70, "`_num_workers` .* Got a huge int"),
    ((*_MAIN, "_sampler_iter_yielded"), -1, "`_sampler_iter_yielded` must be an integer in"),
    ((*_MAIN, "_sampler_iter_yielded"), 2**64, "`_sampler_iter_yielded` must be an integer in"),
    ((*_MAIN, "_sampler_iter_yielded"), 5.0, "`_sampler_iter_yielded` must be an integer"),
    ((*_W0, "worker_id"), "0", r"`_worker_snapshots.worker_0.worker_id` must be an integer"),
    ((*_W0, "worker_id"), -1, r"worker_id` must be an integer in \[0"),
    ((*_W0, "dataset_state"), "x", "worker_0.dataset_state` must be a dict"),
    ((*_D0, "stream"), None, r"says \(worker, num_workers\) = None"),
    ((*_D0, "stream", "worker"), "abc", r"says \(worker, num_workers\) = \('abc', 3\)"),
    ((*_D0, "stream", "num_workers"), 2**80, "saved for worker 0 of 3 says"),
    ((*_D0, "epoch"), -1, "`epoch` must be a nonnegative integer"),
    ((*_D0, "batch"), 2**64, "worker 0: `epoch` and `batch` must be at most"),
    ((*_D0, "epoch"), 2**63, "worker 0: `epoch` and `batch` must be at most"),
    ((*_D0, "done"), 2, "`done` 0 or 1"),
    ((*_D0, "done"), "no", "`done` must be a nonnegative integer"),
]


@pytest.mark.parametrize(("path", "value", "match"), MALFORMED, ids=lambda v: str(v)[:40])
def test_a_malformed_field_is_refused_by_name(
    three: dict[str, Any], path: tuple[Any, ...], value: Any, match: str
) -> None:
    _refused(three, _set(path, value), match)


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("dataset_state", None, "`dataset_state` must be a dict"),
        ("_sampler_iter_yielded", "5", "`_sampler_iter_yielded` must be an integer"),
        ("_shared_seed", KeyError, "_shared_seed missing"),
    ],
)
def test_a_malformed_single_process_state_is_refused_by_name(
    single: dict[str, Any], key: str, value: Any, match: str
) -> None:
    def edit(state: dict[str, Any]) -> None:
        if value is KeyError:
            del state[key]
        else:
            state[key] = value

    _refused(single, edit, match)


def test_a_single_process_state_claiming_another_worker_is_refused(
    single: dict[str, Any],
) -> None:
    _refused(single, _set(("dataset_state", "stream", "worker"), 1), r"= \(1, 1\)")


def test_a_huge_worker_count_is_refused_without_counting_to_it(three: dict[str, Any]) -> None:
    _refused(three, _set((*_MAIN, "_num_workers"), 2**63 - 1), "lacks the snapshot of worker 3")
