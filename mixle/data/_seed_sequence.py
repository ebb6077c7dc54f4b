"""``numpy.random.SeedSequence(entropy).generate_state(n, np.uint64)`` in plain Python.

The Feistel orders derive their round keys from a ``SeedSequence``; importing
``numpy.random`` for it costs 20-40 ms of CPU in a fresh process (measured on the
loaded 2-core machine), most of a first batch's budget. This module computes the same
words with Python integers: numpy's algorithm (``numpy/random/bit_generator.pyx``:
the entropy split into 32-bit words, a pool of four mixed by ``hashmix`` / ``mix``,
then hashed out), bit for bit; a test compares it with numpy's over many inputs.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["seed_sequence_state"]

_MASK32 = 0xFFFFFFFF
_POOL_SIZE = 4
_INIT_A = 0x43B0D7E5
_MULT_A = 0x931E8875
_INIT_B = 0x8B51F9DD
_MULT_B = 0x58F38DED
_MIX_MULT_L = 0xCA01F9DD
_MIX_MULT_R = 0x4973F715
_XSHIFT = 16


def _words(value: int) -> list[int]:
    """A nonnegative int as little-endian 32-bit words (``[0]`` for zero), as numpy
    splits each entry of a ``SeedSequence``'s entropy."""
    if value == 0:
        return [0]
    words = []
    while value:
        words.append(value & _MASK32)
        value >>= 32
    return words


class _Hash:
    """numpy's ``hashmix``: a multiplier that advances with every value it hashes."""

    def __init__(self, constant: int, multiplier: int) -> None:
        self.constant, self.multiplier = constant, multiplier

    def __call__(self, value: int) -> int:
        value ^= self.constant
        self.constant = (self.constant * self.multiplier) & _MASK32
        value = (value * self.constant) & _MASK32
        return value ^ (value >> _XSHIFT)


def _mix(x: int, y: int) -> int:
    result = (_MIX_MULT_L * x - _MIX_MULT_R * y) & _MASK32
    return result ^ (result >> _XSHIFT)


def seed_sequence_state(entropy: Sequence[int], count: int) -> list[int]:
    """``SeedSequence(list(entropy)).generate_state(count, dtype=np.uint64)`` as ints.

    ``entropy`` holds nonnegative ints (each split into 32-bit words as numpy does).
    """
    assembled = [word for value in entropy for word in _words(value)]
    hashed = _Hash(_INIT_A, _MULT_A)
    pool = [hashed(assembled[i] if i < len(assembled) else 0) for i in range(_POOL_SIZE)]
    for source in range(_POOL_SIZE):
        for target in range(_POOL_SIZE):
            if source != target:
                pool[target] = _mix(pool[target], hashed(pool[source]))
    for source in range(_POOL_SIZE, len(assembled)):
        for target in range(_POOL_SIZE):
            pool[target] = _mix(pool[target], hashed(assembled[source]))
    out = _Hash(_INIT_B, _MULT_B)
    words = [out(pool[i % _POOL_SIZE]) for i in range(2 * count)]
    return [words[2 * i] | (words[2 * i + 1] << 32) for i in range(count)]
