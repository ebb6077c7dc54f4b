"""A keyed bijection on ``[0, n)`` whose network covers ``n`` values, not ``2**width``.

:class:`MixedRadixPermutation` is a Feistel network over the mixed-radix domain
``Z_a x Z_b`` (``a = ceil(sqrt(n))``, ``b = ceil(n / a)``, so ``n <= a * b < n + a``):
a value ``x`` is the pair ``(x // b, x % b)``, and a round adds a keyed function of
one half to the other modulo that half's radix,

    even rounds: (L in Z_a, R in Z_b) -> (R, (L + F(R)) mod a)
    odd rounds:  (L in Z_b, R in Z_a) -> (R, (L + F(R)) mod b)

so the halves trade radices every round and an even number of rounds maps ``Z_a x
Z_b`` onto itself; each round is a bijection whatever ``F`` is (its inverse subtracts
``F``). Cycle walking restricts it to ``[0, n)``, as for
:class:`~mixle.data._permutation.FeistelPermutation`.

Why not the balanced binary network: that one needs an even bit width, so its domain
``2**width`` is up to ``4 n`` and every value in ``[n, 2**width)`` lies on some walk:
shuffling a whole window of 83,656 documents evaluated it 262,144 times. Here the walk
covers fewer than ``a ~ sqrt(n)`` extra values: about ``n`` evaluations for any ``n``.

``F`` of round ``i`` is the splitmix finaliser of ``half ^ key_i`` reduced modulo the
radix of the half it is added to, tabulated per round (one table of ``b`` or ``a``
values) while the radices are small; the arithmetic gives the same values beyond.
The round keys are the ``SeedSequence`` words of ``(tag, seed, epoch, *domain)``, so
the permutation is a pure function of ``(n, seed, epoch, domain)`` on every platform.
With the numba gather backend (:mod:`mixle._gather`) :meth:`images` runs a compiled
loop of the same arithmetic, bit for bit.
"""

from __future__ import annotations

import math

import numpy as np

from mixle import _gather
from mixle._checks import nonnegative_int
from mixle.data._permutation import _mix, check_domain_range, domain_positions
from mixle.data._seed_sequence import seed_sequence_state

__all__ = ["MixedRadixPermutation", "radices"]

_ROUNDS = 6  # even: the halves are back in (Z_a, Z_b) after the last round
# Distinguishes these keys from every other keyed use of (seed, epoch): "mixle_mr".
_DOMAIN_TAG = 0x6D69786C655F6D72
# Values per pass of the rounds (four uint64 buffers of this size stay in L2 cache).
_CHUNK = 1 << 14
# Radices up to this tabulate their round functions (a table of at most 512 KiB).
_TABLE_MAX = 1 << 16


