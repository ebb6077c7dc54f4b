"""A keyed pseudo-random bijection on ``[0, n)`` that costs O(1) memory.

:class:`FeistelPermutation` maps a batch of positions to their images under a
permutation determined by ``(n, seed, epoch)`` alone, without ever building the
permutation: a balanced Feistel network over ``2 * half_bits`` bits is a bijection on
``[0, 2**(2 * half_bits))``, and *cycle walking* (re-encrypting any image ``>= n`` until
it lands below ``n``) restricts it to a bijection on ``[0, n)``.

Why the bit width is safe: the network must cover every value below ``n``, i.e. need
``2**width >= n``, so ``width >= (n - 1).bit_length()``, rounded up to an even number
for the balanced split. One bit fewer (a tempting ``n.bit_length() - 1`` or
``floor(log2(n))``) drops ``n - 1`` when ``n = 2**k + 1`` and the walk then repeats
indices. Since ``2**width < 4 * n``, a walk takes fewer than 4 steps on average.

All arithmetic is vectorised numpy on uint64 arrays: overflow in array multiplication
wraps modulo ``2**64`` without warnings, which is what the mixing function relies on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from mixle._checks import nonnegative_int
from mixle.data._seed_sequence import seed_sequence_state

__all__ = ["FeistelPermutation", "feistel_width"]

_ROUNDS = 6
# Distinguishes these keys from any other use of the same (seed, epoch) pair.
_DOMAIN_TAG = 0x6D69786C655F6673  # "mixle_fs"
_MUL_1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL_2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
# Values per pass of the rounds: four uint64 buffers of this size are 512 KiB, in the L2
# cache of a core here (1 MiB; 2**14 and 2**15 measured alike on 262,144 values, 2**16
# and up slower, and each 4 KiB of buffer is a page fault in a fresh process).
_CHUNK = 1 << 14
# A round's F has only 2**half_bits inputs: tabulated (one table per round) once a call
# evaluates at least `_TABLE_USES` values per table entry, for halves of up to
# `_TABLE_BITS` bits (a 512 KiB table), a lookup then replaces its eight array passes.
_TABLE_BITS = 16
_TABLE_USES = 4
# Domains of up to 2**_SMALL_BITS values are walked through one table of the whole
# restricted permutation (see `_small`), built on first use and kept (16 KiB at most,
# both directions). At 2**12 a single inverse (the table of the other direction) cost
# more than the walk it replaced.
_SMALL_BITS = 10


def feistel_width(n: int) -> int:
    """Return the even bit width of the Feistel domain for a permutation of ``[0, n)``.

    The smallest even ``width >= max((n - 1).bit_length(), 2)``, so ``2**width >= n``.
    """
    width = max((max(n, 1) - 1).bit_length(), 2)
    return width + (width & 1)


def _mix(values: np.ndarray, scratch: np.ndarray | None = None) -> np.ndarray:
    """A splitmix64-style finaliser, in place: a fast, well-avalanching uint64 -> uint64
    map of ``values`` (returned), with ``scratch`` (same shape; allocated when not
    given) overwritten.

    In place because a fresh process pays a page fault per 4 KiB of every new
    temporary: six rounds of temporaries over a 262,144-position window were ~5x the
    arithmetic's cost on the first batch.
    """
    if scratch is None:
        scratch = np.empty_like(values)
    np.right_shift(values, _S30, out=scratch)
    values ^= scratch
    return _mix_tail(values, scratch)


def _mix_tail(values: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """:func:`_mix` after its first step (``values ^= values >> 30``), in place."""
    values *= _MUL_1
    np.right_shift(values, _S27, out=scratch)
    values ^= scratch
    values *= _MUL_2
    np.right_shift(values, _S31, out=scratch)
    values ^= scratch
    return values


def domain_positions(array: np.ndarray, n: int) -> np.ndarray:
    """``array`` (int64) flattened, each value checked to lie in a bijection's domain
    ``[0, n)``.

    Raises
    ------
    IndexError
        A value lies outside ``[0, n)`` (the first one is named).
    """
    flat = array.reshape(-1)
    if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= n):
        bad = flat[(flat < 0) | (flat >= n)][0]
        raise IndexError(f"position {int(bad)} is outside the permutation domain [0, {n}).")
    return flat


def check_domain_range(start: int, stop: int, n: int) -> None:
    """Refuse a position range ``[start, stop)`` that is not inside ``[0, n]``.

    Raises
    ------
    IndexError
        ``[start, stop)`` is not inside ``[0, n]`` or ``stop < start``.
    """
    if not 0 <= start <= stop <= n:
        raise IndexError(
            f"positions [{start}, {stop}) are outside the permutation domain [0, {n})."
        )


class FeistelPermutation:
    """The bijection on ``[0, n)`` keyed by ``(seed, epoch)`` (and an optional ``domain``).

    Parameters
    ----------
    n
        Domain size, a nonnegative int below ``2**63``.
    seed, epoch
        Nonnegative ints below ``2**63``; the round keys are derived from them as
        :class:`numpy.random.SeedSequence` derives its state (without importing it), so the permutation is identical on every
        platform and in every process.
    domain
        Further key words (nonnegative ints) that separate one use of the same
        ``(seed, epoch)`` from another; the empty default keeps the keys of every
        permutation made before the parameter existed. End it with a nonzero word:
        ``SeedSequence`` pads its entropy with zeros, so a trailing ``0`` collides with
        the shorter key.

    Notes
    -----
    Memory is O(1) (six round keys); evaluating ``m`` positions costs O(m) vectorised
    work, times the expected cycle-walk length (< 4), in chunks of ``2**15`` positions
    through four reused buffers: one fresh array (the result) per call.

    Examples
    --------
    >>> perm = FeistelPermutation(10, seed=0, epoch=0)
    >>> sorted(perm(np.arange(10)).tolist()) == list(range(10))
    True
    """

    __slots__ = ("_folded", "_half_bits", "_keys", "_mask", "_resolved", "_tables", "n", "width")

    def __init__(self, n: int, seed: int, epoch: int, *, domain: tuple[int, ...] = ()) -> None:
        self.n = nonnegative_int("n", n)
        seed = nonnegative_int("seed", seed)
        epoch = nonnegative_int("epoch", epoch)
        words = [nonnegative_int("domain", word) for word in domain]
        self.width = feistel_width(self.n)
        self._half_bits = np.uint64(self.width // 2)
        self._mask = np.uint64((1 << (self.width // 2)) - 1)
        # numpy's SeedSequence keys, computed without importing numpy.random.
        state = seed_sequence_state([_DOMAIN_TAG, seed, epoch, *words], _ROUNDS)
        self._keys = [np.uint64(k) for k in state]
        # A round's F is `_mix(half ^ key)`, whose first step is `z ^= z >> 30`. A half
        # below 2**30 has no bit at 30 or above, so `(half ^ key) >> 30 == key >> 30`
        # and that step folds into the key: `F = _mix_tail(half ^ (key ^ key >> 30))`,
        # bit for bit, two array passes fewer per round.
        self._folded = self.width // 2 <= 30
        if self._folded:
            self._keys = [np.uint64(k ^ (k >> 30)) for k in state]
        self._tables: list[np.ndarray] | None = None
        # The whole permutation and its inverse of a small domain (see `_small`).
        self._resolved: dict[bool, np.ndarray] = {}

    def _round_tables(self) -> list[np.ndarray]:
        """Each round's ``F`` at every half value (``2**half_bits`` uint64 per round key,
        in key order), built on first use and kept."""
        tables = self._tables
        if tables is None:
            tables = []
            for key in self._keys:
                table = np.arange(1 << int(self._half_bits), dtype=np.uint64)
                table ^= key
                _mix_tail(table, np.empty_like(table)) if self._folded else _mix(table)
                table &= self._mask
                tables.append(table)
            self._tables = tables
        return tables

    def _network(
        self,
        values: np.ndarray,
        forward: bool,
        out: np.ndarray | None = None,
        buffers: tuple[np.ndarray, ...] | None = None,
    ) -> np.ndarray:
        """The Feistel rounds over ``values`` (uint64, not modified): forward ``(L, R) ->
        (R, L ^ F(R ^ k))`` with the keys in order, backward its inverse. The result
        goes to ``out`` (a fresh array when not given; it may be ``values`` itself);
        ``buffers`` are four uint64 scratch arrays of ``values``' size at least
        (allocated when not given). With the round tables built (:meth:`_round_tables`)
        a round's ``F`` is a lookup in its table instead of the mixing arithmetic."""
        size = values.shape[0]
        if buffers is None:
            buffers = tuple(np.empty(size, dtype=np.uint64) for _ in range(4))
        left, right, mixed, scratch = (buffer[:size] for buffer in buffers)
        np.right_shift(values, self._half_bits, out=left)
        np.bitwise_and(values, self._mask, out=right)
        keys = self._keys if forward else self._keys[::-1]
        tables = self._tables
        if tables is not None and not forward:
            tables = tables[::-1]
        for number, key in enumerate(keys):
            source, other = (right, left) if forward else (left, right)
            if tables is not None:
                # Halves are below 2**32: their int64 view indexes the table.
                np.take(tables[number], source.view(np.int64), out=mixed, mode="wrap")
            else:
                np.bitwise_xor(source, key, out=mixed)
                if self._folded:
                    _mix_tail(mixed, scratch)
                else:
                    _mix(mixed, scratch)
                mixed &= self._mask
            mixed ^= other
            # forward: the new right is `mixed`, the new left the old right; backward:
            # the new left is `mixed`, the new right the old left. `other` is free.
            if forward:
                left, right, mixed = right, mixed, other
            else:
                left, right, mixed = mixed, left, other
        if out is None:
            out = np.empty(size, dtype=np.uint64)
        np.left_shift(left, self._half_bits, out=out)
        out |= right
        return out

    def _encrypt(self, values: np.ndarray, **kwargs: Any) -> np.ndarray:
        return self._network(values, True, **kwargs)

    def _decrypt(self, values: np.ndarray, **kwargs: Any) -> np.ndarray:
        return self._network(values, False, **kwargs)

    def __call__(self, positions: Any) -> np.ndarray:
        """Return the images of ``positions`` (integers in ``[0, n)``) as int64.

        Raises
        ------
        IndexError
            A position lies outside ``[0, n)``.
        """
        return self._walk(positions, True)

    def inverse(self, images: Any) -> np.ndarray:
        """Return the positions whose images are ``images`` (integers in ``[0, n)``).

        ``perm.inverse(perm(x)) == x``: the network run backwards, cycle-walked the
        same way (the walk of an image retraces its forward walk).

        Raises
        ------
        IndexError
            An image lies outside ``[0, n)``.
        """
        return self._walk(images, False)

    def images(self, start: int, stop: int) -> np.ndarray:
        """Return the images of positions ``start, start + 1, ..., stop - 1`` as int64:
        ``self(np.arange(start, stop))`` without building the positions.

        Raises
        ------
        IndexError
            ``[start, stop)`` is not inside ``[0, n]`` or ``stop < start``.
        """
        check_domain_range(start, stop, self.n)
        if self.width <= _SMALL_BITS:
            return self._small(True)[start:stop].copy()
        count = stop - start
        ramp = np.arange(min(_CHUNK, count), dtype=np.uint64)

        def fill(first: int, part: np.ndarray) -> np.ndarray:
            # The network reads its input before writing its output: `part` is both.
            return np.add(ramp[: part.shape[0]], np.uint64(start + first), out=part)

        return self._chunked(count, fill, self._encrypt)

    def _walk(self, values: Any, forward: bool) -> np.ndarray:
        array = np.asarray(values, dtype=np.int64)
        flat = domain_positions(array, self.n)
        if self.width <= _SMALL_BITS:
            return self._small(forward).take(array)
        source = flat.view(np.uint64) if flat.flags.c_contiguous else flat.astype(np.uint64)
        network = self._encrypt if forward else self._decrypt

        def fill(first: int, part: np.ndarray) -> np.ndarray:
            return source[first : first + part.shape[0]]

        return self._chunked(source.shape[0], fill, network).reshape(array.shape)

    def _small(self, forward: bool) -> np.ndarray:
        """The cycle-walked image of every value of ``[0, n)`` (``forward``) or its
        preimage, int64, for a domain of at most ``2**_SMALL_BITS`` values: built on
        first use and kept (a block order's 21 blocks walked value by value cost ~25
        network calls of Python overhead, 0.2-0.7 ms; this, a handful of calls).

        Bit for bit the walk: the network's table ``T`` over ``[0, 2**width)`` (one
        call), ``F(y) = y`` below ``n`` and ``T(y)`` above (a value that arrived stays),
        and the walk of ``x`` is ``F**m(T(x))`` for any ``m`` at least its length:
        ``F`` composed with itself doubles ``m`` per lookup, until every walk of
        ``[0, n)`` has arrived (each in-range value's cycle holds it, so it arrives).
        """
        resolved = self._resolved.get(forward)
        if resolved is None:
            n = self.n
            table = self._network(np.arange(1 << self.width, dtype=np.uint64), forward)
            table = table.view(np.int64)  # below 2**_SMALL_BITS
            stops = table.copy()
            stops[:n] = np.arange(n, dtype=np.int64)
            resolved = table[:n].copy()
            while n and int(resolved.max()) >= n:
                stops = stops.take(stops)
                resolved = stops.take(table[:n])
            resolved.setflags(write=False)
            self._resolved[forward] = resolved
        return resolved

    def _chunked(
        self,
        count: int,
        fill: Callable[[int, np.ndarray], np.ndarray],
        network: Callable[..., np.ndarray],
    ) -> np.ndarray:
        """The cycle-walked images of ``count`` values, ``fill(first, part)`` giving the
        inputs of ``part = out[first : first + len(part)]`` (written there or not)."""
        if (
            self._tables is None
            and int(self._half_bits) <= _TABLE_BITS
            and count >= _TABLE_USES << int(self._half_bits)
        ):
            self._round_tables()
        out = np.empty(count, dtype=np.uint64)
        # The rounds run over chunks of `_CHUNK` values through four reused buffers
        # (they stay in cache), so the whole call writes one fresh array, the result (a
        # fresh process pays a page fault per 4 KiB of every new array: five full-size
        # buffers were most of the cost of a 262,144-position window).
        chunk = max(min(_CHUNK, count), 1)
        buffers = tuple(np.empty(chunk, dtype=np.uint64) for _ in range(4))
        for first in range(0, count, chunk):
            part = out[first : first + chunk]
            network(fill(first, part), out=part, buffers=buffers)
        # Cycle walking: the network permutes [0, 2**width); an image >= n is passed
        # through it again until it falls below n. Each walk stays on its own cycle, so
        # distinct inputs keep distinct outputs. Walked over the whole result at once
        # (a few network calls per step, not a few per chunk).
        limit = np.uint64(self.n)
        pending = np.flatnonzero(out >= limit)
        while pending.size:
            for first in range(0, pending.shape[0], chunk):
                picked = pending[first : first + chunk]
                out[picked] = network(out[picked], buffers=buffers)
            pending = pending[out[pending] >= limit]
        return out.view(np.int64)  # every image is below n < 2**63

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return f"FeistelPermutation(n={self.n}, width={self.width})"
