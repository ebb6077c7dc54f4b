"""``mixle.hf.GlobalRowDataset`` under accelerate's real per-process slicing (issue #19).

``accelerate.data_loader.prepare_data_loader(..., num_processes=2, process_index=p)``
with ``dispatch_batches=False`` wraps the dataset in the real ``IterableDatasetShard``
in this process; ``test_accelerate_launch.py`` runs the dispatch modes under torchrun.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from mixle.data import StreamingCorpus
from mixle.data.torch import StreamingDataset
from mixle.errors import ArgumentError, ArgumentTypeError, StateMismatchError
from mixle.hf import GlobalRowDataset, to_iterable_dataset
from tests.hf.corpus import BATCH_SIZE, WORLD_SIZE, documents, global_corpus

accelerate_data_loader = pytest.importorskip(
    "accelerate.data_loader", reason="needs mixle[hf] (accelerate)"
)
FIELDS = ("context", "targets", "loss_mask", "document_ids", "position_ids")


def _process_batches(
    dataset: Any,
    process: int,
    *,
    world: int = WORLD_SIZE,
    batch: int = BATCH_SIZE,
    split: bool = False,
    workers: int = 0,
) -> list[dict[str, torch.Tensor]]:
    """What accelerate's process ``process`` of ``world`` receives (IterableDatasetShard)."""
    size = batch * world if split else batch
    loader = accelerate_data_loader.prepare_data_loader(
        DataLoader(dataset, batch_size=size, num_workers=workers),
        num_processes=world,
        process_index=process,
        split_batches=split,
        dispatch_batches=False,
        put_on_device=False,
    )
    if world > 1:  # accelerate leaves a single process's dataset alone
        assert isinstance(loader.dataset, accelerate_data_loader.IterableDatasetShard)
    return list(loader)


def _assert_rank_batches(
    got: list[dict[str, torch.Tensor]], expected: list[tuple[Any, ...]]
) -> None:
    assert len(got) == len(expected) > 0
    for batch, reference in zip(got, expected, strict=True):
        for name, value in zip(FIELDS, reference, strict=True):
            np.testing.assert_array_equal(batch[name].numpy(), value, err_msg=name)


def _targets(batches: list[dict[str, torch.Tensor]]) -> list[tuple[int, int]]:
    """``(document, position)`` of every input token whose target is trained on."""
    pairs: list[tuple[int, int]] = []
    for batch in batches:
        mask = batch["loss_mask"]
        pairs.extend(
            zip(
                batch["document_ids"][mask].tolist(),
                batch["position_ids"][mask].tolist(),
                strict=True,
            )
        )
    return pairs


def _epoch_target_count(docs: list[np.ndarray]) -> int:
    return sum(len(d) for d in docs) + len(docs) - 1 - 1  # boundaries between documents


@pytest.mark.parametrize("split", [False, True])
def test_each_process_gets_exactly_its_global_layout_batches(split: bool) -> None:
    dataset = GlobalRowDataset(global_corpus(rank=0), num_epochs=1)
    seen: list[tuple[int, int]] = []
    for process in range(WORLD_SIZE):
        got = _process_batches(dataset, process, split=split)
        _assert_rank_batches(got, list(global_corpus(rank=process).epoch_batches(0)))
        seen += _targets(got)
    assert len(seen) == len(set(seen)) == _epoch_target_count(documents())


@settings(max_examples=12, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 40), min_size=1, max_size=30),
    world=st.integers(1, 4),
    batch=st.integers(1, 4),
    block=st.integers(1, 6),
    split=st.booleans(),
)
def test_any_shape_gives_the_rank_batches_and_every_target_once(
    lengths: list[int], world: int, batch: int, block: int, split: bool
) -> None:
    docs = [np.arange(1, n + 1, dtype=np.int64) * 7 for n in lengths]
    corpus = global_corpus(0, world, batch, block=block, docs=docs)
    dataset = GlobalRowDataset(corpus, num_epochs=1)
    seen: list[tuple[int, int]] = []
    for process in range(world):
        got = _process_batches(dataset, process, world=world, batch=batch, split=split)
        reference = global_corpus(process, world, batch, block=block, docs=docs)
        expected = list(reference.epoch_batches(0))
        if not expected:
            assert got == []
            continue
        _assert_rank_batches(got, expected)
        seen += _targets(got)
    total = sum(lengths) + len(lengths) - 1
    assert len(seen) == len(set(seen)) == max(total - 1, 0)