def radices(n: int) -> tuple[int, int]:
    """``(a, b)`` of the network for a permutation of ``[0, n)``: ``a = ceil(sqrt(n))``
    and ``b = ceil(n / a)``, so ``n <= a * b < n + a`` (``(1, 1)`` for ``n <= 1``)."""
    if n <= 1:
        return 1, 1
    a = math.isqrt(n - 1) + 1
    return a, -(-n // a)


class MixedRadixPermutation:
    """The bijection on ``[0, n)`` keyed by ``(seed, epoch)`` and ``domain``.

    Parameters
    ----------
    n
        Domain size, a nonnegative int below ``2**62``.
    seed, epoch
        Nonnegative ints below ``2**63``: the key.
    domain
        Further nonnegative key words separating one use of ``(seed, epoch)`` from
        another; end it with a nonzero word (``SeedSequence`` pads with zeros).

    Notes
    -----
    Memory: six round keys, and while the radices are at most ``2**16`` one table of
    ``a`` or ``b`` uint64 per round. Evaluating ``m`` positions costs O(m) vectorised
    work (4 array passes per round), walks included: fewer than ``a`` values of the
    network's domain lie at or above ``n``.

    Examples
    --------
    >>> perm = MixedRadixPermutation(10, seed=0, epoch=0)
    >>> sorted(perm(np.arange(10)).tolist()) == list(range(10))
    True
    >>> perm.inverse(perm([3, 7])).tolist()
    [3, 7]
    """

    __slots__ = ("_added", "_halves", "_keys", "_moduli", "_subtracted", "a", "b", "n")

    def __init__(self, n: int, seed: int, epoch: int, *, domain: tuple[int, ...] = ()) -> None:
        self.n = nonnegative_int("n", n)
        if self.n >= 1 << 62:
            raise ValueError(f"`n` must be below 2**62. Got {self.n} instead.")
        words = [nonnegative_int("domain", word) for word in domain]
        seed, epoch = nonnegative_int("seed", seed), nonnegative_int("epoch", epoch)
        self.a, self.b = radices(self.n)
        self._keys = seed_sequence_state([_DOMAIN_TAG, seed, epoch, *words], _ROUNDS)
        # Round i adds F_i(R) modulo the radix of L: a on even rounds, b on odd ones;
        # its input R ranges over the other radix.
        self._moduli = [self.a if i % 2 == 0 else self.b for i in range(_ROUNDS)]
        inputs = [self.b if i % 2 == 0 else self.a for i in range(_ROUNDS)]
        self._added: list[np.ndarray] | None = None
        self._subtracted: list[np.ndarray] | None = None
        # The halves' dtype: uint32 while the round functions are tabulated (halves and
        # their sums stay below 2**18; numpy's passes over half the bytes are ~25% faster).
        self._halves: type[np.unsignedinteger] = np.uint64
        if max(inputs) <= _TABLE_MAX:
            self._halves = np.uint32
            self._added = [
                self._round_function(i, np.arange(size, dtype=np.uint64)).astype(np.uint32)
                for i, size in enumerate(inputs)
            ]

    def _round_function(self, i: int, halves: np.ndarray) -> np.ndarray:
        """``F_i`` at ``halves`` (uint64; overwritten and returned): the splitmix
        finaliser of ``half ^ key_i``, modulo round ``i``'s radix."""
        halves ^= np.uint64(self._keys[i])
        _mix(halves)
        halves %= np.uint64(self._moduli[i])
        return halves

    def _lookup(self, i: int, halves: np.ndarray, out: np.ndarray, forward: bool) -> None:
        """``out = F_i(halves)`` (forward) or ``(-F_i(halves)) mod radix_i`` (backward)."""
        tables = self._added if forward else self._inverse_tables()
        if tables is not None:
            # uint32 halves index as they are (a safe cast); uint64 ones as int64.
            index = halves if halves.dtype == np.uint32 else halves.view(np.int64)
            np.take(tables[i], index, out=out, mode="wrap")
            return
        np.copyto(out, halves)
        self._round_function(i, out)
        if not forward:
            np.subtract(np.uint64(self._moduli[i]), out, out=out)
            self._reduce(out, np.empty_like(out), self._moduli[i])

    def _inverse_tables(self) -> list[np.ndarray] | None:
        """``(radix_i - F_i) mod radix_i`` per round, for the backward rounds (built on
        first use and kept; ``None`` when the round functions are not tabulated)."""
        if self._added is None:
            return None
        if self._subtracted is None:
            subtracted = []
            for i, table in enumerate(self._added):
                negated = np.subtract(table.dtype.type(self._moduli[i]), table)
                self._reduce(negated, np.empty_like(negated), self._moduli[i])
                subtracted.append(negated)
            self._subtracted = subtracted
        return self._subtracted

    @staticmethod
    def _reduce(values: np.ndarray, scratch: np.ndarray, modulus: int) -> None:
        """``values %= modulus`` in place for values below ``2 * modulus``: the smaller
        of ``v`` and ``v - modulus`` as unsigned (the subtraction wraps when ``v`` is
        below the modulus)."""
        np.subtract(values, values.dtype.type(modulus), out=scratch)
        np.minimum(values, scratch, out=values)

    def _network(
        self,
        left: np.ndarray,
        right: np.ndarray,
        forward: bool,
        buffers: tuple[np.ndarray, np.ndarray],
    ) -> tuple[np.ndarray, np.ndarray]:
        """The six rounds over the halves ``(left, right)`` (uint64, in ``Z_a x Z_b``;
        overwritten): the result's halves, which are ``left``, ``right`` and the two
        ``buffers`` in some order (the others hold scratch)."""
        mixed, scratch = buffers
        for i in range(_ROUNDS) if forward else reversed(range(_ROUNDS)):
            if forward:  # (L, R) -> (R, L + F(R))
                self._lookup(i, right, mixed, True)
                mixed += left
            else:  # (L', R') -> (R' - F(L'), L')
                self._lookup(i, left, mixed, False)
                mixed += right
            self._reduce(mixed, scratch, self._moduli[i])
            if forward:
                left, right, mixed = right, mixed, left
            else:
                left, right, mixed = mixed, left, right
        return left, right

    def _values(self, values: np.ndarray, forward: bool, out: np.ndarray) -> np.ndarray:
        """The network's images (or preimages) of ``values`` (uint64 in ``[0, a * b)``)
        into ``out`` (may be ``values``)."""
        size = values.shape[0]
        left, right, mixed, scratch = (np.empty(size, dtype=self._halves) for _ in range(4))
        b = np.uint64(self.b)
        np.floor_divide(values, b, out=left)
        np.multiply(left, b, out=right)
        np.subtract(values, right, out=right)
        left, right = self._network(left, right, forward, (mixed, scratch))
        np.multiply(left, b, out=out)
        out += right
        return out

    def __call__(self, positions: object) -> np.ndarray:
        """Return the images of ``positions`` (integers in ``[0, n)``) as int64, in
        their shape.

        Raises
        ------
        IndexError
            A position lies outside ``[0, n)``.
        """
        return self._walked(positions, True)

    def inverse(self, images: object) -> np.ndarray:
        """Return the positions whose images are ``images`` (``perm.inverse(perm(x))
        == x``): the rounds backwards, walked the same way.

        Raises
        ------
        IndexError
            An image lies outside ``[0, n)``.
        """
        return self._walked(images, False)

    def _walked(self, values: object, forward: bool) -> np.ndarray:
        array = np.asarray(values, dtype=np.int64)
        flat = domain_positions(array, self.n)
        out = np.empty(flat.shape[0], dtype=np.uint64)
        for first in range(0, flat.shape[0], _CHUNK):
            part = out[first : first + _CHUNK]
            self._values(flat[first : first + _CHUNK].astype(np.uint64), forward, part)
        return self._walk(out, forward).view(np.int64).reshape(array.shape)

    def _walk(self, out: np.ndarray, forward: bool) -> np.ndarray:
        """Cycle walking, in place: every value of ``out`` at or above ``n`` is passed
        through the network again until it lands below ``n`` (fewer than ``a`` values
        of the network's domain are that high)."""
        limit = np.uint64(self.n)
        pending = np.flatnonzero(out >= limit)
        while pending.size:
            out[pending] = self._values(out[pending], forward, np.empty(pending.size, np.uint64))
            pending = pending[out[pending] >= limit]
        return out

    def images(self, start: int, stop: int) -> np.ndarray:
        """Return the images of positions ``start .. stop - 1`` as int64 (one fresh
        array): ``self(np.arange(start, stop))`` without building the positions.

        Raises
        ------
        IndexError
            ``[start, stop)`` is not inside ``[0, n]`` or ``stop < start``.
        """
        check_domain_range(start, stop, self.n)
        out = np.empty(stop - start, dtype=np.uint64)
        if not out.size:
            return out.view(np.int64)
        kernel = _gather.mixed_radix_kernel()
        if kernel is not None and self._added is not None:
            params = np.array([start, self.n, self.b], dtype=np.uint64)
            kernel(out, params, self._kernel_tables(), np.array(self._moduli, dtype=np.uint64))
            return out.view(np.int64)
        self._ramp_images(start, out)
        return self._walk(out, True).view(np.int64)

    def _kernel_tables(self) -> np.ndarray:
        """The round tables as one uint64 array of ``(rounds, max(a, b))``, each padded
        with zeros (never read) to the longer radix: the compiled loop's form."""
        assert self._added is not None
        stacked = np.zeros((_ROUNDS, max(self.a, self.b)), dtype=np.uint64)
        for i, table in enumerate(self._added):
            stacked[i, : table.shape[0]] = table
        return stacked

    def _ramp_images(self, start: int, out: np.ndarray) -> None:
        """The network's images of ``start, start + 1, ...`` into ``out`` (not walked).

        While ``b`` fits a chunk, chunks hold whole multiples of ``b`` positions, so
        every chunk's halves are two patterns built once (the quotients offset by the
        chunk's first quotient): no division per value.
        """
        count, b = out.shape[0], self.b
        if b > _CHUNK:
            ramp = np.arange(min(_CHUNK, count), dtype=np.uint64)
            for first in range(0, count, _CHUNK):
                part = out[first : first + _CHUNK]
                np.add(ramp[: part.shape[0]], np.uint64(start + first), out=part)
                self._values(part, True, part)
            return
        chunk = min(_CHUNK // b * b, count)
        halves = self._halves
        phase = np.arange(start % b, start % b + chunk, dtype=halves)
        quotients = phase // halves(b)
        remainders = phase - quotients * halves(b)
        buffers = [np.empty(chunk, dtype=halves) for _ in range(4)]
        for first in range(0, count, chunk):
            part = out[first : first + chunk]
            size = part.shape[0]
            left, right, mixed, scratch = (buffer[:size] for buffer in buffers)
            np.add(quotients[:size], halves((start + first) // b), out=left)
            np.copyto(right, remainders[:size])
            high, low = self._network(left, right, True, (mixed, scratch))
            np.multiply(high, np.uint64(b), out=part)
            part += low

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return f"MixedRadixPermutation(n={self.n}, radices=({self.a}, {self.b}))"
