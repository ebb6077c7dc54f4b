"""The one batch type: named fields, the seed's tuple view, and field-wise operations."""

from __future__ import annotations

import numpy as np
import torch

from mixle.data import Batch
from mixle.models._inputs import parse_batch


def _packed(ids: bool = False, sources: bool = False) -> Batch[np.ndarray]:
    context = np.arange(12, dtype=np.int64).reshape(3, 4)
    mask = np.ones((3, 4), dtype=np.bool_)
    mask[2, 2:] = False
    extra = (context * 0, context % 4) if ids else (None, None)
    return Batch(context, context + 1, mask, *extra, source_ids=np.arange(3) if sources else None)


def test_as_tuple_is_the_seed_tuple_of_present_fields_in_order() -> None:
    batch = _packed(ids=True, sources=True)
    names = ("context", "targets", "loss_mask", "document_ids", "position_ids", "source_ids")
    assert batch.fields() == names
    assert all(a is getattr(batch, n) for a, n in zip(batch.as_tuple(), names, strict=True))
    assert len(_packed().as_tuple()) == 3
    windows = Batch(np.zeros((2, 4), np.int64), np.zeros(2, np.int64), source_ids=np.arange(2))
    assert windows.fields() == ("context", "targets", "source_ids")
    assert windows.as_tuple()[2] is windows.source_ids


def test_num_targets_counts_the_mask_or_one_per_window() -> None:
    assert _packed().num_targets == 10
    assert Batch(np.zeros((5, 4), np.int64), np.zeros(5, np.int64)).num_targets == 5


def test_replace_rows_and_to_dict_keep_every_field() -> None:
    batch = _packed(ids=True, sources=True)
    assert batch.replace(source_ids=None).fields() == batch.fields()[:-1]
    part = batch.rows(slice(1, 3))
    assert part.num_rows == 2 and part.fields() == batch.fields()
    assert np.array_equal(part.position_ids, batch.position_ids[1:3])
    assert list(batch.to_dict()) == list(batch.fields())


def test_to_torch_converts_every_field_bitwise() -> None:
    batch = _packed(ids=True)
    tensors = batch.to_torch()
    assert all(isinstance(t, torch.Tensor) for t in tensors.as_tuple())
    for array, tensor in zip(batch.as_tuple(), tensors.as_tuple(), strict=True):
        assert np.array_equal(array, tensor.numpy())


def test_parse_batch_reads_a_batch_by_field_name() -> None:
    batch = _packed(ids=True, sources=True)
    parsed = parse_batch(batch, 100, 4)
    expected = parse_batch((batch.context, batch.targets, batch.loss_mask), 100, 4)
    assert np.array_equal(parsed.targets, expected.targets)
    assert np.array_equal(parsed.weights, expected.weights)
    windows = Batch(batch.context, batch.targets[:, 0], source_ids=batch.source_ids)
    assert parse_batch(windows, 100, 4).weights.tolist() == [1.0, 1.0, 1.0]


def test_init_sets_every_field_and_the_batch_is_frozen() -> None:
    import dataclasses

    import pytest

    names = [f.name for f in dataclasses.fields(Batch)]
    batch = Batch(**{name: np.full(2, i) for i, name in enumerate(names)})
    assert [int(getattr(batch, name)[0]) for name in names] == list(range(len(names)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch.context = np.zeros(2)  # type: ignore[misc]


def test_field_wise_helpers_carry_every_field() -> None:
    import dataclasses

    names = [f.name for f in dataclasses.fields(Batch)]
    batch = Batch(**{name: np.arange(4) + 10 * i for i, name in enumerate(names)})
    part = batch.rows(slice(1, 3))
    assert part.fields() == tuple(names) == batch.map(np.negative).fields()
    for name in names:
        assert getattr(part, name).tolist() == getattr(batch, name)[1:3].tolist()
    assert list(batch.to_dict()) == names