def test_per_rank_dataset_handed_to_accelerate_loses_data() -> None:
    """The trap this module exists for (accelerate #3547): a stream that is already
    sharded per rank is sharded again by IterableDatasetShard, and each process keeps
    only its share of its own shard. Half the epoch's targets are never trained on."""
    seen: list[tuple[int, int]] = []
    for process in range(WORLD_SIZE):
        per_rank = StreamingCorpus(
            documents(),
            rank=process,
            world_size=WORLD_SIZE,
            batch_size=BATCH_SIZE,
            block=8,
            seed=5,
            boundary_id=0,
            document_ids=True,
            even_batches=False,
        )
        # Each per-rank item is one batch; accelerate re-batches and re-shards them.
        got = _process_batches(StreamingDataset(per_rank, num_epochs=1), process, batch=1)
        seen += [
            pair
            for item in got
            for pair in zip(item[3][item[2]].tolist(), item[4][item[2]].tolist(), strict=True)
        ]
    total = _epoch_target_count(documents())
    assert len(set(seen)) < 0.6 * total  # about half is lost ...
    global_seen: list[tuple[int, int]] = []
    dataset = GlobalRowDataset(global_corpus(rank=0), num_epochs=1)
    for process in range(WORLD_SIZE):
        global_seen += _targets(_process_batches(dataset, process))
    assert len(set(global_seen)) == total  # ... and nothing with the global row stream


def test_worker_count_does_not_change_the_process_batches() -> None:
    dataset = GlobalRowDataset(global_corpus(rank=0), num_epochs=2)
    for process in range(WORLD_SIZE):
        expected = list(global_corpus(rank=process).epoch_batches(0))
        expected += list(global_corpus(rank=process).epoch_batches(1))
        _assert_rank_batches(_process_batches(dataset, process, workers=2), expected)


def test_resume_mid_epoch_continues_exactly_on_another_shape() -> None:
    dataset = GlobalRowDataset(global_corpus(rank=0), num_epochs=1)
    steps = 4
    before = [_process_batches(dataset, p)[:steps] for p in range(WORLD_SIZE)]
    state = json.loads(json.dumps(dataset.state_after(steps)))
    assert state["version"] == 2 and state["row"] == steps * WORLD_SIZE * BATCH_SIZE
    # Resume on 2 processes of 5 rows: G' = 10 does not divide the saved row 24.
    resumed = GlobalRowDataset(global_corpus(rank=0, batch_size=5), num_epochs=1)
    resumed.load_state_dict(state)
    after = []
    for process in range(WORLD_SIZE):
        reference = global_corpus(rank=process, batch_size=5)
        reference.load_state_dict(state)
        expected = []
        for batch in reference:  # the cursor moves before each batch is handed out
            expected.append(batch)
            if reference.cursor[0] > 0:
                break
        got = _process_batches(resumed, process, batch=5)
        _assert_rank_batches(got, expected)
        after.append(got)
    seen = [pair for part in (*before, *after) for pair in _targets(part)]
    assert len(seen) == len(set(seen)) == _epoch_target_count(documents())


def test_state_dict_is_the_row_cursor_of_the_next_row() -> None:
    dataset = GlobalRowDataset(global_corpus(rank=0))
    iterator = iter(dataset)
    for _ in range(7):
        next(iterator)
    state = dataset.state_dict()
    assert (state["epoch"], state["row"]) == (0, 7)
    following = next(iterator)["context"].numpy()
    corpus = global_corpus(rank=0, world_size=1, batch_size=1)
    corpus.load_state_dict(state)  # the corpus's own version-2 cursor
    np.testing.assert_array_equal(next(iter(corpus))[0][0], following)
    restarted = GlobalRowDataset(global_corpus(rank=0))
    restarted.load_state_dict(state)
    np.testing.assert_array_equal(next(iter(restarted))["context"].numpy(), following)


