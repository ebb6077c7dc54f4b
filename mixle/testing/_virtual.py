"""VirtualDocuments: 10^10-10^11 documents that exist only as a function of their index.

A scale test needs a collection far larger than any disk, whose every read is cheap and
whose cumulative token offsets at any document index are answered in O(1), so that a
plan can be driven at 10^11 documents and shown never to ask for one value per
document. Lengths and tokens are hashes of the index (splitmix64, keyed by ``seed``);
nothing is stored.

Lengths in closed form
----------------------
Document ``i`` has ``mean_length + sum_l s_l(i) * d_l(i >> (l + 1))`` tokens, summed
over the levels ``l`` whose amplitude ``a_l = (spread >> l) - (spread >> (l + 1))`` is
positive: ``d_l(b)`` is a hash of ``(seed, l, b)`` reduced to ``[0, a_l]`` and the sign
``s_l(i)`` is ``+1`` when bit ``l`` of ``i`` is clear and ``-1`` when it is set. So
level ``l`` adds ``d`` to the first half of each aligned run of ``2**(l + 1)``
documents and takes it from the second half: every length lies in
``[mean_length - spread, mean_length + spread]``, every aligned run of
``2**(levels)`` documents holds exactly ``mean_length`` tokens per document, and the
offset of document ``i`` (tokens before it) is

    ``mean_length * i + sum_l d_l(i >> (l + 1)) * (p if bit l of i is clear else 2**l - p)``

with ``p = i & (2**l - 1)``: O(levels) work per index, no pass, no table. Token ``t``
of the concatenated stream is a hash of ``(seed, t)`` modulo ``vocab_size``, so
document ``i`` is tokens ``[offset(i), offset(i + 1))`` of that stream.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, overload

import numpy as np

from mixle._checks import nonnegative_int, positive_int
from mixle.corpus.format.view import as_index
from mixle.data._permutation import _mix
from mixle.errors import ArgumentError, ArgumentTypeError

__all__ = ["VirtualDocuments"]

_VERSION = 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
# Key domains: one per level for the length deviations, one for the token stream.
_LENGTH_DOMAIN = 0x6D69786C655F766C  # "mixle_vl"
_TOKEN_DOMAIN = 0x6D69786C655F7674  # "mixle_vt"
#: Above this many documents ``lengths`` refuses (8 bytes per document): a plan that
#: scales reads ``token_offsets`` at chosen indices instead.
DEFAULT_LENGTHS_LIMIT = 1 << 27


def _key(domain: int, seed: int, level: int) -> np.uint64:
    state = np.random.SeedSequence([domain, seed, level]).generate_state(1, dtype=np.uint64)
    return np.uint64(state[0])


def _hash(values: np.ndarray, key: np.uint64) -> np.ndarray:
    """A keyed uint64 hash of int64 ``values`` (splitmix64: golden-ratio step, finaliser)."""
    return _mix(values.astype(np.uint64) * _GOLDEN + key)


class VirtualDocuments(Sequence[np.ndarray]):
    """A :class:`~mixle.data.DocumentSource` of ``num_documents`` hashed documents.

    Parameters
    ----------
    num_documents
        How many documents, up to ``2**62`` (10^11 costs nothing).
    mean_length, spread
        Every document has ``mean_length - spread .. mean_length + spread`` tokens
        (``0 <= spread <= mean_length``); see the module docstring for the closed form.
    vocab_size
        Token ids are in ``[0, vocab_size)``; the dtype is uint16 when
        ``vocab_size <= 65536``, else uint32 (so at most ``2**32``).
    seed
        Keys the lengths and the tokens; the fingerprint covers every parameter.
    lengths_limit
        ``lengths`` (one int64 per document) raises :class:`ArgumentError` above this
        many documents, so a scale test fails loudly if a plan asks for it.

    Every read is O(size of the answer): ``token_offsets(indices)`` is O(levels) per
    index for a contiguous selection (strided slices answer in O(largest index)),
    ``read_tokens`` finds its first document by bisection over ``token_offsets``.
    Slicing returns a lazy selection of the same class. Pickling carries the
    parameters only.

    Raises
    ------
    ArgumentError, ArgumentTypeError
        A parameter is not an integer in its range (the message names it).
    """

    supports_prefetch = False

    def __init__(
        self,
        num_documents: int,
        *,
        mean_length: int = 4,
        spread: int = 3,
        vocab_size: int = 50_257,
        seed: int = 0,
        lengths_limit: int = DEFAULT_LENGTHS_LIMIT,
    ) -> None:
        count = nonnegative_int("num_documents", num_documents)
        self.mean_length = nonnegative_int("mean_length", mean_length)
        self.spread = nonnegative_int("spread", spread)
        self.vocab_size = positive_int("vocab_size", vocab_size)
        self.seed = nonnegative_int("seed", seed)
        self.lengths_limit = nonnegative_int("lengths_limit", lengths_limit)
        if count >= 1 << 62:
            raise ArgumentError(f"`num_documents` must be below 2**62. Got {count} instead.")
        if self.spread > self.mean_length:
            raise ArgumentError(
                f"`spread` must be at most `mean_length` ({self.mean_length}) so that no "
                f"length is negative. Got {self.spread} instead."
            )
        if self.vocab_size > 1 << 32:
            raise ArgumentError(f"`vocab_size` must be at most 2**32. Got {vocab_size} instead.")
        self._selection = range(count)
        self._dtype = np.dtype(np.uint16 if self.vocab_size <= 1 << 16 else np.uint32)
        amplitudes = [(s >> 0) - (s >> 1) for s in (self.spread >> level for level in range(64))]
        self._levels = [
            (level, amplitude, _key(_LENGTH_DOMAIN, self.seed, level))
            for level, amplitude in enumerate(amplitudes)
            if amplitude > 0
        ]
        self._token_key = _key(_TOKEN_DOMAIN, self.seed, 0)

    # -- the closed form, on base indices -------------------------------------------

    def _deviations(self, indices: np.ndarray) -> list[tuple[int, np.ndarray]]:
        return [
            (
                level,
                (_hash(indices >> (level + 1), key) % np.uint64(amplitude + 1)).astype(np.int64),
            )
            for level, amplitude, key in self._levels
        ]

    def _base_lengths(self, indices: np.ndarray) -> np.ndarray:
        lengths = np.full(indices.shape, self.mean_length, dtype=np.int64)
        for level, deviation in self._deviations(indices):
            upper = ((indices >> level) & 1).astype(bool)
            lengths += np.where(upper, -deviation, deviation)
        return lengths

    def _base_offsets(self, indices: np.ndarray) -> np.ndarray:
        offsets = indices * self.mean_length
        for level, deviation in self._deviations(indices):
            within = indices & ((1 << level) - 1)
            upper = ((indices >> level) & 1).astype(bool)
            offsets += deviation * np.where(upper, (1 << level) - within, within)
        return offsets

    def _tokens_at(self, positions: np.ndarray) -> np.ndarray:
        return (_hash(positions, self._token_key) % np.uint64(self.vocab_size)).astype(self._dtype)

    # -- the selection ----------------------------------------------------------------

    def _base(self, indices: np.ndarray) -> np.ndarray:
        """Base indices of selection positions ``indices`` (already in range)."""
        selection = self._selection
        return selection.start + selection.step * indices

    def _checked(
        self, indices: Any, name: str = "indices", *, upper: int | None = None
    ) -> np.ndarray:
        array = np.asarray(indices)
        if array.size == 0:
            return np.zeros(0, dtype=np.int64)
        if array.ndim != 1 or array.dtype.kind not in "iu":
            raise ArgumentTypeError(f"`{name}` must be a 1-D sequence of integers.")
        array = array.astype(np.int64)
        limit = len(self) if upper is None else upper
        bad = (array < 0) | (array >= limit)
        if bad.any():
            position = int(np.flatnonzero(bad)[0])
            raise IndexError(
                f"`{name}[{position}]` is {int(array[position])}, outside [0, {limit}) for "
                f"{len(self)} virtual documents."
            )
        return array

    def __len__(self) -> int:
        return len(self._selection)

    @overload
    def __getitem__(self, index: int) -> np.ndarray: ...

    @overload
    def __getitem__(self, index: slice) -> VirtualDocuments: ...

    def __getitem__(self, index: int | slice) -> np.ndarray | VirtualDocuments:
        if isinstance(index, slice):
            view = object.__new__(VirtualDocuments)
            view.__dict__.update(self.__dict__)
            view._selection = self._selection[index]
            return view
        position = as_index(index)
        count = len(self)
        if not -count <= position < count:
            raise IndexError(f"document index {index} is out of range for {count} documents.")
        return self.take([position % count])[0]

    # -- the DocumentSource surface ---------------------------------------------------

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._dtype

    @property
    def fingerprint(self) -> str:
        """A digest of the parameters and the selection (O(1))."""
        selection = self._selection
        text = (
            f"mixle-virtual-v{_VERSION}:{self.mean_length}:{self.spread}:{self.vocab_size}:"
            f"{self.seed}:{selection.start}:{selection.stop}:{selection.step}"
        )
        return hashlib.sha256(text.encode("ascii")).hexdigest()

    @property
    def lengths(self) -> np.ndarray:
        """Every document's length, int64: O(documents), refused above ``lengths_limit``."""
        if len(self) > self.lengths_limit:
            raise ArgumentError(
                f"`lengths` of {len(self):,} virtual documents would take "
                f"{8 * len(self):,} bytes; this collection refuses it above `lengths_limit` "
                f"({self.lengths_limit:,}). Read `token_offsets(indices)` instead."
            )
        return self._base_lengths(self._base(np.arange(len(self), dtype=np.int64)))

    @property
    def num_tokens(self) -> int:
        return int(self.token_offsets([len(self)])[0])

    def token_offsets(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Tokens before each of ``indices`` (in ``[0, len]``), int64.

        O(levels) per index for a contiguous selection; O(largest index) for a strided
        one (its lengths are summed).

        Raises
        ------
        IndexError
            An index is outside ``[0, len(self)]``.
        ArgumentTypeError
            ``indices`` is not a 1-D integer sequence.
        """
        array = self._checked(indices, upper=len(self) + 1)
        selection = self._selection
        if selection.step == 1 or len(self) == 0:
            origin = self._base_offsets(np.array([selection.start], dtype=np.int64))[0]
            return self._base_offsets(selection.start + array) - origin
        if array.size == 0:
            return array
        prefix = self._base_lengths(self._base(np.arange(int(array.max()), dtype=np.int64)))
        return np.concatenate(([0], np.cumsum(prefix)))[array]

    def take(self, indices: Sequence[int] | np.ndarray) -> list[np.ndarray]:
        array = self._checked(indices)
        if array.size == 0:
            return []
        base = self._base(array)
        starts = self._base_offsets(base)
        lengths = self._base_lengths(base)
        documents = []
        for start, length in zip(starts.tolist(), lengths.tolist(), strict=True):
            document = self._tokens_at(np.arange(start, start + length, dtype=np.int64))
            document.flags.writeable = False
            documents.append(document)
        return documents

    def prefetch(self, indices: Sequence[int] | np.ndarray) -> None:
        """No-op: nothing is stored."""

    def gather_into(
        self,
        indices: np.ndarray,
        begins: np.ndarray,
        ends: np.ndarray,
        out: np.ndarray,
        at: np.ndarray,
    ) -> None:
        """Write tokens ``[begins[k], ends[k])`` of document ``indices[k]`` to
        ``out[at[k]:]`` for every ``k`` (see :class:`~mixle.data.DocumentSource`), in one
        vectorised hash of the pieces' positions."""
        array = self._checked(indices)
        begin = np.asarray(begins, dtype=np.int64)
        end = np.asarray(ends, dtype=np.int64)
        where = np.asarray(at, dtype=np.int64)
        if array.size == 0:
            return
        base = self._base(array)
        lengths = self._base_lengths(base)
        bad = (begin < 0) | (begin > end) | (end > lengths)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise IndexError(
                f"piece {k}: tokens [{int(begin[k])}, {int(end[k])}) are outside document "
                f"{int(array[k])} ({int(lengths[k])} tokens)."
            )
        sizes = end - begin
        outside = (where < 0) | (where + sizes > len(out))
        if outside.any():
            k = int(np.flatnonzero(outside)[0])
            raise IndexError(
                f"piece {k}: {int(sizes[k])} tokens at {int(where[k])} do not fit in `out` "
                f"({len(out)} tokens)."
            )
        total = int(sizes.sum())
        within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        sources = np.repeat(self._base_offsets(base) + begin, sizes) + within
        out[np.repeat(where, sizes) + within] = self._tokens_at(sources)

    def read_tokens(self, start: int, stop: int) -> np.ndarray:
        """Tokens ``start:stop`` of the selection's documents concatenated in order.

        Raises
        ------
        IndexError
            ``0 <= start <= stop <= num_tokens`` does not hold.
        """
        total = self.num_tokens
        if not 0 <= start <= stop <= total:
            raise IndexError(f"token range [{start}, {stop}) is outside [0, {total}].")
        if self._selection.step == 1:
            origin = int(self._base_offsets(np.array([self._selection.start], np.int64))[0])
            return self._tokens_at(np.arange(origin + start, origin + stop, dtype=np.int64))
        out = np.empty(stop - start, dtype=self._dtype)
        offsets = self.token_offsets(np.arange(len(self) + 1, dtype=np.int64))
        first = int(np.searchsorted(offsets, start, side="right")) - 1
        last = int(np.searchsorted(offsets, stop, side="left"))
        chosen = np.arange(first, max(first, last), dtype=np.int64)
        begins = np.maximum(start - offsets[chosen], 0)
        ends = np.minimum(stop, offsets[chosen + 1]) - offsets[chosen]
        self.gather_into(chosen, begins, ends, out, offsets[chosen] + begins - start)
        return out

    def __repr__(self) -> str:
        selection = self._selection
        return (
            f"VirtualDocuments({len(self):,} documents, mean_length={self.mean_length}, "
            f"spread={self.spread}, seed={self.seed}, selection={selection})"
        )
