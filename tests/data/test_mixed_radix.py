"""MixedRadixPermutation: a keyed bijection whose network covers about n values."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle import _gather
from mixle.data import _mixed_radix
from mixle.data._mixed_radix import MixedRadixPermutation, radices
from mixle.errors import ArgumentError

EDGES = [0, 1, 2, 3, 4, 5, 8, 9, 10, 15, 16, 17, 99, 100, 101, 1021, 4096, 83_656]


@pytest.mark.parametrize("n", EDGES)
def test_every_position_has_one_image_and_the_inverse_undoes_it(n: int) -> None:
    perm = MixedRadixPermutation(n, seed=3, epoch=1, domain=(5,))
    images = perm.images(0, n)
    assert images.dtype == np.int64
    assert np.array_equal(np.sort(images), np.arange(n))
    assert np.array_equal(perm(np.arange(n)), images)
    assert np.array_equal(perm.inverse(images), np.arange(n))
    assert len(perm) == n


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(1, 3000),
    seed=st.integers(0, 2**63 - 1),
    epoch=st.integers(0, 2**20),
    data=st.data(),
)
def test_images_of_a_range_are_the_images_of_its_positions(
    n: int, seed: int, epoch: int, data: st.DataObject
) -> None:
    perm = MixedRadixPermutation(n, seed, epoch)
    start = data.draw(st.integers(0, n))
    stop = data.draw(st.integers(start, n))
    assert np.array_equal(perm.images(start, stop), perm(np.arange(start, stop)))
    picked = np.array(data.draw(st.lists(st.integers(0, n - 1), max_size=20)), dtype=np.int64)
    assert np.array_equal(perm.inverse(perm(picked)), picked)
    assert perm(picked.reshape(-1, 1)).shape == (len(picked), 1)


@pytest.mark.parametrize("n", [1, 2, 3, 10, 11, 1000, 65_537, 1 << 20, (1 << 40) + 3])
def test_the_radices_cover_n_with_less_than_one_row_to_spare(n: int) -> None:
    a, b = radices(n)
    assert n <= a * b < n + a
    assert abs(a - b) <= 1


def test_the_arithmetic_round_functions_are_the_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    # Radices above 2**16 compute F instead of tabulating it: the same values.
    tabulated = MixedRadixPermutation(5000, seed=9, epoch=4)
    monkeypatch.setattr(_mixed_radix, "_TABLE_MAX", 0)
    computed = MixedRadixPermutation(5000, seed=9, epoch=4)
    assert computed._added is None and tabulated._added is not None
    images = tabulated.images(0, 5000)
    assert np.array_equal(computed.images(0, 5000), images)
    assert np.array_equal(computed.inverse(images[::-1]), np.arange(5000)[::-1])


def test_a_ramp_wider_than_a_chunk_is_divided_per_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = MixedRadixPermutation(20_000, seed=1, epoch=0).images(37, 19_990)
    monkeypatch.setattr(_mixed_radix, "_CHUNK", 64)  # b = 142 > 64: no patterns
    assert np.array_equal(
        MixedRadixPermutation(20_000, seed=1, epoch=0).images(37, 19_990), expected
    )
    monkeypatch.setattr(_mixed_radix, "_CHUNK", 300)  # two rows of b per chunk
    assert np.array_equal(
        MixedRadixPermutation(20_000, seed=1, epoch=0).images(37, 19_990), expected
    )


@pytest.mark.skipif(not _gather.numba_available(), reason="pip install 'mixle[fast]'")
@pytest.mark.parametrize("n", [2, 3, 17, 1000, 83_656, 262_144])
def test_the_compiled_images_are_the_numpy_ones_bit_for_bit(n: int) -> None:
    perm = MixedRadixPermutation(n, seed=11, epoch=2, domain=(3, 7))
    previous = _gather.set_gather_backend("numpy")
    try:
        expected = perm.images(0, n)
        _gather.set_gather_backend("numba")
        assert _gather.mixed_radix_kernel() is not None
        assert np.array_equal(perm.images(0, n), expected)
        assert np.array_equal(perm.images(n // 3, n), expected[n // 3 :])
    finally:
        _gather.set_gather_backend(previous)


def test_the_key_separates_orders_and_is_pinned() -> None:
    def images(seed: int, epoch: int, domain: tuple[int, ...] = ()) -> np.ndarray:
        return MixedRadixPermutation(1000, seed, epoch, domain=domain).images(0, 1000)

    assert np.array_equal(images(1, 2), images(1, 2))
    others = [images(2, 2), images(1, 3), images(1, 2, (1,))]
    assert not any(np.array_equal(images(1, 2), other) for other in others)
    # The blocks order's version 2 is built on these images: a change here changes
    # every state saved with it.
    digest = hashlib.sha256(images(1, 2).tobytes()).hexdigest()[:16]
    assert digest == "5c596914d6367591"


def test_positions_outside_the_domain_and_bad_keys_are_refused() -> None:
    perm = MixedRadixPermutation(10, seed=0, epoch=0)
    for bad in ([10], [-1]):
        with pytest.raises(IndexError, match="outside the permutation domain"):
            perm(bad)
        with pytest.raises(IndexError, match="outside the permutation domain"):
            perm.inverse(bad)
    with pytest.raises(IndexError):
        perm.images(3, 11)
    with pytest.raises(ArgumentError, match="seed"):
        MixedRadixPermutation(10, seed=-1, epoch=0)
    with pytest.raises(ValueError, match="2\\*\\*62"):
        MixedRadixPermutation(1 << 62, seed=0, epoch=0)
    assert perm.images(4, 4).shape == (0,)
    assert repr(perm) == "MixedRadixPermutation(n=10, radices=(4, 3))"
