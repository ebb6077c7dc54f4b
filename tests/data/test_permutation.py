"""The keyed Feistel bijection behind ``TokenStream``'s O(1)-memory shuffle."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.data import _permutation
from mixle.data._permutation import _DOMAIN_TAG, _ROUNDS, FeistelPermutation, _mix, feistel_width
from mixle.data._seed_sequence import seed_sequence_state
from mixle.errors import ArgumentError, ArgumentTypeError

EDGE_SIZES = sorted({n for k in range(1, 17) for n in (2**k - 1, 2**k, 2**k + 1)})


def _is_permutation(values: np.ndarray, n: int) -> bool:
    return values.shape == (n,) and bool(np.array_equal(np.sort(values), np.arange(n)))


@pytest.mark.parametrize("n", EDGE_SIZES)
def test_is_a_bijection_at_powers_of_two_and_their_neighbours(n: int) -> None:
    for seed, epoch in ((0, 0), (12345, 7)):
        assert _is_permutation(FeistelPermutation(n, seed, epoch)(np.arange(n)), n)


def test_is_a_bijection_for_every_small_n() -> None:
    for n in range(301):
        assert _is_permutation(FeistelPermutation(n, n, 3)(np.arange(n)), n), n


@given(n=st.integers(0, 5000), seed=st.integers(0, 2**63 - 1), epoch=st.integers(0, 10**6))
def test_is_a_bijection_for_any_key(n: int, seed: int, epoch: int) -> None:
    assert _is_permutation(FeistelPermutation(n, seed, epoch)(np.arange(n)), n)


@pytest.mark.parametrize("k", [3, 8, 16, 31, 62])
def test_width_is_never_one_bit_short(k: int) -> None:
    # The trap: a width from floor(log2(n)) misses n - 1 = 2**k when n = 2**k + 1.
    for n in (2**k - 1, 2**k, 2**k + 1):
        width = feistel_width(n)
        assert width % 2 == 0
        assert 2**width >= n
        assert width == 2 or 2 ** (width - 2) <= n - 1  # the smallest even width
    assert feistel_width(2**k + 1) >= k + 1


def test_large_domain_images_stay_in_range_and_distinct() -> None:
    n = 2**40 + 1
    perm = FeistelPermutation(n, 5, 0)
    positions = np.concatenate([np.arange(20_000), n - 1 - np.arange(20_000)])
    images = perm(positions)
    assert images.min() >= 0 and images.max() < n
    assert np.unique(images).shape[0] == positions.shape[0]


def test_depends_only_on_n_seed_and_epoch() -> None:
    n = 10_000
    base = FeistelPermutation(n, 3, 1)(np.arange(n))
    assert np.array_equal(base, FeistelPermutation(n, 3, 1)(np.arange(n)))
    # Evaluating a subset, in any order and shape, gives the same images.
    picks = np.array([[9999, 0], [17, 4242]])
    assert np.array_equal(FeistelPermutation(n, 3, 1)(picks), base[picks])
    for other in (FeistelPermutation(n, 4, 1), FeistelPermutation(n, 3, 2)):
        assert np.mean(other(np.arange(n)) == base) < 0.01


def test_pinned_images_do_not_change_across_versions() -> None:
    # A regression fixture: resume states written by one mixle version must replay the
    # same order in the next, so the round function and key derivation are frozen.
    assert FeistelPermutation(2**20 + 1, 42, 3)(np.arange(4)).tolist() == [
        858265,
        760437,
        326357,
        88732,
    ]


@pytest.mark.parametrize("n", [2**16 - 1, 2**16, 2**16 + 1, 100_003])
def test_consecutive_outputs_are_uncorrelated(n: int) -> None:
    images = FeistelPermutation(n, 9, 0)(np.arange(n)).astype(np.float64)
    correlation = np.corrcoef(images[:-1], images[1:])[0, 1]
    # For a uniform random permutation the lag-1 correlation is ~N(0, 1/n): 5 sigma.
    assert abs(correlation) < 5 / np.sqrt(n)
    # Positions and images are uncorrelated too (no "mostly identity" order).
    assert abs(np.corrcoef(np.arange(n), images)[0, 1]) < 5 / np.sqrt(n)


@pytest.mark.parametrize("n", [2**14 + 1, 50_000])
def test_every_prefix_covers_position_buckets_uniformly(n: int) -> None:
    images = FeistelPermutation(n, 21, 4)(np.arange(n))
    buckets = 16
    for prefix in (512, 2048, 8192, n):
        counts = np.bincount(images[:prefix] * buckets // n, minlength=buckets)
        expected = prefix / buckets
        chi2 = float(((counts - expected) ** 2 / expected).sum())
        # 15 degrees of freedom: P(chi2 > 50) is about 1e-5.
        assert chi2 < 50, (prefix, counts.tolist())


def test_out_of_range_positions_raise_index_error() -> None:
    perm = FeistelPermutation(10, 0, 0)
    with pytest.raises(IndexError, match="position 10"):
        perm(np.array([3, 10]))
    with pytest.raises(IndexError, match="position -1"):
        perm(np.array([-1]))
    assert perm(np.array([], dtype=np.int64)).shape == (0,)


def test_arguments_are_validated() -> None:
    with pytest.raises(ArgumentError, match="`n` must be a nonnegative integer"):
        FeistelPermutation(-1, 0, 0)
    with pytest.raises(ArgumentTypeError, match="`seed` must be an integer"):
        FeistelPermutation(5, 1.0, 0)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="`epoch` must be an integer"):
        FeistelPermutation(5, 0, True)


@pytest.mark.slow
@pytest.mark.parametrize("k", [17, 18, 20, 22])
def test_is_a_bijection_at_large_powers_of_two_and_their_neighbours(k: int) -> None:
    for n in (2**k - 1, 2**k, 2**k + 1):
        assert _is_permutation(FeistelPermutation(n, k, 1)(np.arange(n)), n), n


# A plain evaluation of the network as it was first written (unfolded keys, no tables,
# no chunks): the definition the fast paths must reproduce bit for bit.
def _reference_images(
    n: int, seed: int, epoch: int, domain: tuple[int, ...], positions: np.ndarray
) -> np.ndarray:
    half = feistel_width(n) // 2
    mask = np.uint64((1 << half) - 1)
    words = [_DOMAIN_TAG, seed, epoch, *domain]
    keys = [np.uint64(k) for k in seed_sequence_state(words, _ROUNDS)]

    def network(values: np.ndarray) -> np.ndarray:
        left, right = values >> np.uint64(half), values & mask
        for key in keys:
            left, right = right, left ^ (_mix(right ^ key) & mask)
        return (left << np.uint64(half)) | right

    out = network(positions.astype(np.uint64))
    while (pending := np.flatnonzero(out >= np.uint64(n))).size:
        out[pending] = network(out[pending])
    return out.astype(np.int64)


@pytest.mark.parametrize(
    "n", [1, 2, 5, 600, 2**14, 2**14 + 1, 244_141, 2**18, 2**20 + 1, 3_000_001]
)
def test_fast_paths_reproduce_the_plain_network(n: int) -> None:
    # Chunks of 2**14, the folded first mixing step and (from 4 x 2**half_bits values)
    # the per-round tables change how the images are computed, never what they are.
    perm = FeistelPermutation(n, 12345, 7, domain=(5, 9))
    images = perm(np.arange(n))
    assert np.array_equal(images, _reference_images(n, 12345, 7, (5, 9), np.arange(n)))
    assert np.array_equal(perm.images(0, n), images)
    assert np.array_equal(perm.inverse(images), np.arange(n))  # tables built by now
    picks = np.random.default_rng(n).integers(0, n, 300)
    fresh = FeistelPermutation(n, 12345, 7, domain=(5, 9))  # few values: no tables
    assert np.array_equal(fresh(picks), images[picks])
    assert np.array_equal(fresh.inverse(images[picks]), picks)


# Sizes around every power of two up to two widths past the small-domain table's.
_SMALL_EDGES = sorted(
    {n for k in range(0, _permutation._SMALL_BITS + 3) for n in (2**k - 1, 2**k, 2**k + 1)}
)


@settings(max_examples=60, deadline=None)
@given(
    n=st.one_of(st.sampled_from(_SMALL_EDGES), st.integers(0, 2**12 + 1)),
    seed=st.integers(0, 2**63 - 1),
    epoch=st.integers(0, 2**63 - 1),
    domain=st.lists(st.integers(1, 2**63 - 1), max_size=2).map(tuple),
    data=st.data(),
)
def test_small_domain_table_is_the_plain_network_cycle_walk(
    n: int, seed: int, epoch: int, domain: tuple[int, ...], data: st.DataObject
) -> None:
    # Domains of up to 2**_SMALL_BITS values answer from one table of the whole walk
    # (built by doubling lookups): the same images as walking each value, bit for bit,
    # forward and backward, for a range, for any positions and any shape.
    perm = FeistelPermutation(n, seed, epoch, domain=domain)
    every = np.arange(n)
    images = perm.images(0, n)
    assert images.dtype == np.int64
    assert np.array_equal(images, _reference_images(n, seed, epoch, domain, every))
    assert np.array_equal(perm.inverse(images), every)
    start = data.draw(st.integers(0, n))
    stop = data.draw(st.integers(start, n))
    assert np.array_equal(perm.images(start, stop), images[start:stop])
    if n:
        picks = np.array(data.draw(st.lists(st.integers(0, n - 1), max_size=12)), np.int64)
        shaped = picks.reshape(-1, 1) if picks.size % 2 else picks.reshape(2, -1)
        fresh = FeistelPermutation(n, seed, epoch, domain=domain)
        assert np.array_equal(fresh(shaped), images[shaped])
        assert np.array_equal(fresh.inverse(images[shaped]), shaped)


def test_small_domain_table_equals_the_chunked_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    # The same permutations with the table switched off (every value walked through
    # the network), at each size around the table's limit.
    for n in (*_SMALL_EDGES, 777, 1000):
        fast = FeistelPermutation(n, 9, 2, domain=(3,))
        expected, inverse = fast.images(0, n), fast.inverse(np.arange(n))
        with monkeypatch.context() as patched:
            patched.setattr(_permutation, "_SMALL_BITS", 0)
            walked = FeistelPermutation(n, 9, 2, domain=(3,))
            assert np.array_equal(walked.images(0, n), expected), n
            assert np.array_equal(walked.inverse(np.arange(n)), inverse), n


def test_small_domain_table_is_kept_and_read_only() -> None:
    perm = FeistelPermutation(21, 0, 1)
    first = perm.images(0, 21)
    first[0] = -1  # the caller's copy: the kept table is not written
    assert perm.images(0, 21)[0] != -1
    assert perm._small(True) is perm._small(True)
    assert not perm._small(True).flags.writeable


@settings(max_examples=40, deadline=None)
@given(
    width=st.sampled_from([40, 58, 60, 62, 64]),
    seed=st.integers(0, 2**63 - 1),
    epoch=st.integers(0, 2**63 - 1),
)
def test_wide_domains_fold_only_while_a_half_fits_30_bits(
    width: int, seed: int, epoch: int
) -> None:
    n = 2 ** (width - 1) + 3  # halves of width / 2 bits: folded up to 60 bits, not above
    if n >= 2**63:
        n = 2**63 - 1
    perm = FeistelPermutation(n, seed, epoch)
    assert perm.width == width
    positions = np.array([0, 1, n - 1, n // 3, 2**31, 2**32 + 5], dtype=np.int64)
    images = perm(positions)
    assert np.array_equal(images, _reference_images(n, seed, epoch, (), positions))
    assert np.array_equal(perm.inverse(images), positions)


@given(n=st.integers(0, 70_000), data=st.data())
@settings(max_examples=40, deadline=None)
def test_images_of_a_range_are_the_images_of_its_positions(n: int, data: st.DataObject) -> None:
    start = data.draw(st.integers(0, n))
    stop = data.draw(st.integers(start, n))
    perm = FeistelPermutation(n, 3, 4, domain=(2, 1))
    assert np.array_equal(perm.images(start, stop), perm(np.arange(start, stop)))


@pytest.mark.parametrize(("start", "stop"), [(-1, 3), (2, 1), (0, 11)])
def test_images_outside_the_domain_are_refused(start: int, stop: int) -> None:
    with pytest.raises(IndexError, match=r"outside the permutation domain \[0, 10\)"):
        FeistelPermutation(10, 0, 0).images(start, stop)
