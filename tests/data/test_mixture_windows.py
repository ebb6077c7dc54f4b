"""``Mixture(objective="windows")``: the ``TokenStream`` windows objective over a mixture.

(Concatenation over ranks and resume at every step are tested for both objectives in
``test_mixture.py``.)

Every window is drawn from its source's endless stream of Feistel-shuffled windows; the
exact schedule decides the source of every global window, so every prefix of every
batch carries the mix; the cursor resumes in O(1) with any world size.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.data import Mixture, MixturePhase, MixtureSource, TokenStream
from mixle.data._mixture_source import source_seed
from mixle.data._permutation import FeistelPermutation
from mixle.errors import ArgumentError, ArgumentTypeError, StateMismatchError
from tests.data.resume_helpers import assert_items_equal

ROOT = Path(__file__).resolve().parents[2]
BLOCK = 6


def _docs(base: int, count: int, seed: int) -> list[np.ndarray]:
    """Documents whose concatenation is ``base, base + 1, ...``: a window names its start."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 25, count)
    edges = np.concatenate([[0], np.cumsum(lengths)]) + base
    return [np.arange(a, b, dtype=np.int64) for a, b in pairwise(edges)]


WEB, CODE, MATH = _docs(0, 30, 1), _docs(10_000, 8, 2), _docs(20_000, 3, 3)
BASES = (0, 10_000, 20_000)


def _mixture(weights: tuple[float, ...] = (0.6, 0.3, 0.1), **kwargs: object) -> Mixture:
    options: dict[str, object] = {"block": BLOCK, "batch_size": 4, "seed": 7}
    options.update({"objective": "windows", **kwargs})
    sources = [
        MixtureSource(docs, weight, name)
        for docs, weight, name in zip(
            (WEB, CODE, MATH), weights, ("web", "code", "math"), strict=False
        )
    ]
    return Mixture(sources, **options)  # type: ignore[arg-type]


