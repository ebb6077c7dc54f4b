"""An epoch's document order cut into windows whose sizes are known at plan time.

An :class:`OrderWindows` is the order a plan packs, handed out a window at a time: the
plan learns every window's token and document totals up front (O(windows) values), so
it can place any row in O(log windows), and it reads a window's documents only when a
batch needs that window. Two orders implement it:

- :class:`BlockOrder` (``"blocks"``, versions 1 and 2), the hierarchical order that
  scales: documents ``[0, N)`` are grouped into contiguous *blocks* of
  ``block_documents`` (B) documents (the last may be short); a keyed bijection over
  block ids (key domain ``(BLOCKS_DOMAIN,)``) orders the blocks; consecutive runs of
  ``window_blocks`` (W) blocks of that order are the *windows*; inside window ``k`` its
  documents (its blocks' documents concatenated) are permuted by a second bijection
  keyed by ``(seed, epoch)`` and the domain ``(k, WINDOW_DOMAIN)``. Version 2 (the
  default) uses :class:`~mixle.data._mixed_radix.MixedRadixPermutation` for both and
  concatenates a window's blocks in ascending id; version 1 (kept for its states)
  :class:`~mixle.data._permutation.FeistelPermutation`, whose domain is up to ``4 n``,
  and the blocks in block order. The
  epoch order is windows ``0, 1, ...`` concatenated: a pure function of
  ``(num_documents, seed, epoch, B, W)``, with every document exactly once. Its
  totals come from the cumulative token offsets at the ``N / B + 1`` block
  boundaries, a window's lengths from the offsets of its own documents: no array
  with one entry per document is ever built. :meth:`BlockOrder.locate` inverts it.
- :class:`PermutationWindows` (``"permutation"``, version 1), the seed's
  ``RandomState`` permutation (:func:`~mixle.data._order.global_document_order`) cut
  into consecutive chunks: O(documents), kept for states saved with it and for the
  per-rank layout.

Differences from the shared design note (design25.md), for the plans that consume this:

- :meth:`OrderWindows.window` returns a window's documents *and* their lengths (the
  plan needs both; :meth:`OrderWindows.window_documents` is its first half).
- :class:`BlockOrder` takes a :class:`CumulativeOffsets` (or any callable
  ``indices -> offsets``) rather than the documents, so a test or a virtual source can
  drive it without a corpus; :func:`cumulative_offsets` is the one-call form.
- The Feistel keys: the block order is keyed ``(seed, epoch, BLOCKS_DOMAIN)`` and
  window ``k``'s ``(seed, epoch, k, WINDOW_DOMAIN)`` (the domain words end nonzero:
  ``SeedSequence`` pads with zeros).
- The lazy layout is :class:`~mixle.data._windowed_layout.WindowedLayout`; every
  consumer reads a layout through :class:`~mixle.data._packing.RowLayout`
  (``stream_tokens``, ``segment(begin, end) -> StreamLayout`` with stream-absolute
  ``starts`` and the segment's first document position in ``first``,
  ``document_order()``). A row plan that packs windows implements
  :class:`~mixle.data._row_plan.WindowedRowPlan` (``build_windows``).
- Options and identity: :class:`~mixle.data._options.OrderOptions` (``name``,
  ``block_documents``, ``window_blocks``; defaults 4096 and 64, capped by the corpus);
  the identity field is ``"order"`` as in the note, absent for the permutation
  (:mod:`~mixle.data._order_state` checks it on load).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from mixle._checks import nonnegative_int, positive_int
from mixle.data._documents import DocumentSource, offset_reader, offset_runs_reader
from mixle.data._mixed_radix import MixedRadixPermutation
from mixle.data._permutation import FeistelPermutation
from mixle.errors import ArgumentError

__all__ = [
    "BLOCKS_DOMAIN",
    "BLOCK_ORDER_VERSIONS",
    "KEPT_RUN",
    "WINDOW_DOMAIN",
    "BlockOrder",
    "CumulativeOffsets",
    "OrderWindows",
    "PermutationWindows",
    "TokenOffsets",
    "check_block_order_version",
    "check_block_sizes",
    "cumulative_offsets",
    "index_ranges",
]

# Blocks whose totals `BlockOrder.window_totals` gathers per pass, and positions of a
# window placed per pass (128 KiB of int64: the buffers stay in cache).
_TOTALS_CHUNK = _CHUNK = 1 << 14

#: Documents of the longest run whose lengths :meth:`CumulativeOffsets.run_lengths`
#: keeps (one default window: 2 MiB).
KEPT_RUN = 1 << 18

#: Key-domain words of the blocks order's two bijections ("mxblocks", "mxwindow").
BLOCKS_DOMAIN = 0x6D78626C6F636B73
WINDOW_DOMAIN = 0x6D7877696E646F77

#: The ``"blocks"`` order's versions, oldest first (the last is what new streams use):
#: 1, balanced binary Feistel bijections and a window's blocks in block order; 2, the
#: mixed-radix bijections and a window's blocks in ascending id (see the module notes).
BLOCK_ORDER_VERSIONS = (1, 2)
_BIJECTIONS: dict[int, type[FeistelPermutation] | type[MixedRadixPermutation]] = {
    1: FeistelPermutation,
    2: MixedRadixPermutation,
}

TokenOffsets = Callable[[np.ndarray], np.ndarray]
"""``indices -> offsets``: int64 cumulative token offsets before each document index."""


class OrderWindows(Protocol):
    """An epoch's document order cut into windows whose sizes are known at plan time.

    Attributes
    ----------
    name, version
        The order's name (``"permutation"``, ``"blocks"``) and version, as a state
        records them.
    num_windows
        Windows of the epoch; window ``k`` follows window ``k - 1`` in the order.
    """

    name: str
    version: int
    num_windows: int

    def window(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Window ``k``'s int64 document ids in epoch order and their int64 lengths."""
        ...

    def window_documents(self, k: int) -> np.ndarray:
        """Window ``k``'s int64 document ids, in epoch order."""
        ...

    def window_totals(self) -> tuple[np.ndarray, np.ndarray]:
        """``(tokens, documents)`` of every window, int64 arrays of ``num_windows``."""
        ...


