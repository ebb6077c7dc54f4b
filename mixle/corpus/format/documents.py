"""ShardedDocuments: a lazy, memory-mapped ``Sequence`` of documents over a store.

Opening a version-1 corpus reads the manifest and the 32-byte header of every offsets
file (plus file sizes) and nothing else; a version-2 corpus, its manifest and shard
table only (:mod:`mixle.corpus.format.shard_table`), each shard's files being checked
when the shard is first touched. A shard's files are memory-mapped the first time one of its
documents is read; at most ``max_open_shards`` shards stay mapped (CLOCK, an LRU
approximation, picks the shard to unmap). ``docs[i]`` is a bisect over cumulative
document counts, two offset reads and one slice: a zero-copy, read-only view.
"""

from __future__ import annotations

import bisect
import ctypes
import mmap
import operator
import os
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self, overload

import numpy as np

from mixle._arrays import distinct, in_first_seen_order, run_indices
from mixle._checks import exact_int, positive_int
from mixle._file_checks import read_regular_files
from mixle._gather import SplitOutput, gather_pieces
from mixle.corpus.format.block_offsets import BLOCK_OFFSETS_NAME, BlockOffsets, read_block_offsets
from mixle.corpus.format.descriptors import exhaustion_error, is_descriptor_exhaustion, shard_budget
from mixle.corpus.format.document_offsets import DocumentOffsets, open_document_offsets
from mixle.corpus.format.manifest import Manifest, ShardEntry, parse_manifest
from mixle.corpus.format.origins import Origin, OriginsTable, read_origins
from mixle.corpus.format.shard_loader import ShardLoader
from mixle.corpus.format.shard_table import ShardTable
from mixle.corpus.format.spec import (
    HEADER_SIZE,
    OffsetsHeader,
    check_offset_ends,
    check_offsets,
    check_offsets_range,
)
from mixle.corpus.format.verify import check_header, check_shard_files, verify_store
from mixle.corpus.format.view import DocumentsView, as_index
from mixle.errors import ArgumentTypeError, CorpusFormatError

__all__ = ["DEFAULT_MAX_OPEN_SHARDS", "ShardedDocuments", "open_documents"]

if TYPE_CHECKING:
    from mixle.corpus.format.store import ShardStore

#: Default bound on simultaneously mapped shards (two mappings each), far below the
#: usual per-process limit of 65,530 mappings.
DEFAULT_MAX_OPEN_SHARDS = 256
_LITTLE_ENDIAN = sys.byteorder == "little"
_PAGE = mmap.PAGESIZE
_MADV_WILLNEED = getattr(mmap, "MADV_WILLNEED", None)
# A prefetch call checks this many of its documents (spread over the call) with
# mincore(2), each up to _SAMPLE_PAGES pages; when all are resident it issues no madvise.
# After _RESIDENT_STREAK calls in a row found everything resident, only every
# _RESIDENT_RECHECK-th call checks, with one sample, until one misses: each mincore is a
# system call, 30-70 us on a VM once a batch's copies have cooled the caches.
_RESIDENCY_SAMPLES = 4
_SAMPLE_PAGES = 4
_RESIDENT_STREAK = 8
_RESIDENT_RECHECK = 4
_UNSET: Any = object()
# take() of a list this short indexes document by document (see ShardedDocuments._take_each).
_TAKE_LOOP_MAX = 256
# A shard of up to _CHECK_WHOLE documents has its offsets checked whole when it is mapped
# (~1 ms); a larger one block by block of _CHECK_BLOCK documents (2 KiB of offsets),
# each block when one of its documents is first read, the blocks of one read in one
# vectorised pass, so opening a stream over a 10M-document shard does not pay ~40 ms
# for offsets it does not read (a first batch of ~2,000 short documents checks ~2,000
# blocks, 5% of the file, in ~2 ms).
_CHECK_SHIFT = 8
_CHECK_BLOCK = 1 << _CHECK_SHIFT
# token_offsets over more shards than this reads their offsets files in one lean pass
# (a plan window of the blocks order over 10^4 small shards: ~0.1 s instead of ~1.5 s).
_BULK_OFFSETS_SHARDS = 16
# ... when those shards are small: at most this many documents per index asked for, or
# on average (offsets files of 512 KiB); large ones answer from their mappings, a page
# per index (reading them whole is O(documents): 8 GB of offsets at 10^9 documents).
_BULK_OFFSETS_PER_INDEX = 64
_BULK_SHARD_DOCUMENTS = 1 << 16
_CHECK_WHOLE = 1 << 18
# A hint for a shard not open yet whose tokens file is at most this big advises the
# kernel of the whole file (open, posix_fadvise, close: ~5 us) instead of mapping the
# shard (~100 us with its checks, and a slot another shard may need first): a plan
# window over ten-document shards names hundreds of shards per batch.
_HINT_FILE_BYTES = 256 * 1024
_FADV_WILLNEED = getattr(os, "POSIX_FADV_WILLNEED", None)
_HINT_FLAGS = (
    os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
)
_mincore_function: Any = _UNSET
# The ufunc reduction, not ndarray.any: that goes through a Python wrapper, which costs
# as much as the test on a read's few hundred flags.
_all = np.logical_and.reduce


def _mincore() -> Any:
    """libc ``mincore`` through ctypes, or ``None`` where it is unavailable."""
    global _mincore_function
    if _mincore_function is _UNSET:
        try:
            function = ctypes.CDLL(None, use_errno=True).mincore
            function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
            function.restype = ctypes.c_int
            _mincore_function = function
        except (OSError, AttributeError, TypeError):  # pragma: no cover - no POSIX libc
            _mincore_function = None
    return _mincore_function


