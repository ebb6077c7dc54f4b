"""Batch gathers: many document pieces copied into one buffer, and document ids by runs;
and the epoch shuffle that orders the documents.

The packer's two inner loops and the planner's shuffle, each with two interchangeable
implementations that give bitwise-identical results:

- ``"numpy"``: vectorised numpy plus one slice copy per piece. Always available; the
  reference the tests compare against.
- ``"numba"``: the same loops compiled by `numba <https://numba.pydata.org>`_ (an
  optional dependency with binary wheels, ``pip install 'mixle[fast]'``). One call per
  batch instead of one numpy call per piece, which is what stands between the packer and
  the memory floor. The shuffle (:func:`legacy_permutation`) consumes the same raw
  Mersenne Twister draws as numpy's legacy ``RandomState.permutation`` in two passes
  per chunk (the swap targets first, then the swaps, whose independent random accesses
  the CPU overlaps), for the same permutation in about half the time.

The default backend is ``"numpy"``: importing numba and loading the kernels costs
0.3-1.5 s of CPU once per process (measured on a loaded 2-core machine), which every
DataLoader worker, torchrun rank and CLI call would pay. Select the compiled one with the
environment variable ``MIXLE_GATHER`` (``numba``; ``auto`` = numba when installed, else
numpy; ``numpy``), read when this module is imported, or with
:func:`set_gather_backend`. Either loads the kernels at that moment: compiled once per
machine (numba's on-disk cache), loaded and called on tiny inputs of every signature the
reader and the packer use, so no compilation or loading happens while batches stream.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from mixle.errors import ArgumentError

__all__ = [
    "BACKENDS",
    "SplitOutput",
    "document_id_runs",
    "fill_document_ids",
    "gather_backend",
    "gather_pieces",
    "legacy_permutation",
    "mixed_radix_kernel",
    "numba_available",
    "padded_position_runs",
    "ramp_runs",
    "set_gather_backend",
    "zero_gaps",
]

BACKENDS = ("auto", "numpy", "numba")
_ENVIRONMENT = "MIXLE_GATHER"


_min, _max, _sum, _all = (
    np.minimum.reduce,
    np.maximum.reduce,
    np.add.reduce,
    np.logical_and.reduce,
)


class SplitOutput:
    """A gather's output split over several arrays: one range of ``size`` positions of
    which ``arrays[k]`` holds ``[starts[k], starts[k] + len(arrays[k]))``.

    How consecutive batches are read with one gather while each owns its buffer:
    ``starts`` ascend, the arrays cover the range and neighbours may overlap (the token
    at the edge of two batches, one's last target and the next one's first input); a
    position is written into every array that holds it; positions at or past ``size``
    (padding past the stream's end) are left to the caller. Only the numpy gather
    writes one (:func:`gather_pieces` sends it there).

    :meth:`put` is deferred until :meth:`flush` (or the next ``put``): a
    :meth:`write` over the positions drops them (it writes them anyway), :meth:`take`
    answers from it. The boundary slots a packer puts before a gather that joins them
    into one copy are then never written twice.
    """

    __slots__ = ("_pending", "_value", "arrays", "size", "starts", "stops")

    def __init__(self, arrays: list[np.ndarray], starts: list[int], size: int) -> None:
        self.arrays = arrays
        self.starts = starts
        self.stops = [start + array.shape[0] for start, array in zip(starts, arrays, strict=True)]
        self.size = size
        self._pending: np.ndarray | None = None
        self._value = 0

    def write(self, first: int, values: np.ndarray) -> None:
        """``values`` written at positions ``[first, first + len(values))`` (below ``size``)."""
        stop = min(first + values.shape[0], self.size)
        pending = self._pending
        if pending is not None:
            low, high = pending.searchsorted((first, stop)).tolist()
            if low == 0 and high == pending.shape[0]:
                self._pending = None
            elif low < high:
                self._pending = np.concatenate((pending[:low], pending[high:]))
        for array, start, end in zip(self.arrays, self.starts, self.stops, strict=True):
            low, high = max(first, start), min(stop, end)
            if low < high:
                np.copyto(
                    array[low - start : high - start],
                    values[low - first : high - first],
                    casting="same_kind",
                )

    def put(self, positions: np.ndarray, value: int) -> None:
        """``value`` at ``positions`` (ascending, below ``size``), written by :meth:`flush`
        unless a :meth:`write` covers them first."""
        self.flush()
        self._pending, self._value = positions, value

    def flush(self) -> None:
        """Write what :meth:`put` left pending."""
        positions = self._pending
        if positions is None:
            return
        self._pending = None
        bounds = np.searchsorted(positions, self.starts + self.stops).tolist()
        count = len(self.arrays)
        for k, (array, start) in enumerate(zip(self.arrays, self.starts, strict=True)):
            low, high = bounds[k], bounds[count + k]
            if low < high:
                array[positions[low:high] - start] = self._value

    def take(self, positions: np.ndarray) -> np.ndarray:
        """The values at ``positions`` (ascending, below ``size``)."""
        dtype = self.arrays[0].dtype
        pending = self._pending
        if pending is not None and positions.shape[0]:
            where = pending.searchsorted(positions)
            if int(_max(where)) < pending.shape[0] and _all(pending[where] == positions):
                return np.full(positions.shape[0], self._value, dtype=dtype)
            self.flush()
        held = np.empty(positions.shape[0], dtype=dtype)
        bounds = np.searchsorted(positions, self.stops).tolist()
        low = 0
        for array, start, high in zip(self.arrays, self.starts, bounds, strict=True):
            if low < high:
                held[low:high] = array[positions[low:high] - start]
                low = high
        return held


def gather_pieces_numpy(
    out: np.ndarray | SplitOutput,
    tokens: np.ndarray,
    offsets: np.ndarray,
    local: np.ndarray,
    begins: np.ndarray,
    ends: np.ndarray,
    at: np.ndarray,
    count: int,
) -> int:
    """Reference implementation of :func:`gather_pieces` (see there).

    Every piece is validated with whole-array reductions first (a bad one takes the
    slow path, which names it). The pieces are then joined into one buffer of the
    tokens' dtype by ``bytes.join`` over memoryview slices of the mapping (a C loop of
    ``memcpy``: a few tens of nanoseconds a piece, where ``np.concatenate`` spends most
    of a microsecond setting up each input's cast), and that buffer is cast into
    ``out`` by one copy per run of pieces whose destinations follow each other: one for
    a batch of concatenated rows, one per row for best-fit rows. A :class:`SplitOutput`
    takes those copies into its arrays (the cast copy each token gets anyway).
    """
    pieces = local.shape[0]
    if pieces == 0:
        return -1
    # ufunc reductions, not ndarray.min/max/sum/all: those go through Python wrappers,
    # which cost as much as the reduction on a batch's few dozen pieces.
    if _min(local) < 0 or _max(local) >= count:
        return int(np.flatnonzero((local < 0) | (local >= count))[0])
    low = offsets[local]
    lengths = ends - begins
    stops = low + ends
    size = out.size
    follows = at[1:] == at[:-1] + lengths[:-1]
    contiguous = pieces == 1 or _all(follows)
    first = int(at[0])
    if not (
        _min(begins) >= 0
        and _min(lengths) >= 0
        and _all(stops <= offsets[local + 1])
        and (
            (first >= 0 and first + int(_sum(lengths)) <= size)
            if contiguous
            else (_min(at) >= 0 and _max(at + lengths) <= size)
        )
    ):
        bad = (begins < 0) | (lengths < 0) | (stops > offsets[local + 1])
        bad |= (at < 0) | (at + lengths > size)
        return int(np.flatnonzero(bad)[0])
    view = tokens.data
    if not view.c_contiguous:  # a strided token array: no flat buffer to slice
        _copy_pieces(out, tokens, (low + begins).tolist(), stops.tolist(), at, lengths)
        return -1
    parts: list[Any] = list(
        map(view.__getitem__, map(slice, (low + begins).tolist(), stops.tolist()))
    )
    if not contiguous:
        # Pieces one slot apart (a boundary token between documents, written before the
        # gather): the slots between are joined too, with the values they hold, so the
        # span is still one copy. Only when those values are tokens of this dtype.
        steps = at[1:] - at[:-1] - lengths[:-1]
        if _min(steps) >= 0 and _max(steps) == 1 and tokens.dtype.kind in "iu":
            after = np.flatnonzero(steps)
            held = out.take(at[after + 1] - 1)
            limits = np.iinfo(tokens.dtype)
            if _min(held) >= limits.min and _max(held) <= limits.max:
                slots = held.astype(tokens.dtype).data
                parts = _with_slots(parts, after.tolist(), slots)
                contiguous = True
    flat = np.frombuffer(b"".join(parts), dtype=tokens.dtype)
    if contiguous:
        if isinstance(out, SplitOutput):
            out.write(first, flat)
        else:
            np.copyto(out[first : first + flat.shape[0]], flat, casting="same_kind")
        return -1
    # Runs of pieces whose destinations follow each other (a row of best-fit pieces).
    heads = np.flatnonzero(~follows) + 1
    taken = np.cumsum(lengths)
    run_ends = taken[np.append(heads - 1, pieces - 1)].tolist()
    run_at = np.append(at[:1], at[heads]).tolist()
    done = 0
    for position, stop in zip(run_at, run_ends, strict=True):
        if isinstance(out, SplitOutput):
            out.write(position, flat[done:stop])
        else:
            out[position : position + stop - done] = flat[done:stop]
        done = stop
    return -1


def _with_slots(parts: list[Any], after: list[int], slots: memoryview) -> list[Any]:
    """``parts`` with one-item slices of ``slots`` inserted: slot ``j`` after part
    ``after[j]`` (ascending)."""
    if len(after) == len(parts) - 1:  # every part but the last is followed by one
        joined: list[Any] = [None] * (2 * len(parts) - 1)
        joined[0::2] = parts
        count = len(after)
        joined[1::2] = list(map(slots.__getitem__, map(slice, range(count), range(1, count + 1))))
        return joined
    joined = []
    previous = 0
    for j, k in enumerate(after):
        joined += parts[previous : k + 1]
        joined.append(slots[j : j + 1])
        previous = k + 1
    joined += parts[previous:]
    return joined


def _copy_pieces(
    out: np.ndarray | SplitOutput,
    tokens: np.ndarray,
    sources: list[int],
    stops: list[int],
    at: np.ndarray,
    lengths: np.ndarray,
) -> None:
    """Validated pieces of a strided ``tokens`` copied one slice each."""
    views = list(map(tokens.__getitem__, map(slice, sources, stops)))
    for view, position, length in zip(views, at.tolist(), lengths.tolist(), strict=True):
        if isinstance(out, SplitOutput):
            out.write(position, view)
        else:
            out[position : position + length] = view


def fill_document_ids_numpy(
    doc_ids: np.ndarray, pos_ids: np.ndarray, indices: np.ndarray, starts: np.ndarray, begin: int
) -> None:
    """Reference implementation of :func:`fill_document_ids` (see there).

    Both outputs are prefix sums of their own run starts: ``doc_ids`` steps by the next
    document's index minus the previous one's where a run starts (0 elsewhere), and
    ``pos_ids`` steps by 1 inside a run and back to 0 at a run start. Two in-place
    ``cumsum`` passes over the outputs; no ``np.repeat`` temporaries (which cost more
    than the gather of the tokens).
    """
    size = doc_ids.shape[0]
    if size == 0:
        return
    end = begin + size
    edges = np.minimum(np.maximum(starts, begin), end)
    edges[-1] = end
    counts = edges[1:] - edges[:-1]
    firsts = starts[:-1]
    edges = edges[:-1]
    if _min(counts) <= 0:  # empty documents own no position: drop their runs
        keep = counts > 0
        indices, firsts, edges = indices[keep], firsts[keep], edges[keep]
    runs = edges[1:] - begin  # where each run after the first starts in the outputs
    doc_ids.fill(0)
    doc_ids[0] = indices[0]
    doc_ids[runs] = indices[1:] - indices[:-1]
    np.cumsum(doc_ids, out=doc_ids)
    pos_ids.fill(1)
    pos_ids[0] = begin - firsts[0]
    # At a run start the position falls from the previous run's last to 0.
    pos_ids[runs] = firsts[:-1] - begin - runs + 1
    np.cumsum(pos_ids, out=pos_ids)


# The slots of a read: one shared ramp 0, 1, 2, ... (read-only), grown to the longest
# read so far (rounded up to a power of two; a read-ahead group of 8 batches of 8 x 2048
# rows: 1-2 MiB) up to 32 MiB; a longer read takes a fresh arange. Not built before a
# read asks for it.
_RAMP_LIMIT = 1 << 22
_RAMP = np.arange(0, dtype=np.int64)


def _ramp(size: int) -> np.ndarray:
    """``0, 1, ..., size - 1`` as int64: a view of the shared ramp (grown if need be)."""
    global _RAMP
    ramp = _RAMP
    if size <= ramp.shape[0]:
        return ramp[:size]
    if size > _RAMP_LIMIT:
        return np.arange(size, dtype=np.int64)
    ramp = np.arange(min(1 << (size - 1).bit_length(), _RAMP_LIMIT), dtype=np.int64)
    ramp.flags.writeable = False
    _RAMP = ramp  # one assignment: a thread still reading the old ramp keeps it
    return ramp[:size]


def document_id_runs_numpy(
    indices: np.ndarray, starts: np.ndarray, begin: int, size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Reference implementation of :func:`document_id_runs` (see there).

    One run table (each document's slots ``[edges[k], edges[k + 1])``), then three
    passes over the outputs, each a C loop: ``doc_ids`` is one ``np.repeat`` of the
    documents by their run lengths; ``pos_ids`` is one ``np.repeat`` of each run's
    offset (``begin - starts[k]``: slot ``t`` of run ``k`` is position ``begin + t -
    starts[k]``) plus the slot ramp, added in place. No per-run Python work: a join of
    per-run ramp slices (a memoryview per run) costs twice as much on a read-ahead
    group's few hundred documents, a cumulative sum over the outputs three times.
    """
    end = begin + size
    edges = np.minimum(np.maximum(starts, begin), end)
    edges[-1] = end
    counts = edges[1:] - edges[:-1]
    doc_ids = np.repeat(indices, counts)
    pos_ids = np.repeat(begin - starts[:-1], counts)
    pos_ids += _ramp(size)
    return doc_ids, pos_ids


def ramp_runs(offsets: np.ndarray, runs: np.ndarray, size: int) -> np.ndarray:
    """``np.repeat(offsets, runs) + arange(size)`` (``size == runs.sum()``): a new
    writable int64 array, by one ``np.repeat`` and one in-place add of the shared slot
    ramp. Slot ``t`` of run ``k`` holds ``offsets[k] + t``: a run at slot ``at`` whose
    values start at ``v`` has offset ``v - at``."""
    values = np.repeat(offsets, runs)
    values += _ramp(size)
    return values


def padded_position_runs(
    gaps: np.ndarray, begins: np.ndarray, lengths: np.ndarray, tail: int
) -> np.ndarray:
    """Positions of pieces laid out with padding: a new writable int64 array.

    For each ``k``: ``gaps[k]`` zeros, then ``begins[k], begins[k] + 1, ...`` for
    ``lengths[k]`` slots (the piece's positions inside its document); then ``tail``
    zeros. :func:`ramp_runs` over the gaps and pieces (a piece at slot ``at[k]`` has
    offset ``begins[k] - at[k]``), then the gaps zeroed by slice (padding is rare: a
    row's tail), where building it by ``np.repeat``, ``arange`` and ``where`` over every
    slot costs several passes and a join of per-run ramp slices a memoryview per run.
    """
    pieces = gaps.shape[0]
    runs = np.empty(2 * pieces + 1, dtype=np.int64)
    runs[0:-1:2] = gaps
    runs[1::2] = lengths
    runs[-1] = tail
    stops = np.cumsum(runs)
    offsets = np.zeros(2 * pieces + 1, dtype=np.int64)  # a gap's values are zeroed below
    at = stops[0:-1:2]  # piece k's first slot: its gap ends there
    offsets[1::2] = begins - at
    positions = ramp_runs(offsets, runs, int(stops[-1]))
    zero_gaps(positions, gaps, at, tail)
    return positions


def zero_gaps(values: np.ndarray, gaps: np.ndarray, at: np.ndarray, tail: int) -> None:
    """Zero ``values`` over the ``gaps[k]`` slots before each ``at[k]`` and the last
    ``tail`` slots: one slice per gap that is not empty."""
    padded = np.flatnonzero(gaps)
    if padded.shape[0]:
        ends = at[padded]
        for low, high in zip((ends - gaps[padded]).tolist(), ends.tolist(), strict=True):
            values[low:high] = 0
    if tail:
        values[values.shape[0] - tail :] = 0


def _document_id_runs_compiled(
    indices: np.ndarray, starts: np.ndarray, begin: int, size: int
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`document_id_runs` through the compiled fill (one pass, no temporaries)."""
    doc_ids = np.empty(size, dtype=np.int64)
    pos_ids = np.empty(size, dtype=np.int64)
    _document_ids(doc_ids, pos_ids, indices, starts, begin)
    return doc_ids, pos_ids


_Kernels = tuple[
    Callable[..., int], Callable[..., None], Callable[..., tuple[int, int]], Callable[..., None]
]
# Raw draws per chunk of the compiled shuffle (the swaps of a chunk need at most that).
_SHUFFLE_DRAWS = 1 << 21
# Below this many documents numpy's own shuffle is as fast (the array stays in cache).
_SHUFFLE_COMPILED_MIN = 1 << 19


def _compile() -> _Kernels | None:
    """The numba kernels, compiled and warmed up, or ``None`` when numba is unavailable."""
    try:
        import numba
    except ImportError:
        return None

    def gather(
        out: Any, tokens: Any, offsets: Any, local: Any, begins: Any, ends: Any, at: Any, count: int
    ) -> int:
        size = out.shape[0]
        for k in range(local.shape[0]):  # validate each piece before copying it
            if local[k] < 0 or local[k] >= count:
                return k
            low = offsets[local[k]]
            begin, end, position = begins[k], ends[k], at[k]
            length = end - begin
            if begin < 0 or length < 0 or low + end > offsets[local[k] + 1]:
                return k
            if position < 0 or position + length > size:
                return k
            source = tokens[low + begin : low + end]
            target = out[position : position + length]
            for j in range(length):
                target[j] = source[j]
        return -1

    def document_ids(doc_ids: Any, pos_ids: Any, indices: Any, starts: Any, begin: int) -> None:
        end = begin + doc_ids.shape[0]
        last = indices.shape[0] - 1
        for k in range(last + 1):
            start = starts[k]
            low = max(start, begin)
            high = end if k == last else min(starts[k + 1], end)
            document = indices[k]
            for position in range(low, high):
                doc_ids[position - begin] = document
                pos_ids[position - begin] = position - start

    def shuffle(values: Any, raw: Any, top: int, targets: Any) -> tuple[int, int]:
        # numpy's legacy Fisher-Yates: for i = top, top - 1, ..., 1 swap values[i] with
        # values[j], j = random_interval(i): 32-bit draws masked to the smallest
        # all-ones mask >= i, redrawn while > i. First every target of this chunk of
        # draws, then the swaps.
        used = steps = 0
        i = top
        while i >= 1 and steps < targets.shape[0]:
            mask = i
            mask |= mask >> 1
            mask |= mask >> 2
            mask |= mask >> 4
            mask |= mask >> 8
            mask |= mask >> 16
            while used < raw.shape[0]:
                value = raw[used] & mask
                used += 1
                if value <= i:
                    break
            else:
                break  # out of draws: the caller appends more and goes on from i
            targets[steps] = value
            steps += 1
            i -= 1
        for k in range(steps):
            j, position = targets[k], top - k
            swapped = values[j]
            values[j] = values[position]
            values[position] = swapped
        return i, used

    def mixed_radix_images(out: Any, params: Any, tables: Any, moduli: Any) -> None:
        # MixedRadixPermutation's network over positions start, start + 1, ...
        # (params = start, n, b, all uint64 like every value here: numba would widen a
        # mix of signed and unsigned to float), then each image at or above n walked.
        # The first loop has no branch, so the CPU overlaps the rounds of neighbours.
        start, n, b = params[0], params[1], params[2]
        zero, one = np.uint64(0), np.uint64(1)
        high = start // b
        low = start - high * b
        rounds = moduli.shape[0]
        for j in range(out.shape[0]):
            left, right = high, low
            for i in range(rounds):
                mixed = tables[i, right] + left
                # mod, branch-free: below the modulus the subtraction wraps high
                left, right = right, min(mixed, mixed - moduli[i])
            out[j] = left * b + right
            low += one
            if low == b:
                low = zero
                high += one
        for j in range(out.shape[0]):
            value = out[j]
            while value >= n:
                left = value // b
                right = value - left * b
                for i in range(rounds):
                    mixed = tables[i, right] + left
                    left, right = right, min(mixed, mixed - moduli[i])
                value = left * b + right
            out[j] = value

    with warnings.catch_warnings():
        # An unwritable cache directory only costs a compilation per process.
        warnings.simplefilter("ignore", numba.NumbaWarning)
        gather_kernel = numba.njit(cache=True, nogil=True)(gather)
        ids_kernel = numba.njit(cache=True, nogil=True)(document_ids)
        shuffle_kernel = numba.njit(cache=True, nogil=True)(shuffle)
        radix_kernel = numba.njit(cache=True, nogil=True)(mixed_radix_images)
        # Warm up every signature the reader and the packer use: read-only token and
        # offsets arrays (memory maps) of each corpus dtype, int64 output, and index
        # arrays that are plain or read-only (a memory-mapped epoch plan).
        offsets = np.array([0, 1], dtype=np.int64)
        offsets.flags.writeable = False
        one = np.zeros(1, dtype=np.int64)
        for dtype in (np.uint16, np.uint32, np.int64):
            tokens = np.zeros(1, dtype=dtype)
            tokens.flags.writeable = False
            gather_kernel(
                np.zeros(1, np.int64), tokens, offsets, one * 0, one * 0, one + 0, one * 0, 1
            )
        for writeable in (True, False):
            indices, starts = np.zeros(1, np.int64), np.array([0, 1], np.int64)
            indices.flags.writeable = starts.flags.writeable = writeable
            ids_kernel(np.zeros(1, np.int64), np.zeros(1, np.int64), indices, starts, 0)
        shuffle_kernel(np.arange(2), np.zeros(1, np.int64), 1, np.zeros(1, np.int64))
        radix_kernel(
            np.zeros(1, np.uint64),
            np.array([0, 1, 1], np.uint64),
            np.zeros((6, 1), np.uint64),
            np.ones(6, np.uint64),
        )
    # Importing numba leaves ~10^5 young objects behind: the full collection they cause
    # comes now (~100 ms) instead of inside the stream, e.g. in a restart's first batch.
    gc.collect()
    return gather_kernel, ids_kernel, shuffle_kernel, radix_kernel


def _initial_backend() -> str:
    requested = os.environ.get(_ENVIRONMENT, "numpy") or "numpy"
    if requested not in BACKENDS:
        raise ArgumentError(
            f"environment variable {_ENVIRONMENT} must be one of {', '.join(BACKENDS)}. "
            f"Got {requested!r} instead."
        )
    return requested


_KERNELS: _Kernels | None = None
_gather: Callable[..., int] = gather_pieces_numpy
_document_ids: Callable[..., None] = fill_document_ids_numpy
_id_runs: Callable[..., tuple[np.ndarray, np.ndarray]] = document_id_runs_numpy
_shuffle: Callable[..., tuple[int, int]] | None = None
_mixed_radix: Callable[..., None] | None = None


def numba_available() -> bool:
    """Whether numba is installed (the ``"numba"`` backend can be selected)."""
    return _KERNELS is not None or importlib.util.find_spec("numba") is not None


def gather_backend() -> str:
    """The backend in use: ``"numba"`` or ``"numpy"``."""
    return "numpy" if _gather is gather_pieces_numpy else "numba"


def set_gather_backend(name: str) -> str:
    """Use backend ``name``; return the previous one (``"numba"`` or ``"numpy"``).

    ``"numba"`` and ``"auto"`` (numba when installed, else numpy) load the compiled
    kernels now if they are not loaded yet (see the module notes); ``"numpy"`` selects
    the pure-numpy reference. Batches and epoch orders are bitwise the same with either.

    Raises
    ------
    ArgumentError
        ``name`` is not a backend, or it is ``"numba"`` and numba is not installed.
    """
    global _gather, _document_ids, _id_runs, _shuffle, _mixed_radix, _KERNELS
    if name not in BACKENDS:
        raise ArgumentError(f"`name` must be one of {', '.join(BACKENDS)}. Got {name!r} instead.")
    previous = gather_backend()
    if name != "numpy" and _KERNELS is None:
        _KERNELS = _compile()
        if _KERNELS is None and name == "numba":
            raise ArgumentError(
                "the numba gather backend needs the optional package `numba`; install it "
                "with: pip install 'mixle[fast]'"
            )
    if name == "numpy" or _KERNELS is None:
        _gather, _document_ids, _shuffle = gather_pieces_numpy, fill_document_ids_numpy, None
        _mixed_radix = None
        _id_runs = document_id_runs_numpy
    else:
        _gather, _document_ids, _shuffle, _mixed_radix = _KERNELS
        _id_runs = _document_id_runs_compiled
    return previous


set_gather_backend(_initial_backend())


def gather_pieces(
    out: np.ndarray | SplitOutput,
    tokens: np.ndarray,
    offsets: np.ndarray,
    local: np.ndarray,
    begins: np.ndarray,
    ends: np.ndarray,
    at: np.ndarray,
    count: int,
) -> int:
    """Copy pieces of documents stored as ``tokens`` split at ``offsets`` into ``out``.

    For each ``k``: tokens ``[begins[k], ends[k])`` of document ``local[k]`` (that is
    ``tokens[offsets[local[k]] + begins[k] : offsets[local[k]] + ends[k]]``) are written,
    cast to ``out``'s dtype, to ``out[at[k] : at[k] + ends[k] - begins[k]]``. Nothing
    else of ``out`` is written.

    Precondition (the caller's, not checked): ``offsets`` (``count + 1`` entries) never
    decreases and stays within ``tokens`` over the documents named. Every other array
    is int64 and 1-D, of one length.

    Returns
    -------
    int
        ``-1`` when every piece was copied; otherwise the first ``k`` whose document is
        not in ``[0, count)``, whose range is not inside its document or whose
        destination is not inside ``out`` (pieces before it may have been written).

    ``out`` may be a :class:`SplitOutput` (positions are then its range's); it is always
    written by the numpy implementation.
    """
    if isinstance(out, SplitOutput):
        return gather_pieces_numpy(out, tokens, offsets, local, begins, ends, at, count)
    return _gather(out, tokens, offsets, local, begins, ends, at, count)


def fill_document_ids(
    doc_ids: np.ndarray, pos_ids: np.ndarray, indices: np.ndarray, starts: np.ndarray, begin: int
) -> None:
    """Fill the document id and in-document position of stream tokens ``[begin, end)``.

    ``end = begin + len(doc_ids)``. Document ``k`` (global index ``indices[k]``) starts
    at stream position ``starts[k]`` and owns every position up to ``starts[k + 1]``
    (its boundary token included); the last one owns up to ``end``. Requires
    ``starts[0] <= begin`` and ``starts[-2] < end`` (``len(starts) == len(indices) + 1``).
    """
    _document_ids(doc_ids, pos_ids, indices, starts, begin)


def document_id_runs(
    indices: np.ndarray, starts: np.ndarray, begin: int, size: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(doc_ids, pos_ids)``: :func:`fill_document_ids` into two new int64 arrays of
    ``size`` (the same values, bitwise; the same requirements on the arguments).

    The numpy backend builds them by runs (one ``np.repeat``, one join of ramp slices)
    instead of filling preallocated arrays, which is what makes it cheap.
    """
    return _id_runs(indices, starts, begin, size)


def mixed_radix_kernel() -> Callable[..., None] | None:
    """The compiled loop of
    :meth:`~mixle.data._mixed_radix.MixedRadixPermutation.images` with the numba
    backend, else ``None`` (the numpy rounds then run; the images are bitwise the same).

    ``kernel(out, params, tables, moduli)``: ``out`` (uint64) receives the walked images
    of ``start, start + 1, ...`` for ``params = [start, n, b]`` (uint64), the round
    tables as one uint64 array of ``(rounds, max(a, b))`` and the rounds' moduli (uint64).
    """
    return _mixed_radix


def legacy_permutation(bit_generator: np.random.MT19937, count: int) -> np.ndarray:
    """``RandomState(bit_generator).permutation(count)`` as int64, bitwise.

    With the numba backend and at least :data:`_SHUFFLE_COMPILED_MIN` documents, the
    same Fisher-Yates swaps are made from the same raw draws by the compiled kernel, in
    chunks of up to :data:`_SHUFFLE_DRAWS` draws (``bit_generator`` then ends further
    along its stream than ``RandomState`` would leave it). Otherwise, and for
    ``count > 2**32`` (whose legacy draws are 64-bit), numpy's own.
    """
    kernel = _shuffle
    if kernel is None or not _SHUFFLE_COMPILED_MIN <= count <= 0x100000000:
        order = np.random.RandomState(bit_generator).permutation(count)
        return order.astype(np.int64, copy=False)
    values = np.arange(count, dtype=np.int64)
    targets = np.empty(max(min(_SHUFFLE_DRAWS // 2, count), 1), dtype=np.int64)
    raw = np.empty(0, dtype=np.int64)
    top = count - 1
    while top >= 1:
        # Draws left over from the last chunk come first: the stream is consumed in order.
        # A step takes fewer than 2 draws on average: a small permutation draws little.
        wanted = min(_SHUFFLE_DRAWS, 2 * top + 1024)
        fresh = bit_generator.random_raw(wanted).view(np.int64)
        raw = np.concatenate((raw, fresh)) if raw.size else fresh
        top, used = kernel(values, raw, top, targets)
        raw = raw[used:]
    return values