def _differences_in_place(values: np.ndarray, buffer: np.ndarray) -> bool:
    """Replace ``values[i]`` by ``values[i + 1] - values[i]`` for every ``i`` but the
    last (left as it was), a chunk of ``len(buffer)`` at a time through ``buffer``, when
    ``values`` is a writable int64 array of its own; return whether it was done.

    Forward and in place is safe: each chunk reads one value past its end, which the
    next chunk has not written yet.
    """
    if not (values.flags.owndata and values.flags.writeable and values.dtype == np.int64):
        return False
    chunk, last = buffer.shape[0], values.shape[0] - 1
    for first in range(0, last, chunk):
        stop = min(first + chunk, last)
        part = np.subtract(
            values[first + 1 : stop + 1], values[first:stop], out=buffer[: stop - first]
        )
        values[first:stop] = part
    return True


class CumulativeOffsets:
    """The cumulative token offset before chosen documents of ``documents``.

    ``offsets(indices)[j]`` is the number of tokens of documents ``0 .. indices[j] -
    1`` (``indices`` in ``[0, len(documents)]``). A source with ``token_offsets`` (see
    :class:`~mixle.data._documents.OffsetReadableSource`; a sharded corpus) answers
    from its offsets, O(len(indices)); any other source falls back to one int64
    cumulative sum of its ``lengths``, built on first use and kept: O(documents), meant
    for in-memory collections.
    """

    def __init__(self, documents: DocumentSource) -> None:
        self.documents = documents
        self._table: np.ndarray | None = None
        # The last run's lengths (see `run_lengths`): ``(first, count, lengths)``.
        self._kept_run: tuple[int, int, np.ndarray] | None = None

    def run_lengths(self, first: int, count: int) -> np.ndarray:
        """The lengths of documents ``first .. first + count - 1`` (int64, read-only),
        from one run of offsets. The last run of at most :data:`KEPT_RUN` documents is
        kept: a source of one window reads its lengths once, not once per epoch (the
        documents must not change while they are streamed)."""
        kept = self._kept_run
        if kept is not None and kept[:2] == (first, count):
            return kept[2]
        offsets = self.runs(np.array([first], np.int64), np.array([count + 1], np.int64))
        if not _differences_in_place(offsets, np.empty(min(_CHUNK, count + 1), np.int64)):
            offsets = np.diff(offsets)
        lengths = offsets[:count]
        lengths.setflags(write=False)
        if count <= KEPT_RUN:
            self._kept_run = (first, count, lengths)
        return lengths

    def runs(self, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """``self(index_ranges(starts, counts))``: the offsets of runs of consecutive
        documents, from the source's ``token_offset_runs`` when it has one (see
        :class:`~mixle.data._documents.OffsetRunsReadableSource`: no index array)."""
        reader = offset_runs_reader(self.documents)
        if reader is not None:
            return np.asarray(reader.token_offset_runs(starts, counts), dtype=np.int64)
        return self(index_ranges(starts, counts))

    def __call__(self, indices: np.ndarray) -> np.ndarray:
        reader = offset_reader(self.documents)
        if reader is not None:
            return np.asarray(reader.token_offsets(indices), dtype=np.int64)
        if self._table is None:
            lengths = np.asarray(self.documents.lengths, dtype=np.int64)
            table = np.zeros(len(lengths) + 1, dtype=np.int64)
            np.cumsum(lengths, out=table[1:])
            self._table = table
        return self._table[np.asarray(indices, dtype=np.int64)]


def cumulative_offsets(
    documents: DocumentSource, indices: Sequence[int] | np.ndarray
) -> np.ndarray:
    """The cumulative token offsets of ``documents`` at ``indices`` (see
    :class:`CumulativeOffsets`; the fallback's table is not kept across calls)."""
    return CumulativeOffsets(documents)(np.asarray(indices, dtype=np.int64))


def check_block_sizes(num_documents: int, block_documents: int, window_blocks: int) -> None:
    """Refuse block and window sizes that are not positive or exceed the corpus.

    Raises
    ------
    ArgumentTypeError
        A size is a bool, float or non-integer.
    ArgumentError
        ``block_documents`` is not in ``[1, num_documents]`` or ``window_blocks`` not
        in ``[1, ceil(num_documents / block_documents)]`` (an empty corpus accepts 1).
    """
    block = positive_int("block_documents", block_documents)
    window = positive_int("window_blocks", window_blocks)
    documents = max(num_documents, 1)
    if block > documents:
        raise ArgumentError(
            f"`block_documents` must be between 1 and the corpus's {documents} documents. "
            f"Got {block} instead."
        )
    blocks = -(-documents // block)
    if window > blocks:
        raise ArgumentError(
            f"`window_blocks` must be between 1 and the corpus's {blocks} blocks of "
            f"{block} documents. Got {window} instead."
        )


def check_block_order_version(version: int) -> int:
    """Return ``version`` when it is one of :data:`BLOCK_ORDER_VERSIONS`.

    Raises
    ------
    ArgumentTypeError
        ``version`` is not an int.
    ArgumentError
        It is not a version of the ``"blocks"`` order.
    """
    version = positive_int("order_version", version)
    if version not in BLOCK_ORDER_VERSIONS:
        raise ArgumentError(
            f"`order_version` must be one of {list(BLOCK_ORDER_VERSIONS)} (the 'blocks' "
            f"order's versions). Got {version} instead."
        )
    return version


def index_ranges(starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """``starts[0] .. starts[0] + sizes[0] - 1, starts[1] ..`` in one vectorised pass.

    One fresh array, the result (a fresh process pays a page fault per 4 KiB of every
    new array): runs of one size are a broadcast sum, others a cumulative sum of steps.
    """
    starts = np.asarray(starts, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    if not sizes.size:
        return np.empty(0, dtype=np.int64)
    size = int(sizes[0])
    if bool((sizes == size).all()):
        return (starts[:, None] + np.arange(size, dtype=np.int64)).reshape(-1)
    if not bool(sizes.all()):  # empty runs add nothing
        kept = sizes != 0
        starts, sizes = starts[kept], sizes[kept]
    ends = np.cumsum(sizes)
    out = np.ones(int(ends[-1]) if ends.size else 0, dtype=np.int64)
    if out.size:
        # Each run's first value is a step from the previous run's last one.
        out[0] = starts[0]
        out[ends[:-1]] = starts[1:] - starts[:-1] - sizes[:-1] + 1
        np.cumsum(out, out=out)
    return out


class BlockOrder:
    """The ``"blocks"`` order of one epoch (see the module docstring).

    Parameters
    ----------
    num_documents
        Documents of the corpus (``N``).
    offsets
        Cumulative token offsets at chosen document indices (:class:`CumulativeOffsets`,
        whose :meth:`~CumulativeOffsets.runs` then reads a window's blocks as runs, or
        any callable ``indices -> offsets``).
    seed, epoch
        Nonnegative ints: the order's key.
    block_documents, window_blocks
        ``B`` and ``W`` (validated by :func:`check_block_sizes`).
    version
        One of :data:`BLOCK_ORDER_VERSIONS` (default: the newest); a saved state
        resumes only with the version it names.

    Raises
    ------
    ArgumentError
        A size does not fit the corpus, or ``version`` is not one of
        :data:`BLOCK_ORDER_VERSIONS`.

    Notes
    -----
    Construction is O(1). :meth:`window_totals` reads ``N / B + 1`` offsets and keeps
    the block order and the block totals (``16 N / B`` bytes); :meth:`window` reads the
    offsets of its ``<= B W`` documents.
    """

    name = "blocks"

    def __init__(
        self,
        num_documents: int,
        offsets: TokenOffsets,
        *,
        seed: int,
        epoch: int,
        block_documents: int,
        window_blocks: int,
        version: int = BLOCK_ORDER_VERSIONS[-1],
    ) -> None:
        self.num_documents = nonnegative_int("num_documents", num_documents)
        check_block_sizes(self.num_documents, block_documents, window_blocks)
        self.version = check_block_order_version(version)
        self._bijection = _BIJECTIONS[self.version]
        self.offsets = offsets
        self.seed = nonnegative_int("seed", seed)
        self.epoch = nonnegative_int("epoch", epoch)
        self.block_documents, self.window_blocks = block_documents, window_blocks
        self.num_blocks = -(-self.num_documents // block_documents)
        self.num_windows = -(-self.num_blocks // window_blocks)
        self._block_bijection: FeistelPermutation | MixedRadixPermutation | None = None
        self._block_order: np.ndarray | None = None
        # The last window's shuffle: a read and the read-ahead hints ask for the same
        # window (one tuple, replaced whole, so a prefetch thread sees a pair or none).
        self._last_shuffle: tuple[int, np.ndarray] | None = None

    @property
    def _blocks(self) -> FeistelPermutation | MixedRadixPermutation:
        """The bijection over block ids (built on first use: a one-window corpus of
        version 2 never needs it)."""
        if self._block_bijection is None:
            self._block_bijection = self._bijection(
                self.num_blocks, self.seed, self.epoch, domain=(BLOCKS_DOMAIN,)
            )
        return self._block_bijection

    def _window_permutation(self, k: int, size: int) -> FeistelPermutation | MixedRadixPermutation:
        return self._bijection(size, self.seed, self.epoch, domain=(k, WINDOW_DOMAIN))

    def _shuffle(self, k: int, size: int) -> np.ndarray:
        """Window ``k``'s shuffle: its position ``j`` holds natural document ``[j]``
        (the last one kept)."""
        last = self._last_shuffle
        if last is not None and last[0] == k:
            return last[1]
        shuffle = self._window_permutation(k, size).images(0, size)
        shuffle.setflags(write=False)
        self._last_shuffle = (k, shuffle)
        return shuffle

    def _offset_runs(self, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """The offsets of runs of consecutive documents (a window's blocks): in one call
        when the reader can (:meth:`CumulativeOffsets.runs`), else via an index array."""
        if isinstance(self.offsets, CumulativeOffsets):
            return self.offsets.runs(starts, counts)
        return np.asarray(self.offsets(index_ranges(starts, counts)), dtype=np.int64)

    def _block_sizes(self, blocks: np.ndarray) -> np.ndarray:
        starts = blocks * self.block_documents
        return np.minimum(starts + self.block_documents, self.num_documents) - starts

    def _window_blocks(self, k: int) -> np.ndarray:
        """Block ids of window ``k``, in block order."""
        if not 0 <= k < self.num_windows:
            raise IndexError(f"window {k} is outside [0, {self.num_windows}).")
        first = k * self.window_blocks
        stop = min(first + self.window_blocks, self.num_blocks)
        if self._block_order is not None:
            return self._block_order[first:stop]
        return self._blocks.images(first, stop)

    def _slots(
        self, sizes: np.ndarray, begins: np.ndarray, natural: np.ndarray, out: np.ndarray
    ) -> np.ndarray:
        """The block slot (position in the window's block order) of each natural
        position of a window whose blocks have ``sizes`` and begin at ``begins``
        (written to ``out`` where no search is needed)."""
        block = self.block_documents
        if sizes.shape[0] < 2 or int(sizes[:-1].min()) == block:
            # Every block but the last is whole (all windows but one, if any): a shift
            # or a division, no search.
            return self._divided(natural, out)
        short = np.flatnonzero(sizes != block)
        if short.shape[0] == 1:
            # One short block (the corpus's last): a position after it is its shortfall
            # further on than a window of whole blocks would place it (the window that
            # holds it, every epoch: a searchsorted of all its positions cost ~4x this).
            slot = int(short[0])
            np.greater_equal(natural, int(begins[slot] + sizes[slot]), out=out)
            out *= block - int(sizes[slot])
            out += natural
            return self._divided(out, out)
        return np.searchsorted(begins, natural, side="right") - 1

    def _divided(self, natural: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``natural // block_documents`` into ``out`` (a shift for a power of two)."""
        block = self.block_documents
        if block & (block - 1) == 0:
            return np.right_shift(natural, block.bit_length() - 1, out=out)
        return np.floor_divide(natural, block, out=out)

    def _placed(
        self,
        blocks: np.ndarray,
        sizes: np.ndarray,
        natural: np.ndarray,
        read: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """The document ids at ``natural`` positions of the window of ``blocks`` (its
        blocks' documents concatenated in block order, of ``sizes``), and with
        ``read = (offsets, read_begins)`` (the window's offsets read a block at a time,
        each block's run ending with its end offset, and where each block begins in
        that read) their lengths.

        A chunk of ``_CHUNK`` positions at a time through three reused buffers: the
        results are the only arrays of the window's size written (a fresh process pays
        a page fault per 4 KiB of every new array). Table lookups are ``np.take`` into a
        buffer (several times cheaper than fancy indexing here). A length is one lookup
        in the read's differences, taken in place over the read when it is the
        caller's own array (one random read per document instead of two: the shuffled
        positions reach all over the window's 2 MB of offsets), else two neighbouring
        offsets.
        """
        begins = np.cumsum(sizes) - sizes
        id_table = blocks * self.block_documents - begins
        count = natural.shape[0]
        documents = np.empty(count, dtype=np.int64)
        lengths = None
        chunk = max(min(_CHUNK, count), 1)
        slots_buffer, places, before = (np.empty(chunk, dtype=np.int64) for _ in range(3))
        differences = False
        if read is not None:
            offsets, read_begins = read
            lengths = np.empty(count, dtype=np.int64)
            read_table = read_begins - begins
            differences = _differences_in_place(offsets, before)
        for first in range(0, count, chunk):
            part = natural[first : first + chunk]
            size = part.shape[0]
            slots = self._slots(sizes, begins, part, slots_buffer[:size])
            ids = np.take(id_table, slots, out=documents[first : first + size], mode="wrap")
            ids += part
            if lengths is not None:
                at = np.take(read_table, slots, out=places[:size], mode="wrap")
                at += part
                if differences:
                    np.take(offsets, at, out=lengths[first : first + size], mode="wrap")
                    continue
                start = np.take(offsets, at, out=before[:size], mode="wrap")
                at += 1
                end = np.take(offsets, at, out=lengths[first : first + size], mode="wrap")
                end -= start
        return documents, lengths

    def _members(self, k: int) -> np.ndarray:
        """Window ``k``'s blocks in the order its documents are numbered before its own
        shuffle: block order (version 1) or ascending id (version 2: the shuffle makes
        the arrangement immaterial, and ascending blocks are read as they are placed)."""
        if self.version == 1:
            return self._window_blocks(k)
        if self.num_windows == 1:  # every block, whatever their order
            return np.arange(self.num_blocks, dtype=np.int64)
        return np.sort(self._window_blocks(k))

    def _natural(self, k: int) -> np.ndarray:
        """Window ``k``'s documents before its own shuffle: its blocks, concatenated."""
        blocks = self._members(k)
        return index_ranges(blocks * self.block_documents, self._block_sizes(blocks))

    def _consecutive(self, blocks: np.ndarray) -> bool:
        """Whether ``blocks`` (ascending) are one run of ids (e.g. a one-window corpus)."""
        return self.version > 1 and int(blocks[-1]) - int(blocks[0]) == blocks.shape[0] - 1

    def _run_window(self, blocks: np.ndarray, size: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`window` of consecutive ``blocks`` (``size`` documents from the first
        block's first): the offsets read as one run and differenced in place, a
        document's id its shuffled position plus the first id, its length one lookup."""
        first = int(blocks[0]) * self.block_documents
        if isinstance(self.offsets, CumulativeOffsets):
            natural = self.offsets.run_lengths(first, size)
        else:
            natural = np.diff(np.asarray(self.offsets(np.arange(first, first + size + 1))))
        shuffle = self._shuffle(k, size)
        # The shuffle (read-only, kept) is the ids of a window from document 0 on, e.g.
        # a one-window corpus: no copy (each fresh array of the window's size costs
        # a page fault per 4 KiB, ~3 us each here).
        return shuffle if first == 0 else shuffle + first, np.take(natural, shuffle)

    def window(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        blocks = self._members(k)
        sizes = self._block_sizes(blocks)
        if blocks.size and self._consecutive(blocks):
            return self._run_window(blocks, int(sizes.sum()), k)
        # Documents of a block are consecutive: its lengths are the differences of the
        # offsets of its documents and of its end. Those are read in one call, the
        # blocks in ascending id (each a run of one shard's offsets, or two); a
        # document's length is at its block's place in that read plus its place in the
        # block (a block's last value is its end: the difference from it to the next
        # block's first is never taken).
        ascending = np.argsort(blocks, kind="stable")
        read_sizes = sizes[ascending] + 1
        values = self._offset_runs(blocks[ascending] * self.block_documents, read_sizes)
        read_begins = np.empty_like(read_sizes)
        read_begins[ascending] = np.cumsum(read_sizes) - read_sizes
        shuffle = self._shuffle(k, int(sizes.sum()))
        documents, lengths = self._placed(blocks, sizes, shuffle, (values, read_begins))
        assert lengths is not None
        return documents, lengths

    def window_documents(self, k: int) -> np.ndarray:
        blocks = self._members(k)
        sizes = self._block_sizes(blocks)
        return self._placed(blocks, sizes, self._shuffle(k, int(sizes.sum())))[0]

    def documents_at(self, k: int, positions: np.ndarray) -> np.ndarray:
        """Window ``k``'s document ids at ``positions`` (int64 positions in the window,
        in epoch order): ``window_documents(k)[positions]`` in O(len(positions)) work
        besides the window's block ids, without shuffling the whole window."""
        blocks = self._members(k)
        sizes = self._block_sizes(blocks)
        natural = self._window_permutation(k, int(sizes.sum()))(positions)
        return self._placed(blocks, sizes, natural.reshape(-1))[0].reshape(natural.shape)

    def block_order(self) -> np.ndarray:
        """Every block id, in the epoch's block order (int64, ``num_blocks``; kept)."""
        if self._block_order is None:
            self._block_order = self._blocks.images(0, self.num_blocks)
        return self._block_order

    def window_totals(self) -> tuple[np.ndarray, np.ndarray]:
        if not self.num_blocks:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        if self.num_windows == 1:  # the whole corpus: no block order needed
            ends = np.asarray(self.offsets(np.array([0, self.num_documents])), dtype=np.int64)
            return ends[1:] - ends[:1], np.array([self.num_documents], dtype=np.int64)
        blocks, block, window = self.num_blocks, self.block_documents, self.window_blocks
        boundaries = np.arange(0, (blocks + 1) * block, block, dtype=np.int64)
        boundaries[-1] = self.num_documents
        offsets = self.offsets(boundaries)
        # Each block's tokens (end offset less start offset) in natural order, written
        # over the boundaries (no longer needed, and already paged in): one lookup per
        # block in block order below instead of two.
        if np.may_share_memory(offsets, boundaries):
            block_tokens = np.diff(offsets)
        else:
            block_tokens = np.subtract(offsets[1:], offsets[:-1], out=boundaries[:-1])
        order = self.block_order()
        # Each window's tokens: its blocks' totals gathered in block order a chunk of
        # whole windows at a time into a reused buffer.
        tokens = np.empty(self.num_windows, dtype=np.int64)
        step = window * max(_TOTALS_CHUNK // window, 1)
        buffer = np.empty(min(step, blocks), dtype=np.int64)
        for first in range(0, blocks, step):
            part = order[first : first + step]
            size = part.shape[0]
            totals = np.take(block_tokens, part, out=buffer[:size], mode="wrap")
            tokens[first // window : (first + size + window - 1) // window] = np.add.reduceat(
                totals, np.arange(0, size, window)
            )
        # Each window's documents, in closed form: whole blocks, the last window's
        # fewer blocks, and the short last block's shortfall in the window that holds it.
        documents = np.full(self.num_windows, window * block, dtype=np.int64)
        documents[-1] = (blocks - (self.num_windows - 1) * window) * block
        shortfall = blocks * block - self.num_documents
        if shortfall:
            place = int(self._blocks.inverse(np.array([blocks - 1]))[0])
            documents[place // window] -= shortfall
        return tokens, documents

    def locate(self, documents: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(window, position_in_window)`` of each document id, without a pass.

        The inverse of the order: ``window_documents(w)[p] == d`` for ``(w, p) =
        locate(d)``. O(len(documents)) work.

        Raises
        ------
        IndexError
            A document id is outside ``[0, num_documents)``.
        """
        ids = np.asarray(documents, dtype=np.int64).reshape(-1)
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= self.num_documents):
            bad = int(ids[(ids < 0) | (ids >= self.num_documents)][0])
            raise IndexError(f"document {bad} is outside [0, {self.num_documents}).")
        block = ids // self.block_documents
        place = self._blocks.inverse(block)
        window = place // self.window_blocks
        positions = np.empty_like(ids)
        for k in np.unique(window).tolist():
            chosen = window == k
            members = self._members(k)
            sizes = self._block_sizes(members)
            # Where each document's block begins among the window's documents.
            if self.version == 1:
                slots = place[chosen] - k * self.window_blocks
            else:
                slots = np.searchsorted(members, block[chosen])
            begins = np.cumsum(sizes) - sizes
            natural = begins[slots] + ids[chosen] - block[chosen] * self.block_documents
            inverse = self._window_permutation(k, int(sizes.sum())).inverse
            positions[chosen] = inverse(natural)
        return window, positions


class PermutationWindows:
    """The seed's permutation order cut into consecutive chunks of ``window_documents``.

    Parameters
    ----------
    order
        The epoch's document order (:func:`~mixle.data._order.global_document_order`,
        after any ``sequence_selector``), int64.
    lengths
        Every document's length (a length table).
    window_documents
        Positions per window (positive); the last window may be short.

    Notes
    -----
    O(documents): the order and the length table are held; :meth:`window_totals`
    gathers every length once.
    """

    name = "permutation"
    version = 1

    def __init__(self, order: np.ndarray, lengths: np.ndarray, window_documents: int) -> None:
        self.order = order
        self.lengths = lengths
        self.size = positive_int("window_documents", window_documents)
        self.num_windows = -(-len(order) // self.size)

    def window_documents(self, k: int) -> np.ndarray:
        if not 0 <= k < self.num_windows:
            raise IndexError(f"window {k} is outside [0, {self.num_windows}).")
        return self.order[k * self.size : (k + 1) * self.size]

    def window(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        documents = self.window_documents(k)
        return documents, self.lengths.take(documents).astype(np.int64)

    def window_totals(self) -> tuple[np.ndarray, np.ndarray]:
        if not self.num_windows:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        firsts = np.arange(0, len(self.order), self.size)
        tokens = np.add.reduceat(self.lengths.take(self.order).astype(np.int64), firsts)
        documents = np.diff(np.append(firsts, len(self.order)))
        return tokens.astype(np.int64), documents.astype(np.int64)