def _all_resident(samples: list[tuple[int, int, int]]) -> bool:
    """Whether every ``(address, begin, end)`` byte range is in the page cache (sampled).

    ``address`` is a mapping's base, ``begin`` page-aligned. False when ``mincore`` is
    unavailable or fails, so the caller then hints everything.
    """
    mincore = _mincore()
    if mincore is None:
        return False
    vector = ctypes.create_string_buffer(_SAMPLE_PAGES)
    for address, begin, end in samples:
        length = min(end - begin, _SAMPLE_PAGES * _PAGE)
        if length <= 0:
            continue
        if mincore(address + begin, length, vector) != 0:
            return False
        if not all(byte & 1 for byte in vector.raw[: -(-length // _PAGE)]):
            return False
    return True


class _OpenShard:
    """The mapped arrays of one shard (kept alive by the LRU and by returned views).

    ``checked_blocks`` flags the blocks of :data:`_CHECK_BLOCK` documents whose offsets
    have been checked (``None`` once all have; ``blocks_left`` counts the others): a
    large offsets file is checked range by range as its documents are first read, never
    a document before its range. The flags start as zeros that no one wrote (a fresh
    process faults in only the pages of the blocks it checks: 26 shards of 33M
    documents were ~800 page faults of ``np.ones`` and a scan per check).
    """

    __slots__ = (
        "address",
        "blocks_left",
        "checked_blocks",
        "mapping",
        "num_tokens",
        "offsets",
        "offsets_array",
        "start",
        "stop",
        "tokens",
        "where",
    )

    def __init__(
        self,
        start: int,
        stop: int,
        tokens: np.ndarray,
        offsets_array: np.ndarray,
        mapping: mmap.mmap | None,
        blocks: int = 0,
        where: str = "",
    ) -> None:
        self.start = start
        self.stop = stop
        self.tokens = tokens
        self.offsets_array = offsets_array
        # np.zeros of more than a page is calloc'd: pages no one touched stay unmapped.
        self.checked_blocks = np.zeros(blocks, dtype=np.bool_) if blocks else None
        self.blocks_left = blocks
        self.where = where
        self.num_tokens = int(offsets_array[-1])
        # memoryview item access returns Python ints, cheaper than numpy scalars.
        self.offsets: Any = (
            offsets_array.data.cast("B").cast("q") if _LITTLE_ENDIAN else offsets_array
        )
        self.mapping = mapping
        # Base address of the token mapping, for mincore(2) residency checks.
        self.address: int = tokens.__array_interface__["data"][0] if mapping is not None else 0

    def check(self, local: int | np.ndarray) -> None:
        """Check the offsets blocks holding shard-local documents ``local`` (once each)."""
        checked = self.checked_blocks
        if checked is None:
            return
        blocks = np.asarray(local, dtype=np.int64).reshape(-1) >> _CHECK_SHIFT
        # Most reads touch only checked blocks (a blocks-order stream never checks a
        # shard whole): one lookup and one test, no sort.
        flags = checked.take(blocks)
        if _all(flags):
            return
        todo = distinct(blocks[~flags])
        if todo.size > 1 and self._blocks_are_valid(todo):
            checked[todo] = True
        else:  # one block, or a bad one among them: check_offsets_range names it
            count = self.stop - self.start
            for block in todo.tolist():
                first = block << _CHECK_SHIFT
                check_offsets_range(
                    self.offsets_array,
                    first,
                    min(first + _CHECK_BLOCK, count),
                    self.num_tokens,
                    self.where,
                )
                checked[block] = True
        self.blocks_left -= todo.size
        if not self.blocks_left:
            self.checked_blocks = None

    def _blocks_are_valid(self, blocks: np.ndarray) -> bool:
        """Whether the windows :func:`check_offsets_range` checks for each of ``blocks``
        (one offset past each end) all pass, in one vectorised pass over a 2-D gather."""
        last = self.stop - self.start  # the offsets array has `last + 1` entries
        steps = np.arange(-1, _CHECK_BLOCK + 2, dtype=np.int64)
        where = np.clip((blocks << _CHECK_SHIFT)[:, None] + steps, 0, last)
        window = self.offsets_array[where]
        return bool(
            (window[:, 1:] >= window[:, :-1]).all()
            and int(window.min()) >= 0
            and int(window.max()) <= self.num_tokens
        )

    def check_all(self) -> None:
        """Check every offset of the shard (a no-op once done)."""
        if self.checked_blocks is not None:
            check_offsets_range(
                self.offsets_array, 0, self.stop - self.start, self.num_tokens, self.where
            )
            self.checked_blocks, self.blocks_left = None, 0


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


# Read-only like a mapped shard's arrays: the compiled gather sees one signature (a
# writable one would be compiled, or loaded from numba's cache, on a fresh process's
# first batch: ~100 ms).
_NO_SHARD = _OpenShard(
    0, 0, _read_only(np.empty(0, np.uint16)), _read_only(np.zeros(1, np.int64)), None
)


class ShardedDocuments(Sequence[np.ndarray]):
    """A read-only sequence of documents stored in the shards of one corpus.

    Obtain one with :func:`open_corpus`. ``docs[i]`` returns a read-only 1-D view of
    the corpus dtype (negative indices allowed, :class:`IndexError` out of range);
    ``docs[a:b:c]`` returns a lazy :class:`DocumentsView`. Offers the optional
    :class:`mixle.data.DocumentSource` capabilities ``lengths``, ``fingerprint`` and
    ``prefetch``, plus :meth:`take` for batched reads.

    Pickles as its location, options and fingerprint (never token bytes); unpickling
    re-reads the manifest and headers, checks the fingerprint is unchanged and maps
    shards lazily again, so it can be handed to DataLoader workers (fork or spawn).

    Notes
    -----
    At most ``max_open_shards`` shards stay mapped, and fewer when the open-file
    limit requires: the reader keeps within the descriptor budget of
    :mod:`mixle.corpus.format.descriptors` (``descriptors_per_shard`` each) and
    raises :class:`~mixle.errors.DescriptorLimitError` naming the limit when it cannot.
    Views keep their shard's mapping alive after it leaves the LRU; the mapping is
    released when the last view is garbage collected. Truncating a shard file while
    it is mapped is outside the contract (the OS raises SIGBUS); replace files by
    rename instead.
    """

    # `gather_into` also writes into a `mixle._gather.SplitOutput` (consecutive
    # batches read with one gather, each into its own buffer).
    gathers_split_output = True

    def __init__(
        self,
        store: ShardStore,
        manifest: Manifest,
        *,
        max_open_shards: int = DEFAULT_MAX_OPEN_SHARDS,
        loader: ShardLoader | None = None,
    ) -> None:
        self._store = store
        self._manifest = manifest
        self._loader = store.shard_loader() if loader is None else loader
        self._max_open_requested = positive_int("max_open_shards", max_open_shards)
        self._max_open = shard_budget(self._max_open_requested, self.descriptors_per_shard)
        self._entries: Sequence[ShardEntry] = manifest.shards
        if isinstance(manifest.shards, ShardTable):
            # Cumulative counts straight from the table's columns; entries are built
            # per shard when one is touched, and its files checked then (once).
            self._starts_array = manifest.shards.document_starts
            token_starts_array = manifest.shards.token_starts
            self._unchecked_files: bytearray | None = bytearray(b"\x01") * len(manifest.shards)
        else:
            self._starts_array = _cumulative(entry.num_documents for entry in self._entries)
            token_starts_array = _cumulative(entry.num_tokens for entry in self._entries)
            self._unchecked_files = None  # checked on open
        # Python lists for bisect on the per-document hot path (C-level tolist).
        starts: list[int] = self._starts_array.tolist()
        self._starts = starts
        self._token_starts_array = token_starts_array
        self._token_starts: list[int] = token_starts_array.tolist()
        self._n: int = starts[-1]
        self._dtype = np.dtype(manifest.dtype).newbyteorder("<")
        # Mapped shards by number, and a CLOCK (second-chance) approximation of LRU:
        # a hit only sets a flag, eviction sweeps the resident list. Cheaper on the
        # hot path than reordering an OrderedDict.
        self._slots: list[_OpenShard | None] = [None] * len(self._entries)
        self._referenced = [False] * len(self._entries)
        self._resident: list[int] = []
        self._hand = 0
        self._checked: set[int] = set()
        self._last = _NO_SHARD
        # (first token, end token, token array) of the shard read_tokens used last.
        self._last_range: tuple[int, int, np.ndarray] = (0, 0, _NO_SHARD.tokens)
        self._lengths: np.ndarray | None = None
        self._lock = threading.Lock()
        self._resident_streak = 0  # prefetch calls in a row whose samples were resident
        self._origins: OriginsTable | None = None  # read on the first origin() call
        # The block-offsets sidecar, read on the first token_offsets call that it answers.
        self._block_offsets: BlockOffsets | None = None
        self._block_offsets_read = False
        # The document-offsets sidecar: opened on the first token_offsets call; dropped
        # (the offsets files answer) when missing or damaged.
        self._document_offsets: DocumentOffsets | None = None
        self._document_offsets_read = False

    # -- the hot path -------------------------------------------------------------
    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> np.ndarray: ...

    @overload
    def __getitem__(self, index: slice) -> DocumentsView: ...

    def __getitem__(self, index: int | slice) -> np.ndarray | DocumentsView:
        if type(index) is not int:
            if isinstance(index, slice):
                return DocumentsView(self, range(self._n)[index])
            index = as_index(index)
        if index < 0:
            index += self._n
        shard = self._last
        if not shard.start <= index < shard.stop:
            if not 0 <= index < self._n:
                raise IndexError(
                    f"document index {index} is out of range for a corpus of {self._n} documents."
                )
            number = bisect.bisect_right(self._starts, index) - 1
            shard = self._slots[number] or self._load(number)
            self._referenced[number] = True
            if shard.checked_blocks is not None:
                shard.check(index - shard.start)
            if shard.checked_blocks is None:  # the fast path above skips the offsets check
                self._last = shard
        local = index - shard.start
        offsets = shard.offsets
        return shard.tokens[offsets[local] : offsets[local + 1]]

    def _shard(self, number: int) -> _OpenShard:
        """The mapped shard ``number`` (mapping it if needed), marked as recently used."""
        shard = self._slots[number] or self._load(number)
        self._referenced[number] = True
        return shard

    # -- opening shards -------------------------------------------------------------
    @property
    def descriptors_per_shard(self) -> int:
        """File descriptors one open shard holds (its loader's; CPython's ``mmap`` keeps
        a duplicate descriptor per mapping). See :mod:`mixle.corpus.format.descriptors`."""
        return self._loader.descriptors_per_shard

    @property
    def loader(self) -> ShardLoader:
        """The :class:`~mixle.corpus.format.shard_loader.ShardLoader` shards are opened with."""
        return self._loader

    def _load(self, number: int) -> _OpenShard:
        if self._slots[number] is None:
            # Make room (and release) before loading, so a loader that downloads into a
            # shared cache may already reclaim the shard pushed out.
            with self._lock:
                victims = self._make_room()
            self._release(victims)
        with self._lock:
            shard = self._slots[number]
            if shard is not None:
                return shard
            entry = self._entries[number]
            unchecked = self._unchecked_files
            # A loader that checks the files it maps needs no reads of ours first (a
            # table's shard on first touch: no header read, no two stats).
            on_open = self._loader.checks_files and entry.tokens_bytes > 0
            if not on_open:
                entry = self._entry_checked(number)
            try:
                arrays = self._loader.open(entry, self._dtype)
            except OSError as exc:
                if is_descriptor_exhaustion(exc):
                    held = (
                        f" ({len(self._resident)} shards open, "
                        f"{self.descriptors_per_shard} descriptors each)"
                    )
                    raise exhaustion_error(f"{self._store.location}/{entry.tokens}", held) from exc
                raise
            if on_open and unchecked is not None and unchecked[number]:
                assert arrays.header is not None  # checks_files: the loader returns it
                check_header(arrays.header, arrays.where, self._manifest.dtype, number, entry)
                unchecked[number] = 0
            if arrays.offsets.shape[0] != entry.num_documents + 1:
                raise CorpusFormatError(f"{arrays.where}: offsets count changed since open.")
            if arrays.checked:
                self._checked.add(number)
            start = self._starts[number]
            shard = _OpenShard(
                start,
                start + entry.num_documents,
                arrays.tokens,
                arrays.offsets,
                arrays.mapping,
                self._unchecked_blocks(number, arrays.offsets, arrays.where),
                arrays.where,
            )
            victims = self._make_room()  # only if another thread filled the set meanwhile
            self._resident.append(number)
            self._slots[number] = shard
        self._release(victims)
        return shard

    def _entry_checked(self, number: int) -> ShardEntry:
        """Shard ``number``'s entry, its files' kinds, sizes and header checked against it
        (done on open for a version-1 manifest; here, on first touch, for a table's)."""
        entry = self._entries[number]
        unchecked = self._unchecked_files
        if unchecked is not None and unchecked[number]:
            check_shard_files(self._store, self._manifest.dtype, number, entry)
            unchecked[number] = 0
        return entry

    def _unchecked_blocks(self, number: int, offsets: np.ndarray, where: str) -> int:
        """Check what is cheap to check of a newly opened offsets array now; return the
        number of blocks left to check as documents are read (0: none)."""
        entry = self._entries[number]
        if number in self._checked:
            return 0
        check_offset_ends(offsets, entry.num_tokens, where)
        if entry.num_documents <= _CHECK_WHOLE:
            check_offsets_range(offsets, 0, entry.num_documents, entry.num_tokens, where)
            self._checked.add(number)
            return 0
        return -(-entry.num_documents // _CHECK_BLOCK)

    def _make_room(self) -> list[int]:
        """CLOCK-evict until one more shard fits; return the evicted numbers (lock held).

        A hit only sets a flag; the hand sweeps the resident list, clearing flags, and
        evicts the first shard not referenced since its last pass. Views handed out keep
        an evicted shard's mapping alive until they are collected.
        """
        resident = self._resident
        victims = []
        while resident and len(resident) >= self._max_open:
            hand = self._hand % len(resident)
            candidate = resident[hand]
            if self._referenced[candidate]:
                self._referenced[candidate] = False
                self._hand = (hand + 1) % len(resident)
                continue
            self._slots[candidate] = None
            resident.pop(hand)
            self._hand = hand % len(resident) if resident else 0
            victims.append(candidate)
        return victims

    def _release(self, numbers: list[int]) -> None:
        for number in numbers:
            self._loader.release(self._entries[number])

    def _read_offsets(self, number: int) -> np.ndarray:
        """Offsets of shard ``number``, checked whole: from the open shard, or read
        without opening it."""
        shard = self._slots[number]
        if shard is not None:
            shard.check_all()
            return shard.offsets_array
        entry, offsets, where = self._offsets_unchecked(number)
        if number not in self._checked:
            check_offsets(offsets, entry.num_tokens, where)
            self._checked.add(number)
        return offsets

    def _offsets_unchecked(self, number: int) -> tuple[ShardEntry, np.ndarray, str]:
        """Shard ``number``'s entry, offsets (header and count checked, values not yet)
        and offsets file name, from the open shard or read without opening it."""
        entry = self._entries[number]
        shard = self._slots[number]
        if shard is not None:
            return entry, shard.offsets_array, shard.where
        arrays = self._loader.read_offsets(entry)
        unchecked = self._unchecked_files
        if unchecked is not None and unchecked[number]:
            if arrays.header is not None:
                # The loader read the whole offsets file (kind and size checked on its
                # descriptor): check the header from those bytes; the tokens file is
                # checked when the shard is opened.
                check_header(arrays.header, arrays.where, self._manifest.dtype, number, entry)
            else:
                self._entry_checked(number)
        if arrays.offsets.shape[0] != entry.num_documents + 1:
            raise CorpusFormatError(f"{arrays.where}: offsets count changed since open.")
        return entry, arrays.offsets, arrays.where

    def close(self) -> None:
        """Release every open shard (unpinning cached copies) and stop background fetches.

        Views already returned stay valid (POSIX keeps an unlinked mapped file alive).
        The reader stays usable: the next read opens (and pins) again.
        """
        with self._lock:
            numbers = list(self._resident)
            for number in numbers:
                self._slots[number] = None
            self._resident.clear()
            self._hand = 0
            self._last = _NO_SHARD
        self._release(numbers)
        self._loader.close()

    def __enter__(self) -> Self:
        """``with open_corpus(path) as docs:``: :meth:`close` on leaving the block, for
        every corpus (local, cached remote, zarr or range reads alike)."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- capabilities -------------------------------------------------------------------
    @property
    def lengths(self) -> np.ndarray:
        """Int64 length of every document (read-only). Computed once from the offsets files."""
        if self._lengths is None:
            lengths = None
            sidecar = self._document_offsets_sidecar()
            if sidecar is not None:
                try:
                    lengths = np.diff(sidecar.at(np.arange(self._n + 1, dtype=np.int64)))
                except (CorpusFormatError, OSError):
                    self._document_offsets = None  # damaged: the offsets files answer
            if lengths is None:
                lengths = self._all_lengths()
            lengths.flags.writeable = False
            self._lengths = lengths
        return self._lengths

    def _all_lengths(self) -> np.ndarray:
        """Every document's length, every offsets file checked in one vectorised pass
        over all of them (a corpus of many small shards pays no numpy call per shard);
        a bad file is then checked alone, so the error names it and the document."""
        count = len(self._entries)
        if not count:
            return np.empty(0, dtype=np.int64)
        numbers = np.arange(count, dtype=np.int64)
        flat = self._offsets_in_bulk(numbers)
        if flat is None:
            parts = [self._offsets_unchecked(number)[1] for number in range(count)]
            flat = np.concatenate(parts).astype(np.int64, copy=False)
        ends = self._checked_in_bulk(numbers, flat)
        steps = np.diff(flat)
        within = np.ones(steps.shape[0], dtype=bool)
        within[ends[:-1] - 1] = False  # the step from one file's last offset to the next's first
        return steps[within]

    def _checked_in_bulk(self, numbers: np.ndarray, flat: np.ndarray) -> np.ndarray:
        """Check the concatenated offsets ``flat`` of shards ``numbers`` in one vectorised
        pass (each starts at 0, ends at its token count, never decreases); a bad file is
        then checked alone, so the error names it. Returns where each file's offsets end
        in ``flat``."""
        sizes = np.diff(self._starts_array)[numbers] + 1  # offsets per file
        ends = np.cumsum(sizes)
        steps = np.diff(flat)
        within = np.ones(steps.shape[0], dtype=bool)
        within[ends[:-1] - 1] = False  # the step from one file's last offset to the next's first
        totals = np.diff(self._token_starts_array)[numbers]
        if (
            (flat[ends - sizes] != 0).any()
            or (flat[ends - 1] != totals).any()
            or (steps[within] < 0).any()
        ):
            for number in numbers.tolist():  # names the first bad file
                entry, offsets, where = self._offsets_unchecked(number)
                check_offsets(offsets, entry.num_tokens, where)
        return ends

    def token_offsets(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """The position of each document's first token in the corpus's token order.

        Entry ``k`` is ``sum(len(docs[j]) for j in range(indices[k]))`` (the
        :meth:`read_tokens` coordinate where document ``indices[k]`` starts); index
        ``len(docs)`` gives ``num_tokens``. So the tokens of documents ``a..b-1`` are
        ``read_tokens(*token_offsets([a, b]))``, and a plan can total any run of
        documents without the whole ``lengths`` array. An index at a shard boundary is
        answered from the cumulative counts (no file read); any other from its shard's
        mapped offsets (a local store, or a shard already open), the values read
        checked to lie inside the shard and never decrease (the offsets around them
        are checked when their documents are read): O(len(indices) log len(indices))
        and a page per index, never O(documents). A shard of a remote store that is not
        open has its offsets file read (and checked) whole instead, one range request;
        many small shards of a local store are read in one lean pass. When every index
        is a multiple of the corpus's block-offsets sidecar stride (or ``len(docs)``),
        the answer comes from that sidecar (``docs/format.md`` section 16; read and
        checked on first use) and no offsets file is touched; every entry of it in
        order (a plan's block boundaries) is answered with a read-only view of it.
        Otherwise a corpus with the document-offsets sidecar (section 17; written for
        many small shards) answers from it: a slice of one mapping (a range request per
        4096 documents for a store that fetches), each chunk of 4096 values checked
        against its digest on first read; a sidecar missing or damaged is dropped and
        the offsets files answer.

        Raises
        ------
        IndexError
            An index is outside ``[0, len(docs)]`` (names its position).
        ArgumentTypeError
            ``indices`` is not a 1-D integer sequence.
        """
        array = _int64_vector("indices", indices)
        if array.size and (int(array.min()) < 0 or int(array.max()) > self._n):
            position = int(np.flatnonzero((array < 0) | (array > self._n))[0])
            raise IndexError(
                f"`indices[{position}]` is {int(array[position])}, outside [0, {self._n}] "
                f"for a corpus of {self._n} documents."
            )
        sidecar = self._block_offsets_sidecar()
        if sidecar is not None and sidecar.answers(array):
            return sidecar.at(array)
        documents = self._document_offsets_sidecar()
        if documents is not None:
            try:
                return documents.at(array)
            except (CorpusFormatError, OSError):
                self._document_offsets = None  # damaged: the offsets files answer from now on
        return self._offsets_from_shards(array)

    def _offsets_from_shards(self, array: np.ndarray) -> np.ndarray:
        """:meth:`token_offsets` of checked int64 ``array`` from the shards' offsets files
        (and the manifest's cumulative counts), never from a sidecar."""
        if array.size and bool((array[1:] >= array[:-1]).all()):
            ascending = self._ascending_offsets(array)
            if ascending is not None:
                return ascending
        starts = self._starts_array
        numbers = np.searchsorted(starts, array, side="right") - 1
        result = self._token_starts_array[numbers]  # a fresh array (fancy indexing)
        inside = np.flatnonzero(array != starts[numbers])
        if not inside.size:
            return result
        # Grouped by shard with one stable sort: a pass per shard over every index would
        # be O(indices x shards) (seconds for a plan window over 10^4 shards).
        if not bool((numbers[1:] >= numbers[:-1]).all()):  # ascending indices need no sort
            inside = inside[np.argsort(numbers[inside], kind="stable")]
        grouped = numbers[inside]
        firsts = np.concatenate([[0], np.flatnonzero(np.diff(grouped)) + 1])
        touched = grouped[firsts]
        flat = None
        spanned = int(np.diff(starts)[touched].sum())
        if touched.shape[0] > _BULK_OFFSETS_SHARDS and (
            spanned <= _BULK_OFFSETS_PER_INDEX * inside.shape[0]
            or spanned <= _BULK_SHARD_DOCUMENTS * touched.shape[0]
        ):
            # Many small shards (a plan window over small shards): their offsets files in
            # one lean pass, checked vectorised, instead of one open and check per shard.
            flat = self._offsets_in_bulk(touched)
        if flat is None:
            # Few or large shards (the block boundaries of 10^9 documents in 30 shards):
            # the values read from each shard's mapping; reading the files whole would
            # be O(documents).
            for picked in np.split(inside, firsts[1:]):
                number = int(numbers[picked[0]])
                local = array[picked] - int(starts[number])
                result[picked] += self._shard_offsets(number, local)
            return result
        ends = self._checked_in_bulk(touched, flat)
        begins = ends - (np.diff(starts)[touched] + 1)  # each shard's first offset in `flat`
        per_shard = np.diff(np.append(firsts, inside.shape[0]))
        result[inside] += flat[np.repeat(begins, per_shard) + array[inside] - starts[grouped]]
        return result

    def _ascending_offsets(self, array: np.ndarray) -> np.ndarray | None:
        """:meth:`token_offsets` of ascending ``array`` (in range) touching at most
        ``_BULK_OFFSETS_SHARDS`` shards' files, each shard's indices one slice (no
        per-index shard search or sort: a blocks-order window, 262,144 documents in
        runs of 4,096, in a few passes); ``None`` when more shards would be read."""
        starts = self._starts_array
        cuts = np.searchsorted(array, starts)  # shard k's indices: array[cuts[k]:cuts[k + 1]]
        touched = np.flatnonzero(cuts[1:] > cuts[:-1])
        # A shard needs its file unless only its start is asked for (its last index is it).
        if int(np.count_nonzero(array[cuts[touched + 1] - 1] != starts[touched])) > (
            _BULK_OFFSETS_SHARDS
        ):
            return None  # decided before any per-shard work (10^4 shards of a window)
        result = np.empty(array.shape[0], dtype=np.int64)
        pieces = []
        for number in touched.tolist():
            first, stop = int(cuts[number]), int(cuts[number + 1])
            local = array[first:stop] - int(starts[number])
            if int(local[-1]) == 0:  # only the shard's start: its cumulative count
                result[first:stop] = self._token_starts[number]
            else:
                pieces.append((number, first, stop, local))
        if len(pieces) > _BULK_OFFSETS_SHARDS:
            return None
        for number, first, stop, local in pieces:
            np.add(
                self._shard_offsets(number, local),
                self._token_starts[number],
                out=result[first:stop],
            )
        result[int(cuts[-1]) :] = self._token_starts[-1]  # indices equal to the count
        return result

    def token_offset_runs(
        self, starts: Sequence[int] | np.ndarray, counts: Sequence[int] | np.ndarray
    ) -> np.ndarray:
        """:meth:`token_offsets` of runs of consecutive indices: ``starts[j], starts[j]
        + 1, ..., starts[j] + counts[j] - 1`` for each ``j``, concatenated (int64).

        The same values as ``token_offsets`` of those indices, read as one slice of a
        shard's offsets per run and shard (no index array, no per-index lookup: a
        blocks-order window is 64 runs of 4,097 offsets), each slice checked as
        ``token_offsets`` checks the values it reads. O(total count + runs log shards).

        Raises
        ------
        IndexError
            A run reaches outside ``[0, len(docs)]`` (names it).
        ArgumentTypeError
            ``starts`` and ``counts`` are not 1-D integer sequences of one length, or a
            count is negative.
        """
        first_indices = _int64_vector("starts", starts)
        sizes = _int64_vector("counts", counts, first_indices.shape[0])
        if sizes.size and int(sizes.min()) < 0:
            run = int(np.flatnonzero(sizes < 0)[0])
            raise ArgumentTypeError(
                f"`counts` must be nonnegative integers. Got {int(sizes[run])} at run {run}."
            )
        outside = (sizes > 0) & ((first_indices < 0) | (first_indices + sizes - 1 > self._n))
        if outside.any():
            run = int(np.flatnonzero(outside)[0])
            begin, count = int(first_indices[run]), int(sizes[run])
            raise IndexError(
                f"run {run}: indices [{begin}, {begin + count}) are outside [0, {self._n}] "
                f"for a corpus of {self._n} documents."
            )
        if len(self._entries) == 0:  # no shards: every index is 0, before no token
            return np.zeros(int(sizes.sum()), dtype=np.int64)
        used = sizes > 0
        if not used.all():
            first_indices, sizes = first_indices[used], sizes[used]
        documents = self._document_offsets_sidecar()
        if documents is not None:
            try:
                return documents.runs(first_indices, sizes)
            except (CorpusFormatError, OSError):
                self._document_offsets = None  # damaged: the offsets files answer from now on
        starts_array = self._starts_array
        lows = np.searchsorted(starts_array, first_indices, side="right") - 1
        highs = np.minimum(  # index len(docs) (the count) is in the last shard
            np.searchsorted(starts_array, first_indices + sizes - 1, side="right"),
            starts_array.shape[0] - 1,
        )
        pieces = int((highs - lows).sum())  # (run, shard) pieces, at least one per run
        if (
            pieces > _BULK_OFFSETS_SHARDS
            and int((starts_array[highs] - starts_array[lows]).sum())
            <= _BULK_SHARD_DOCUMENTS * pieces
        ):
            # Runs over many small shards (a plan window over 10^4 shards without the
            # sidecar): token_offsets of their indices reads those offsets files in one
            # lean pass; a slice per run and shard would map and check each in turn.
            # Large shards (10^9 documents in 30) answer a slice per run from their
            # mappings below: reading their files whole would be O(documents).
            return self._offsets_from_shards(run_indices(first_indices, sizes))
        result = np.empty(int(sizes.sum()), dtype=np.int64)
        shard_starts, token_starts = self._starts, self._token_starts
        last_shard = len(self._entries) - 1
        at = 0
        for begin, count in zip(first_indices.tolist(), sizes.tolist(), strict=True):
            index, stop = begin, begin + count
            while index < stop:
                number = min(bisect.bisect_right(shard_starts, index) - 1, last_shard)
                # A piece runs to the shard's end offset (local index = its documents).
                end = min(stop, shard_starts[number + 1] + 1)
                local = index - shard_starts[number]
                piece = result[at : at + end - index]
                np.add(
                    self._shard_offset_slice(number, local, local + end - index),
                    token_starts[number],
                    out=piece,
                )
                at += end - index
                index = end
        return result

    def _shard_offset_slice(self, number: int, first: int, stop: int) -> np.ndarray:
        """Offsets ``first:stop`` of shard ``number``, checked as :meth:`_shard_offsets`
        checks the values it reads (a remote shard not open: its offsets file, whole)."""
        if self._slots[number] is None and self._store.local_directory is None:
            return self._read_offsets(number)[first:stop]
        shard = self._shard(number)
        values = shard.offsets_array[first:stop]
        if values.size and (
            int(values[0]) < 0
            or int(values[-1]) > shard.num_tokens
            or bool((values[1:] < values[:-1]).any())
        ):
            shard.check_all()
        return values

    def _block_offsets_sidecar(self) -> BlockOffsets | None:
        """The corpus's block-offsets sidecar (read and checked once), or ``None``.

        Besides its digest and structure (:func:`read_block_offsets`), its entries that
        fall on shard starts are compared with the manifest's cumulative token counts.
        """
        if not self._block_offsets_read:
            sidecar = read_block_offsets(
                self._store, self._manifest.metadata, self._n, int(self._token_starts_array[-1])
            )
            if sidecar is not None:
                starts = self._starts_array
                aligned = starts % sidecar.stride == 0
                if not np.array_equal(
                    sidecar.at(starts[aligned]), self._token_starts_array[aligned]
                ):
                    raise CorpusFormatError(
                        f"{self._store.location}/{BLOCK_OFFSETS_NAME}: its offsets disagree with "
                        "the manifest's shard token counts (from another corpus)."
                    )
            self._block_offsets, self._block_offsets_read = sidecar, True
        return self._block_offsets

    def _document_offsets_sidecar(self) -> DocumentOffsets | None:
        """The corpus's document-offsets sidecar, its header and digests checked on
        first use; ``None`` when there is none or it is missing or damaged (the offsets
        files answer then; ``mixle verify`` reports the damage)."""
        if not self._document_offsets_read:
            self._document_offsets_read = True
            try:
                self._document_offsets = open_document_offsets(
                    self._store,
                    self._manifest.metadata,
                    self._starts_array,
                    self._token_starts_array,
                )
            except (CorpusFormatError, OSError):
                self._document_offsets = None
        return self._document_offsets

    def _shard_offsets(self, number: int, local: np.ndarray) -> np.ndarray:
        """Offsets ``local`` of shard ``number`` (see :meth:`token_offsets`)."""
        if self._slots[number] is None and self._store.local_directory is None:
            return self._read_offsets(number)[local]
        shard = self._shard(number)
        values = shard.offsets_array[local]
        # Only the values read are checked (inside the shard's tokens, never decreasing
        # in document order), so a total built from them is well formed; the blocks
        # around them are checked in full when their documents are read. Checking each
        # 256-offset block here cost ~1 s of CPU for the 244k block boundaries of 10^9
        # documents. Anything implausible checks the whole file, naming the bad document.
        ordered = values if bool((local[1:] >= local[:-1]).all()) else values[np.argsort(local)]
        if ordered.size and (
            int(ordered[0]) < 0
            or int(ordered[-1]) > shard.num_tokens
            or bool((ordered[1:] < ordered[:-1]).any())
        ):
            shard.check_all()
        return values

    def _offsets_in_bulk(self, numbers: np.ndarray) -> np.ndarray | None:
        """The offsets of shards ``numbers`` (ascending), concatenated, read in one lean
        pass over the files of a local corpus, headers checked vectorised (for a shard
        table, the per-shard checks of first touch, for the offsets files); ``None`` for
        a store that fetches."""
        entries, directory = self._entries, self._store.local_directory
        if directory is None:
            return None
        if isinstance(entries, ShardTable):
            names = entries.offsets_names(
                None if numbers.shape[0] == len(entries) else numbers.tolist()
            )
        else:
            names = [entries[number].offsets for number in numbers.tolist()]
        documents = np.diff(self._starts_array)[numbers]
        datas = read_regular_files(
            directory, names, (HEADER_SIZE + 8 * (documents + 1)).tolist(), CorpusFormatError
        )
        words = np.frombuffer(b"".join(datas), dtype="<i8")
        heads = np.cumsum(documents + 1 + HEADER_SIZE // 8) - (documents + 1 + HEADER_SIZE // 8)
        expected = np.frombuffer(OffsetsHeader(self._manifest.dtype, 0, 0).pack()[:16], dtype="<i8")
        good = (
            (words[heads] == expected[0])
            & (words[heads + 1] == expected[1])
            & (words[heads + 2] == documents)
            & (words[heads + 3] == np.diff(self._token_starts_array)[numbers])
        )
        if not good.all():
            bad = int(np.flatnonzero(~good)[0])
            number = int(numbers[bad])
            check_header(
                datas[bad][:HEADER_SIZE],
                f"{directory}/{names[bad]}",
                self._manifest.dtype,
                number,
                entries[number],
            )
            raise CorpusFormatError(  # check_header names what differs; this never runs
                f"{directory}/{names[bad]}: offsets header disagrees with shard {number}."
            )
        keep = np.ones(words.shape[0], dtype=bool)
        for word in range(HEADER_SIZE // 8):
            keep[heads + word] = False
        return words[keep]

    @property
    def fingerprint(self) -> str:
        """The manifest fingerprint: changes whenever any shard byte changes."""
        return self._manifest.fingerprint

    @property
    def num_tokens(self) -> int:
        """Total number of tokens in the corpus."""
        return self._manifest.num_tokens

    @property
    def dtype(self) -> np.dtype[Any]:
        """Token dtype of the returned arrays (little-endian uint16, uint32 or int64)."""
        return self._dtype

    @property
    def vocab_size(self) -> int | None:
        """Vocabulary size recorded by the writer, or ``None``."""
        return self._manifest.vocab_size

    @property
    def num_shards(self) -> int:
        """Number of shards."""
        return len(self._entries)

    @property
    def store(self) -> ShardStore:
        """The :class:`~mixle.corpus.format.store.ShardStore` this reader reads through."""
        return self._store

    @property
    def manifest(self) -> Mapping[str, Any]:
        """The validated manifest as a fresh JSON object (as in ``manifest.json``)."""
        return self._manifest.to_dict()

    @property
    def parsed_manifest(self) -> Manifest:
        """The validated manifest, typed (:class:`~mixle.corpus.Manifest`)."""
        return self._manifest

    @property
    def location(self) -> str:
        """Where the corpus lives (directory or URL)."""
        return self._store.location

    def origin(self, index: int) -> Origin | None:
        """Where document ``index`` was read: its input file, the kind of record and the
        record's 0-based index there (a JSONL line, a Parquet row, …), from the corpus's
        origins sidecar (``docs/format.md``, "Origins sidecar"); ``None`` for a corpus
        without one. The sidecar is read and checked on the first call (O(runs)); each
        call after that is a binary search.

        Raises
        ------
        IndexError
            ``index`` is out of range.
        CorpusFormatError
            The manifest names a sidecar that is missing, truncated or forged (the
            message names the file; the documents still read).
        """
        position = as_index(index)
        if position < 0:
            position += self._n
        if not 0 <= position < self._n:
            raise IndexError(f"document index {index} out of range for {self._n} documents.")
        table = self.origins_table()
        return None if table is None else table.origin(position)

    def find_id(self, value: str) -> np.ndarray | None:
        """The indices (ascending) of the documents whose ``--id-field`` value is
        ``value``, or ``None`` for a corpus whose origins sidecar holds no ids (or that
        has none). One scan of the sidecar's id column: no document's tokens are read.

        Raises
        ------
        ArgumentTypeError
            ``value`` is not a string.
        CorpusFormatError
            The sidecar is missing, truncated or forged (names the file).
        """
        if not isinstance(value, str):
            raise ArgumentTypeError(f"`value` must be a str. Got {type(value).__name__} instead.")
        table = self.origins_table()
        return None if table is None else table.find_id(value)

    def origins_table(self) -> OriginsTable | None:
        """The parsed origins sidecar (for tools that carry origins along: export,
        ``mixle show``), read and checked on the first call; ``None`` without one.

        Raises
        ------
        CorpusFormatError
            The sidecar is missing, truncated or forged (names the file).
        """
        if self._origins is None:
            self._origins = read_origins(self._store, self._manifest.metadata, self._n)
        return self._origins

    def _normalize(self, indices: Any) -> np.ndarray:
        array = np.asarray(indices)
        if array.dtype.kind not in "iu" or array.ndim != 1:
            if array.size == 0:
                return np.empty(0, dtype=np.int64)
            raise ArgumentTypeError(
                f"`indices` must be a 1-D sequence of integers. Got dtype {array.dtype}, "
                f"shape {array.shape} instead."
            )
        array = array.astype(np.int64)
        if array.size == 0:
            return array
        low, high = int(array.min()), int(array.max())
        if low < 0:
            array[array < 0] += self._n
            low, high = int(array.min()), int(array.max())
        if low < 0 or high >= self._n:
            position = int(np.flatnonzero((array < 0) | (array >= self._n))[0])
            raise IndexError(
                f"`indices[{position}]` is out of range for a corpus of {self._n} documents."
            )
        return array

    def _groups(
        self, indices: np.ndarray, numbers: np.ndarray | None = None
    ) -> list[tuple[int, np.ndarray | None]]:
        """Return ``(shard number, positions into indices)`` per shard touched.

        ``positions`` is ``None`` when every index falls in one shard (the common case
        for a batch of a shuffled window), which skips the sort. ``numbers``: each
        index's shard, when the caller has it already.
        """
        if numbers is None:
            numbers = np.searchsorted(self._starts_array, indices, side="right") - 1
        first = int(numbers[0])
        if (numbers == first).all():
            return [(first, None)]
        order = np.argsort(numbers, kind="stable")
        ordered = numbers[order]
        bounds = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
        firsts = [0, *bounds.tolist()]
        # Slices of `order` (views), not np.split: a hint over 10^4 small shards has as
        # many groups, and np.split costs ~4 us a piece.
        return [
            (number, order[first:stop])
            for number, first, stop in zip(
                ordered[firsts].tolist(), firsts, [*firsts[1:], order.shape[0]], strict=True
            )
        ]

    def take(self, indices: Sequence[int] | np.ndarray) -> list[np.ndarray]:
        """Return the documents at ``indices`` (in that order) as zero-copy views.

        One vectorized offset lookup per shard touched instead of one per document, so
        for batches of a few hundred documents or more it is cheaper per document than
        ``[docs[i] for i in indices]``.

        Raises
        ------
        IndexError
            An index is out of range (names its position in ``indices``).
        ArgumentTypeError
            ``indices`` is not a 1-D integer sequence.
        """
        if type(indices) is list and len(indices) <= _TAKE_LOOP_MAX:
            views = self._take_each(indices)
            if views is not None:
                return views
        array = self._normalize(indices)
        if array.size == 0:
            return []
        groups = self._groups(array)
        pieces: list[np.ndarray] = []
        for number, positions in groups:
            shard = self._shard(number)
            local = (array if positions is None else array[positions]) - shard.start
            shard.check(local)
            offsets = shard.offsets_array
            begins = offsets[local].tolist()
            ends = offsets[local + 1].tolist()
            pieces.extend(map(shard.tokens.__getitem__, map(slice, begins, ends)))
        if len(groups) == 1:
            return pieces
        order = np.concatenate([positions for _, positions in groups if positions is not None])
        inverse = np.empty_like(order)
        inverse[order] = np.arange(order.shape[0])
        return list(map(pieces.__getitem__, inverse.tolist()))

    def gather_into(
        self,
        indices: np.ndarray,
        begins: np.ndarray,
        ends: np.ndarray,
        out: np.ndarray,
        at: np.ndarray,
    ) -> None:
        """Copy pieces of documents into ``out``: the packer's batch read.

        For each ``k``, tokens ``[begins[k], ends[k])`` of document ``indices[k]`` are
        written, cast to ``out``'s dtype (``same_kind`` casting), to
        ``out[at[k] : at[k] + ends[k] - begins[k]]``; nothing else of ``out`` is written.
        One vectorised call per shard touched (compiled when the ``mixle[fast]`` extra is
        installed, see :mod:`mixle._gather`), straight from the mapping into ``out``:
        no per-document views, lists or intermediate arrays. ``out`` may be a
        :class:`mixle._gather.SplitOutput` (``at`` positions in its range): consecutive
        batches written by one call, each into its own array.

        Raises
        ------
        IndexError
            An index is out of range, or a piece is outside its document or outside
            ``out`` (naming the piece).
        ArgumentTypeError
            The arguments are not 1-D integer arrays of one length, or ``out`` is not a
            writable 1-D array.
        CorpusFormatError
            The offsets of a document read are corrupt (naming the file and document);
            raised before any token of that shard is copied.
        """
        indices = _int64_vector("indices", indices)
        count = indices.shape[0]
        if not (
            type(begins) is type(ends) is type(at) is np.ndarray
            and begins.dtype == ends.dtype == at.dtype == np.int64
            and begins.shape == ends.shape == at.shape == indices.shape
        ):
            begins, ends, at = (
                _int64_vector(name, value, count)
                for name, value in (("begins", begins), ("ends", ends), ("at", at))
            )
        if type(out) is not SplitOutput and (
            type(out) is not np.ndarray or out.ndim != 1 or not out.flags.writeable
        ):
            raise ArgumentTypeError(
                f"`out` must be a writable 1-D numpy array. Got {type(out).__name__} instead."
            )
        shard = self._last  # checked whole (see __getitem__), or the empty placeholder
        if (
            gather_pieces(
                out,
                shard.tokens,
                shard.offsets_array,
                indices - shard.start,
                begins,
                ends,
                at,
                shard.stop - shard.start,
            )
            < 0
        ):
            return  # every document was in the shard read last: one call, no grouping
        # Some piece is in another shard, or invalid: group by shard (which also names
        # an index out of range); pieces already written are written again.
        self._gather_grouped(indices, begins, ends, out, at)

    def _gather_grouped(
        self,
        indices: np.ndarray,
        begins: np.ndarray,
        ends: np.ndarray,
        out: np.ndarray,
        at: np.ndarray,
    ) -> None:
        """:meth:`gather_into` one shard at a time (the general path)."""
        low, high = int(indices.min()), int(indices.max())
        if low < 0 or high >= self._n:
            position = int(np.flatnonzero((indices < 0) | (indices >= self._n))[0])
            raise IndexError(
                f"`indices[{position}]` is out of range for a corpus of {self._n} documents."
            )
        groups = self._groups(indices)
        for number, positions in groups:
            shard = self._shard(number)
            if positions is None:
                local, piece_begins, piece_ends, piece_at = indices - shard.start, begins, ends, at
            else:
                local = indices[positions] - shard.start
                piece_begins, piece_ends, piece_at = (
                    begins[positions],
                    ends[positions],
                    at[positions],
                )
            if shard.checked_blocks is not None:
                shard.check(local)
            elif len(groups) == 1:
                self._last = shard
            bad = gather_pieces(
                out,
                shard.tokens,
                shard.offsets_array,
                local,
                piece_begins,
                piece_ends,
                piece_at,
                shard.stop - shard.start,
            )
            if bad >= 0:
                k = bad if positions is None else int(positions[bad])
                length = int(np.diff(shard.offsets_array[local[bad] : local[bad] + 2])[0])
                raise IndexError(
                    f"piece {k}: tokens [{int(begins[k])}, {int(ends[k])}) of document "
                    f"{int(indices[k])} ({length} tokens) written at {int(at[k])} do not fit "
                    f"the document or `out` ({out.size} tokens)."
                )

    def _sampled_resident(self, indices: Sequence[int] | np.ndarray) -> bool:
        """Whether up to 4 documents spread over ``indices`` are wholly in the page cache.

        Plain Python per sampled document (no pass over ``indices``): the cheap test that
        lets a hint on a cached corpus return at once. Once :data:`_RESIDENT_STREAK` calls
        in a row found all their samples resident, only every
        :data:`_RESIDENT_RECHECK`-th call looks, at one document (the middle one), and
        the others answer True; a miss goes back to 4 samples per call. False when a
        sampled index is invalid or its shard is not mapped yet (the full path then
        handles it).
        """
        streak = self._resident_streak
        if streak < _RESIDENT_STREAK:
            resident = self._samples_resident(indices, _RESIDENCY_SAMPLES)
        elif (streak - _RESIDENT_STREAK) % _RESIDENT_RECHECK == 0:
            resident = self._samples_resident(indices, 1)
        else:
            resident = True
        self._resident_streak = streak + 1 if resident else 0
        return resident

    def _samples_resident(self, indices: Sequence[int] | np.ndarray, samples: int) -> bool:
        """Whether ``samples`` documents spread over ``indices`` (one: the middle one)
        are wholly resident; False as :meth:`_sampled_resident` says."""
        count = len(indices)
        picks = min(count, samples)
        if picks == 1:
            positions = [count // 2]
        else:
            positions = [k * (count - 1) // (picks - 1) for k in range(picks)]
        itemsize = self._dtype.itemsize
        ranges: list[tuple[int, int, int]] = []
        for position in positions:
            index = operator.index(indices[position])
            if index < 0:
                index += self._n
            if not 0 <= index < self._n:
                return False
            shard = self._slots[bisect.bisect_right(self._starts, index) - 1]
            if shard is None or shard.mapping is None:
                return False
            # Offsets not checked yet are clamped to the mapping: a sample is only a hint.
            size = shard.num_tokens * itemsize
            local = index - shard.start
            begin = min(max(shard.offsets[local] * itemsize, 0), size)
            end = min(max(shard.offsets[local + 1] * itemsize, begin), size)
            ranges.append((shard.address, begin // _PAGE * _PAGE, end))
        return _all_resident(ranges)

    def _take_each(self, indices: list[Any]) -> list[np.ndarray] | None:
        """:meth:`take` for a short list of Python ints: one lookup per index, in a loop.

        Cheaper than the grouped numpy path for the few dozen shuffled documents of a
        training batch (no per-shard numpy calls). Returns ``None`` (use the general
        path, which validates and names the problem) when an index is not an ``int``.
        """
        count, starts, slots, referenced = self._n, self._starts, self._slots, self._referenced
        views: list[np.ndarray] = []
        append = views.append
        for position, index in enumerate(indices):
            if type(index) is not int:
                return None
            if index < 0:
                index += count
            if not 0 <= index < count:
                raise IndexError(
                    f"`indices[{position}]` is out of range for a corpus of {count} documents."
                )
            number = bisect.bisect_right(starts, index) - 1
            shard = slots[number] or self._load(number)
            referenced[number] = True
            offsets = shard.offsets
            local = index - shard.start
            if shard.checked_blocks is not None:
                shard.check(local)
            append(shard.tokens[offsets[local] : offsets[local + 1]])
        return views

    def prefetch(self, indices: Sequence[int] | np.ndarray) -> None:
        """Hint that ``indices`` will be read soon, in that order; never blocks on I/O.

        Shards not open yet are fetched in the background when the loader can
        (``supports_background_fetch``: a remote cache starts downloading them, in order
        of first use, pinned until read) and otherwise mapped (at most
        ``max_open_shards``), except that a local shard whose tokens file is at most 256
        KiB gets ``posix_fadvise(WILLNEED)`` on the whole file instead (mapping it costs
        more than it saves, and takes a slot the batch being read may need); documents
        of open shards get ``madvise(WILLNEED)`` on their
        byte ranges, so the kernel reads them in the background. Invalid indices are
        ignored, since a hint must never fail a training step; a no-op for a loader
        without hints (range reads keep nothing locally).

        For a local corpus, up to 4 documents spread over ``indices`` are first checked
        with ``mincore(2)``: when every sampled page is in the page cache, the call
        returns at once, so hinting a cached corpus costs a few microseconds however many
        documents it names. After 8 calls in a row found their samples cached, only every
        4th call checks, one document, until a check misses; the calls in between are
        taken as cached. Otherwise the byte ranges are located per shard, merged when
        within a page of each other, and each merged range gets one ``madvise``. A partly
        cached corpus may skip a hint whose samples all hit; those pages are still read
        on demand.
        """
        loader, willneed = self._loader, _MADV_WILLNEED
        if not loader.supports_hints:
            return
        background = loader.supports_background_fetch
        try:
            if not background and (willneed is None or self._sampled_resident(indices)):
                return
            array = self._normalize(indices)
        except (IndexError, TypeError, ValueError):
            return
        if array.size == 0:
            return
        numbers = np.searchsorted(self._starts_array, array, side="right") - 1
        if background:
            touched = in_first_seen_order(numbers).tolist()
            loader.fetch_ahead(
                [
                    self._entries[number]
                    for number in touched
                    if self._slots[number] is None and self._entries[number].num_documents
                ]
            )
            mapped = [number for number in touched if self._slots[number] is not None]
            if willneed is None or not mapped:
                return
            if len(mapped) < len(touched):  # advice only for the shards already open
                keep = np.isin(numbers, mapped, kind="table")  # a hint spans few shards
                array, numbers = array[keep], numbers[keep]
            # A cache's shards are downloaded whole just before they are mapped, so
            # their pages are resident as a rule: advise only when sampled pages are
            # not (a warm cache from an earlier run), as a local corpus does.
            if self._sampled_resident(array):
                return
        if willneed is None:
            return
        groups = self._groups(array, numbers)
        itemsize = self._dtype.itemsize
        directory = self._store.local_directory
        for count, (number, positions) in enumerate(groups):
            if count >= self._max_open:
                break
            shard = self._slots[number]
            if shard is None and not background:
                entry = self._entries[number]
                if directory is not None and entry.tokens_bytes <= _HINT_FILE_BYTES:
                    _advise_file(os.path.join(directory, entry.tokens))
                    continue
                shard = self._shard(number)
            if shard is None or shard.mapping is None:
                continue
            local = (array if positions is None else array[positions]) - shard.start
            # Offsets are not checked for a hint (reading the documents checks them):
            # the ranges are clamped to the mapping, so a corrupt offset only mis-aims
            # an advice and a hint never fails.
            size = shard.num_tokens * itemsize
            offsets = shard.offsets_array
            begins = np.clip(offsets[local] * itemsize, 0, size) // _PAGE * _PAGE
            ends = np.clip(offsets[local + 1] * itemsize, 0, size)
            order = np.argsort(begins, kind="stable")
            madvise = shard.mapping.madvise
            for begin, end in _merge(begins[order], ends[order]):
                if end > begin:
                    madvise(willneed, begin, end - begin)

    def read_tokens(self, start: int, stop: int) -> np.ndarray:
        """Return tokens ``start:stop`` of the corpus's concatenated token order.

        Position ``p`` counts tokens across all documents in order, with nothing
        between documents (``docs[0]`` holds positions ``0 .. len(docs[0]) - 1``, and so
        on). A range inside one shard is a zero-copy read-only view of its mapping; a
        range that crosses shards is copied into a new array. This is the range-read
        capability :class:`mixle.data.stream_token_source.TokenStream` uses to read a
        window in one call instead of one call per document.

        Raises
        ------
        IndexError
            Unless ``0 <= start <= stop <= num_tokens``.
        ArgumentTypeError
            ``start`` or ``stop`` is not an integer.
        """
        if type(start) is int and type(stop) is int:
            begin, end, tokens = self._last_range
            if begin <= start <= stop <= end:  # inside the shard of the previous read
                return tokens[start - begin : stop - begin]
            token_starts = self._token_starts
            if 0 <= start <= stop <= token_starts[-1]:
                number = bisect.bisect_right(token_starts, start) - 1
                begin, end = token_starts[number], token_starts[number + 1]
                if stop <= end:  # inside one shard: a view (start == total lands here too)
                    shard = self._slots[number] or self._load(number)
                    self._referenced[number] = True
                    self._last_range = (begin, end, shard.tokens)
                    return shard.tokens[start - begin : stop - begin]
        start, stop = exact_int("start", start), exact_int("stop", stop)
        total = self._token_starts[-1]
        if not 0 <= start <= stop <= total:
            raise IndexError(
                f"token range [{start}, {stop}) is outside [0, {total}] of this corpus."
            )
        if start == stop:
            return np.empty(0, dtype=self._dtype)
        token_starts = self._token_starts
        number = bisect.bisect_right(token_starts, start) - 1
        pieces: list[np.ndarray] = []
        position = start
        while position < stop:
            shard_begin, shard_end = token_starts[number], token_starts[number + 1]
            if shard_end > position:
                shard = self._shard(number)
                self._last_range = (shard_begin, shard_end, shard.tokens)
                pieces.append(
                    shard.tokens[position - shard_begin : min(stop, shard_end) - shard_begin]
                )
                position = min(stop, shard_end)
            number += 1
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

    # -- iteration and pickling ------------------------------------------------------
    def __iter__(self) -> Iterator[np.ndarray]:
        """Yield every document in order, shard by shard (views, created in bulk)."""
        for number, entry in enumerate(self._entries):
            if not entry.num_documents:
                continue
            shard = self._shard(number)
            shard.check_all()
            bounds = shard.offsets_array.tolist()
            yield from map(shard.tokens.__getitem__, map(slice, bounds[:-1], bounds[1:]))

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _reopen,
            (self._store, self._max_open_requested, self.fingerprint),
        )

    def __repr__(self) -> str:
        return (
            f"ShardedDocuments({self._store.location!r}, documents={self._n}, "
            f"tokens={self.num_tokens}, shards={len(self._entries)}, dtype={self._dtype.name})"
        )


def _advise_file(path: str) -> None:
    """``posix_fadvise(WILLNEED)`` on the whole file ``path``; never fails (a hint)."""
    if _FADV_WILLNEED is None:
        return
    try:
        fd = os.open(path, _HINT_FLAGS)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, _FADV_WILLNEED)
    except OSError:
        pass
    finally:
        os.close(fd)


def _int64_vector(name: str, value: Any, count: int | None = None) -> np.ndarray:
    """``value`` as a 1-D int64 array (no copy when it already is one), of ``count`` items."""
    if type(value) is not np.ndarray or value.dtype != np.int64:
        value = np.asarray(value)
        if value.dtype.kind not in "iu" and value.size:
            raise ArgumentTypeError(
                f"`{name}` must be a 1-D array of integers. Got dtype {value.dtype} instead."
            )
        value = value.astype(np.int64)
    if value.ndim != 1 or (count is not None and value.shape[0] != count):
        raise ArgumentTypeError(
            f"`{name}` must be a 1-D array of {count if count is not None else 'any'} "
            f"integers. Got shape {value.shape} instead."
        )
    return value


def _cumulative(counts: Iterator[int]) -> np.ndarray:
    """``[0, c0, c0 + c1, ...]`` of ``counts`` as int64."""
    array = np.zeros(1, dtype=np.int64)
    return np.concatenate([array, np.cumsum(np.fromiter(counts, dtype=np.int64))])


def _merge_arrays(begins: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Coalesce byte ranges (sorted by begin) that overlap or lie within a page of each other.

    Vectorised: one pass of numpy over the ranges; returns the merged begins and ends.
    """
    if begins.shape[0] == 0:
        return begins, ends
    reach = np.maximum.accumulate(ends)
    starts_group = np.empty(begins.shape[0], dtype=bool)
    starts_group[0] = True
    np.greater(begins[1:], reach[:-1] + _PAGE, out=starts_group[1:])
    heads = np.flatnonzero(starts_group)
    return begins[heads], np.maximum.reduceat(ends, heads)


def _merge(begins: np.ndarray, ends: np.ndarray) -> Iterator[tuple[int, int]]:
    """:func:`_merge_arrays` as ``(begin, end)`` pairs of Python ints."""
    merged_begins, merged_ends = _merge_arrays(begins, ends)
    return zip(merged_begins.tolist(), merged_ends.tolist(), strict=True)


def open_documents(
    store: ShardStore,
    *,
    verify: bool = False,
    max_open_shards: int = DEFAULT_MAX_OPEN_SHARDS,
) -> ShardedDocuments:
    """Open the corpus held by ``store``: read and check its manifest and every header.

    The store-level half of :func:`mixle.corpus.open_corpus` (which first turns a path
    or URL into a store). The reader is composed with ``store.shard_loader()``: a
    :class:`ShardedDocuments`, or the loader's ``documents_type`` where the loader
    names a reader with batch paths of its own (range reads). With ``verify``, also
    recomputes every file's SHA-256 (:func:`~mixle.corpus.format.verify.verify_store`).
    """
    manifest = parse_manifest(
        store.read_manifest(), f"{store.location}/manifest.json", store.read_file
    )
    if manifest.shard_table is None:  # a table's shards are checked when first touched
        for number, entry in enumerate(manifest.shards):
            check_shard_files(store, manifest.dtype, number, entry)
    if verify:
        verify_store(store, manifest).raise_first()
    loader = store.shard_loader()
    reader = loader.documents_type or ShardedDocuments
    return reader(store, manifest, max_open_shards=max_open_shards, loader=loader)


def _reopen(store: ShardStore, max_open_shards: int, fingerprint: str) -> ShardedDocuments:
    documents = open_documents(store, max_open_shards=max_open_shards)
    if documents.fingerprint != fingerprint:
        raise CorpusFormatError(
            f"{store.location}: the corpus changed since this reader was pickled "
            f"(fingerprint then: {fingerprint} / now: {documents.fingerprint})."
        )
    return documents