def test_state_after_the_end_points_at_the_next_epoch() -> None:
    dataset = GlobalRowDataset(global_corpus(rank=0), num_epochs=1)
    steps = global_corpus(rank=0).num_batches(0)
    state = dataset.state_after(steps)
    assert (state["epoch"], state["row"]) == (1, 0)
    empty = GlobalRowDataset(global_corpus(rank=0, docs=[np.array([3])]))
    assert list(empty) == []
    assert (empty.state_after(5)["epoch"], empty.state_after(5)["row"]) == (0, 0)


def test_a_state_of_another_stream_or_layout_is_refused_and_nothing_moves() -> None:
    dataset = GlobalRowDataset(global_corpus(rank=0))
    other = GlobalRowDataset(global_corpus(rank=0, block=4))
    with pytest.raises(StateMismatchError, match="block in checkpoint: 4 / in stream: 8"):
        dataset.load_state_dict(other.state_after(2))
    per_rank = StreamingCorpus(documents(), rank=0, world_size=2, batch_size=3, block=8)
    with pytest.raises(StateMismatchError, match="version"):
        dataset.load_state_dict(per_rank.state_dict())
    with pytest.raises(StateMismatchError, match="only"):
        dataset.load_state_dict({**dataset.state_dict(), "row": 10**6})
    assert dataset.state_dict() == dataset.state_after(0)


def test_only_a_global_layout_corpus_is_accepted() -> None:
    per_rank = StreamingCorpus(documents(), rank=0, world_size=2, batch_size=3, block=8)
    with pytest.raises(ArgumentError, match="layout='global'"):
        GlobalRowDataset(per_rank)
    with pytest.raises(ArgumentTypeError, match="StreamingCorpus"):
        GlobalRowDataset(documents())  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="num_epochs"):
        GlobalRowDataset(global_corpus(rank=0), num_epochs=0)
    with pytest.raises(ArgumentError, match="steps"):
        GlobalRowDataset(global_corpus(rank=0)).state_after(-1)


def test_hf_iterable_dataset_gives_the_same_process_batches() -> None:
    pytest.importorskip("datasets", reason="needs mixle[hf] (datasets)")
    rows = GlobalRowDataset(global_corpus(rank=0), num_epochs=1)
    hf = to_iterable_dataset(rows)
    assert hf.n_shards == 1  # accelerate then slices rows, never whole shards
    seen: list[tuple[int, int]] = []
    for process in range(WORLD_SIZE):
        got = _process_batches(hf, process)
        _assert_rank_batches(got, list(global_corpus(rank=process).epoch_batches(0)))
        seen += _targets(got)
    assert len(seen) == len(set(seen)) == _epoch_target_count(documents())


def test_hf_iterable_dataset_resumes_from_a_loaded_row_cursor() -> None:
    pytest.importorskip("datasets", reason="needs mixle[hf] (datasets)")
    rows = GlobalRowDataset(global_corpus(rank=0), num_epochs=1)
    rows.load_state_dict(rows.state_after(3))
    got = _process_batches(to_iterable_dataset(rows), 1)
    _assert_rank_batches(got, list(global_corpus(rank=1).epoch_batches(0))[3:])


def test_missing_datasets_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "datasets", None)  # import raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'mixle\[hf\]'"):
        to_iterable_dataset(GlobalRowDataset(global_corpus(rank=0)))
    with pytest.raises(ArgumentTypeError, match="GlobalRowDataset"):
        to_iterable_dataset(global_corpus(rank=0))


def test_rows_are_counted_in_whole_global_batches() -> None:
    dataset = GlobalRowDataset(global_corpus(rank=0), num_epochs=1)
    rows = list(dataset)
    size = WORLD_SIZE * BATCH_SIZE
    assert len(rows) == global_corpus(rank=0).num_batches(0) * size
    padding = Counter(bool(row["loss_mask"].any()) for row in rows)[False]
    assert padding < size
