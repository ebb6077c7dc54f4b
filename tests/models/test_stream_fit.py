"""stream_fit: one step per micro-batch, both batch shapes, masking, validation, logging."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from mixle.errors import ArgumentError, ArgumentTypeError, TokenIdError
from mixle.models import StreamingTransformer, stream_fit

from .conftest import (
    BLOCK,
    VOCAB,
    assert_params_equal,
    dense_batch,
    params_snapshot,
    random_pairs,
    tiny_leaf,
)


def _steps(leaf: StreamingTransformer) -> int:
    state = leaf.estimator()._slot.state_dict()
    return 0 if state is None else int(state["state"][0]["step"])


def _plain_loop(module: torch.nn.Module, batches: list[Any], lr: float) -> None:
    """The textbook loop stream_fit must agree with."""
    optimizer = torch.optim.AdamW(module.parameters(), lr=lr)
    for batch in batches:
        ctx = torch.as_tensor(batch[0])
        if len(batch) == 2:
            logits = module(ctx)[:, -1]
            loss = torch.nn.functional.cross_entropy(logits, torch.as_tensor(batch[1]))
        else:
            mask = torch.as_tensor(batch[2]).to(logits_dtype(module))
            logits = module(ctx)
            nll = torch.nn.functional.cross_entropy(
                logits.reshape(-1, VOCAB), torch.as_tensor(batch[1]).reshape(-1), reduction="none"
            )
            loss = (nll * mask.reshape(-1)).sum() / mask.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


def logits_dtype(module: torch.nn.Module) -> torch.dtype:
    return next(module.parameters()).dtype


@pytest.mark.parametrize("shape", ["pairs", "dense"])
def test_stream_fit_matches_a_plain_pytorch_loop(shape: str) -> None:
    if shape == "pairs":
        batches: list[Any] = [random_pairs(4, seed=s) for s in range(5)]
    else:
        batches = [dense_batch(3, seed=s) for s in range(5)]
        batches[-1][2][1, 5:] = False  # a padded tail, as StreamingCorpus's last row has
    leaf = tiny_leaf()
    leaf.module.double()  # see test_split_and_combine_equals_one_accumulator
    reference = copy.deepcopy(leaf.module)
    out = stream_fit(leaf, batches)
    _plain_loop(reference, batches, leaf.lr)
    assert out.module is leaf.module
    assert _steps(out) == len(batches)
    for (name, p), q in zip(out.module.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-9, msg=name)


def test_stream_fit_takes_one_step_per_batch_and_respects_max_steps() -> None:
    batches = [dense_batch(2, seed=s) for s in range(4)]
    assert _steps(stream_fit(tiny_leaf(), batches)) == 4
    consumed: list[int] = []

    def source() -> Iterator[Any]:
        for i, batch in enumerate(batches):
            consumed.append(i)
            yield batch

    assert _steps(stream_fit(tiny_leaf(), source(), max_steps=2)) == 2
    assert consumed == [0, 1]
    leaf = tiny_leaf()
    before = params_snapshot(leaf)
    assert _steps(stream_fit(leaf, batches, max_steps=0)) == 0
    assert_params_equal(before, params_snapshot(leaf))


def test_pad_ids_in_masked_targets_and_dead_context_tail_change_nothing() -> None:
    ctx, targets, mask = dense_batch(3, seed=7)
    mask[2, 4:] = False
    changed_ctx, changed_targets = ctx.copy(), targets.copy()
    changed_targets[2, 4:] = [-1, VOCAB + 5, 0, 3]  # pad ids, even out-of-vocabulary ones
    changed_ctx[2, 5:] = [VOCAB, -7, 1]  # context after the last observed target
    a, b = tiny_leaf(), tiny_leaf()
    stream_fit(a, [(ctx, targets, mask)] * 2)
    stream_fit(b, [(changed_ctx, changed_targets, mask)] * 2)
    assert_params_equal(params_snapshot(a), params_snapshot(b))


def test_context_ids_that_can_still_influence_a_target_are_validated() -> None:
    ctx, targets, mask = dense_batch(2, seed=1)
    mask[1, 3] = False  # an interior masked target: position 3's context still feeds 4..7
    ctx[1, 3] = VOCAB
    with pytest.raises(TokenIdError, match=rf"row 1, position 3; ids must be in \[0, {VOCAB}\)"):
        stream_fit(tiny_leaf(), [(ctx, targets, mask)])


def test_fully_masked_batches_are_skipped() -> None:
    ctx, targets, mask = dense_batch(2)
    empty = (ctx, targets, np.zeros_like(mask))
    leaf = stream_fit(tiny_leaf(), [empty, (ctx, targets, mask), empty])
    assert _steps(leaf) == 1


def test_torch_tensor_batches_are_accepted() -> None:
    arrays = [dense_batch(2, seed=s) for s in range(2)]
    tensors = [tuple(torch.from_numpy(x) for x in batch) for batch in arrays]
    a, b = stream_fit(tiny_leaf(), arrays), stream_fit(tiny_leaf(), tensors)
    assert_params_equal(params_snapshot(a), params_snapshot(b))


@pytest.mark.parametrize(
    ("batch", "error", "match"),
    [
        (np.zeros((2, 4), dtype=np.int64), ArgumentTypeError, "a batch must be"),
        ((np.zeros(4, dtype=np.int64), np.zeros(4, dtype=np.int64)), ArgumentTypeError, "2-D"),
        (
            (np.zeros((2, 4), dtype=np.int64), np.zeros(3, dtype=np.int64)),
            ArgumentError,
            r"one id per context row \(2\)",
        ),
        (
            (np.zeros((2, BLOCK + 1), dtype=np.int64), np.zeros(2, dtype=np.int64)),
            ArgumentError,
            f"1..{BLOCK} positions",
        ),
        ((np.zeros((2, 4), dtype=np.int64), np.array([0, VOCAB])), TokenIdError, "row 1"),
        ((np.zeros((2, 4)) + 0.5, np.zeros(2, dtype=np.int64)), TokenIdError, "fractional"),
        (
            (
                np.zeros((2, 4), dtype=np.int64),
                np.zeros((2, 3), dtype=np.int64),
                np.ones((2, 4), bool),
            ),
            ArgumentError,
            "targets must have the context's shape",
        ),
        (
            (
                np.zeros((2, 4), dtype=np.int64),
                np.zeros((2, 4), dtype=np.int64),
                np.ones((2, 3), bool),
            ),
            ArgumentError,
            "loss_mask must have",
        ),
        ((np.zeros((2, 4), dtype=bool), np.zeros(2, dtype=np.int64)), ArgumentTypeError, "bool"),
    ],
)
def test_malformed_batches_raise_clear_errors(batch: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        stream_fit(tiny_leaf(), [batch])


def test_log_is_called_every_report_every_steps() -> None:
    lines: list[str] = []
    stream_fit(
        tiny_leaf(), [dense_batch(2, seed=s) for s in range(5)], report_every=2, log=lines.append
    )
    assert [line.split(" |")[0] for line in lines] == ["step 2", "step 4"]
    assert all("loss" in line and "tok/s" in line for line in lines)
    quiet: list[str] = []
    stream_fit(tiny_leaf(), [dense_batch(2)], report_every=0, log=quiet.append)
    assert quiet == []
    with pytest.raises(ArgumentTypeError, match="`log`"):
        stream_fit(tiny_leaf(), [], log="print")  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="`report_every`"):
        stream_fit(tiny_leaf(), [], report_every=-1)


def test_raw_module_is_wrapped_with_a_new_optimizer() -> None:
    module = tiny_leaf().module
    leaf = stream_fit(module, [dense_batch(2)], lr=1e-2)
    assert leaf.module is module and leaf.lr == 1e-2 and _steps(leaf) == 1


def test_read_only_and_strided_batches_are_accepted() -> None:
    ctx, targets, mask = dense_batch(3, seed=4)
    frozen = []
    for array in (ctx, targets, mask):
        view = array.copy()
        view.setflags(write=False)
        frozen.append(view)
    strided = (ctx[::-1].copy()[::-1], targets, mask)  # negative strides
    a = stream_fit(tiny_leaf(), [(ctx, targets, mask)])
    b = stream_fit(tiny_leaf(), [tuple(frozen)])
    c = stream_fit(tiny_leaf(), [strided])
    assert_params_equal(params_snapshot(a), params_snapshot(b))
    assert_params_equal(params_snapshot(a), params_snapshot(c))