def _stream(docs: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(docs)


def test_windows_come_from_each_sources_feistel_shuffled_stream() -> None:
    mixture = _mixture()
    count = 900
    context, targets, sources = mixture.rows_at(0, count)
    assert context.shape == (count, BLOCK) and targets.shape == sources.shape == (count,)
    assert context.dtype == targets.dtype == sources.dtype == np.int64
    for index, (name, docs) in enumerate((("web", WEB), ("code", CODE), ("math", MATH))):
        stream = _stream(docs)
        windows = len(stream) - BLOCK
        assert mixture.rows[index].rows_per_epoch == windows
        mine = np.flatnonzero(sources == index)
        starts = context[mine, 0] - BASES[index]
        for k, start in enumerate(starts.tolist()):
            assert_items_equal(context[mine[k]], stream[start : start + BLOCK])
            assert targets[mine[k]] == stream[start + BLOCK]
        seed = source_seed(7, name, mixture.rows[index].fingerprint)
        epochs = len(mine) // windows
        assert epochs >= 1
        orders = []
        for epoch in range(epochs):
            got = starts[epoch * windows : (epoch + 1) * windows]
            expected = FeistelPermutation(windows, seed, epoch)(np.arange(windows))
            assert_items_equal(got, expected)
            assert sorted(got.tolist()) == list(range(windows))  # every window once
            orders.append(got.tolist())
        if len(orders) > 1:
            assert orders[0] != orders[1]  # upsampled by a reshuffled repeat


@settings(max_examples=30, deadline=None)
@given(
    weights=st.one_of(
        st.lists(st.integers(1, 60).map(float), min_size=1, max_size=3),
        st.lists(st.floats(0.001, 1.0), min_size=1, max_size=3),
        st.sampled_from([[0.999, 0.001], [0.001, 0.999, 0.5], [1e-4, 1.0]]),
    ),
    batch_size=st.integers(1, 7),
    world_size=st.integers(1, 3),
)
def test_every_prefix_of_windows_carries_the_mix(
    weights: list[float], batch_size: int, world_size: int
) -> None:
    """Counted from the source ids of the batches the ranks receive: after every prefix of
    ``t`` global windows each source's count is within one window of ``weight * t``."""
    ranks = [
        iter(_mixture(tuple(weights), batch_size=batch_size, rank=r, world_size=world_size))
        for r in range(world_size)
    ]
    ids = np.concatenate(
        [part[-1] for _ in range(-(-300 // (batch_size * world_size))) for part in map(next, ranks)]
    )
    schedule = _mixture(tuple(weights)).schedule.phases[0]
    shares = np.array(schedule.counts, dtype=np.float64) / schedule.period
    counts = np.cumsum(ids[:, None] == np.arange(len(weights)), axis=0)
    t = np.arange(1, len(ids) + 1)[:, None]
    assert np.abs(counts - t * shares).max() < 1
    exact = np.array(weights) / sum(weights)
    assert np.abs(shares - exact).max() <= 1 / 65536


def test_resume_is_constant_time_in_the_row() -> None:
    mixture = _mixture()
    far = 10**15 + 3
    mixture.load_state_dict({**mixture.state_dict(), "row": far})
    context, targets, sources = next(iter(mixture))
    assert_items_equal((context, targets, sources), _mixture().rows_at(far, far + 4))


def test_phases_and_accounting_count_windows() -> None:
    mixture = _mixture(phases=[MixturePhase(40, {"web": 0.5, "math": 0.5})])
    _, _, sources = mixture.rows_at(0, 120)
    accounts = mixture.accounting(120)
    for index, account in enumerate(accounts):
        assert account.rows == account.real_tokens == int((sources == index).sum())
        windows = mixture.rows[index].rows_per_epoch
        assert account.epochs_started == -(-account.rows // windows)
    assert accounts[1].rows == int((sources[:40] == 1).sum())  # code stops at row 40
    budget = mixture.budget(steps=30)
    assert [b.tokens for b in budget] == [a.rows for a in accounts]


def test_packed_and_windows_states_do_not_mix() -> None:
    windows = _mixture()
    packed = _mixture(objective="packed")
    with pytest.raises(
        StateMismatchError, match="objective in checkpoint: '<absent>' / in stream: 'windows'"
    ):
        windows.load_state_dict(packed.state_dict())
    with pytest.raises(StateMismatchError, match="objective in checkpoint: 'windows'"):
        packed.load_state_dict(windows.state_dict())


def test_bad_windows_arguments_raise_before_any_batch() -> None:
    with pytest.raises(ArgumentError, match="document_ids=True` needs objective='packed'"):
        _mixture(document_ids=True)
    with pytest.raises(ArgumentError, match="`objective` must be one of 'packed', 'windows'"):
        Mixture([MixtureSource(WEB, 1.0, "web")], block=BLOCK, objective="rows")
    with pytest.raises(ArgumentTypeError, match="objective='windows'"):
        TokenStream(_mixture(objective="packed"), BLOCK, 4)  # type: ignore[arg-type]
    tiny = [np.arange(3), np.arange(2)]
    with pytest.raises(ArgumentError, match="source 'tiny' is too small for the windows objective"):
        Mixture(
            [MixtureSource(WEB, 1.0, "web"), MixtureSource(tiny, 1.0, "tiny")],
            block=BLOCK,
            objective="windows",
        )


_DIGEST = """
import hashlib, sys
import numpy as np
from tests.data.test_mixture_windows import _mixture
digest = hashlib.sha256()
stream = iter(_mixture(rank=1, world_size=2, batch_size=3))
for _ in range(40):
    for array in next(stream):
        digest.update(np.ascontiguousarray(array).tobytes())
print(digest.hexdigest())
"""


def test_windows_are_identical_in_another_process() -> None:
    digest = hashlib.sha256()
    stream = iter(_mixture(rank=1, world_size=2, batch_size=3))
    for _ in range(40):
        for array in next(stream):
            digest.update(np.ascontiguousarray(array).tobytes())
    completed = subprocess.run(
        [sys.executable, "-c", _DIGEST],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert completed.stdout.strip() == digest.hexdigest()
