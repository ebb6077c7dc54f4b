"""Stream ``(context window, next token)`` micro-batches without materialising windows.

:func:`stream_token_source` is the seed API over an in-memory token-id array: only the
array (and, with ``shuffle=True``, one O(corpus) permutation of window starts per
epoch) stays resident; each batch's ``(b, block)`` windows are gathered on the fly and
dropped by the caller. Ids are validated once, at call time, and stay int64 all the way
to the yielded batches: they are never narrowed to float32, which would silently merge
distinct ids at and above ``2**24``.

A window is ``tokens[i : i + block]`` and its target is ``tokens[i + block]``, for every
``i`` in ``[0, len(tokens) - block)``; each epoch visits every window exactly once.

:class:`TokenStream` is the out-of-core, resumable form of the same generator: the
token stream is the concatenation of a sequence of documents (a list of arrays, or the
memory-mapped ``ShardedDocuments`` of a sharded corpus), windows are read from the
documents per batch, the shuffle is a keyed Feistel bijection on the window indices
(O(1) memory, no permutation array), and the cursor is two integers.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from mixle._checks import as_token_ids, nonnegative_int, positive_int
from mixle.data._batch import Batch
from mixle.data._cursor import Cursor
from mixle.data._documents import SequenceDocuments, as_documents, is_document_source
from mixle.data._mesh import DpDims, place_from_mesh
from mixle.data._mixture import Mixture
from mixle.data._options import PackOptions, ShardOptions
from mixle.data._permutation import FeistelPermutation
from mixle.data._seed_views import TokenStreamSeedViews, WindowTuple, window_tuples
from mixle.data._token_windows import TokenWindows, checked_document
from mixle.errors import ArgumentError, ArgumentTypeError, StateMismatchError, TokenIdError

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["TokenStream", "stream_token_source"]

# Window positions are permuted this many at a time (rounded to whole batches): the
# vectorised Feistel costs a fixed overhead per call, so per-batch calls would be slow
# for small batches, while the chunk itself is only a few tens of KB.
_CHUNK_WINDOWS = 4096


def _check_flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise ArgumentTypeError(
            f"`{name}` must be a bool. Got {value!r} ({type(value).__name__}) instead."
        )
    return bool(value)


def _token_array(token_ids: Any) -> np.ndarray:
    if isinstance(token_ids, list | tuple):
        # np.asarray([0, True]) is array([0, 1]): a bool would pass as the id 1 silently.
        for position, item in enumerate(token_ids):
            if isinstance(item, bool | np.bool_):
                raise TokenIdError(
                    f"`token_ids` has non-integer token id {item!r} at position {position}."
                )
    return as_token_ids(token_ids, "`token_ids`")


def _is_document_sequence(value: Any) -> bool:
    """Whether ``value`` is a sequence of documents rather than one token-id array.

    A numpy array is always token ids (the seed behaviour). A :class:`DocumentSource`
    (a sharded corpus) is documents, and so is a list/tuple whose first element is
    itself 1-D (a list of arrays); a flat list of numbers is token ids.
    """
    if isinstance(value, np.ndarray):
        return False
    if is_document_source(value):
        return True
    return isinstance(value, list | tuple) and len(value) > 0 and np.ndim(value[0]) == 1


def _array_batches(
    tokens: np.ndarray, block: int, batch_size: int, epochs: int, shuffle: bool, seed: int
) -> Iterator[Batch]:
    num_windows = max(tokens.shape[0] - block, 0)
    if num_windows == 0 or epochs == 0:
        return
    # A read-only strided view: row i is tokens[i:i+block]. Indexing it with a batch of
    # starts copies just those (b, block) rows; the full window matrix never exists.
    windows = np.lib.stride_tricks.sliding_window_view(tokens, block)
    rng = np.random.default_rng(seed)
    for _epoch in range(epochs):
        order = rng.permutation(num_windows) if shuffle else None
        for first in range(0, num_windows, batch_size):
            last = min(first + batch_size, num_windows)
            starts = order[first:last] if order is not None else np.arange(first, last)
            yield Batch(windows[starts], tokens[starts + block])


def stream_token_source(
    token_ids: Any,
    block: int,
    batch_size: int,
    *,
    epochs: int = 1,
    shuffle: bool = True,
    seed: int = 0,
) -> Iterator[WindowTuple]:
    """Yield ``(context_windows, next_tokens)`` micro-batches; never buffer windows.

    Every argument is validated when this function is *called*, before the returned
    iterator produces anything.

    Parameters
    ----------
    token_ids
        A 1-D array-like of token ids: integers, or floats holding finite exact
        integers, all within the int64 range. Converted once to int64 (no copy when it
        already is int64). Alternatively a *document sequence* (an object with
        ``lengths``, such as ``mixle.corpus.ShardedDocuments``, or a list/tuple of 1-D
        arrays): then the result is ``iter(TokenStream(token_ids, block, batch_size,
        epochs=epochs, shuffle=shuffle, seed=seed))`` — windows over the concatenated
        documents, read per batch, shuffled by a Feistel bijection instead of a
        permutation array. A numpy array is always treated as token ids.
    block
        Context length, a positive int.
    batch_size
        Windows per batch, a positive int. The last batch of an epoch may be smaller.
    epochs
        Passes over all windows, a nonnegative int; ``0`` is an explicit no-op.
    shuffle
        Visit windows in a fresh random order each epoch (one O(len(token_ids))
        permutation array per epoch); ``False`` visits them in stream order.
    seed
        Nonnegative int; the same seed gives the same batches, in any process.

    Returns
    -------
    Iterator[tuple[numpy.ndarray, numpy.ndarray]]
        Batches ``(context, next_tokens)`` with ``context`` an int64 ``(b, block)`` array
        (``context[j] == token_ids[s : s + block]``) and ``next_tokens`` an int64 ``(b,)``
        array (``token_ids[s + block]``), ``1 <= b <= batch_size``. With
        ``len(token_ids) <= block`` there are no windows and nothing is yielded.
        Each batch is a fresh array the caller may keep or modify.

    Raises
    ------
    ArgumentTypeError
        ``block``, ``batch_size``, ``epochs`` or ``seed`` is not an int (bools and floats
        are rejected); ``shuffle`` is not a bool; ``token_ids`` is not 1-D or not numeric.
    ArgumentError
        ``block`` or ``batch_size`` is not positive, ``epochs`` or ``seed`` is negative.
    TokenIdError
        A token id is non-finite, fractional or outside int64 (message gives position).

    Notes
    -----
    Memory is O(len(token_ids)) for the ids, plus one permutation per epoch when
    shuffling, plus O(batch_size x block) per batch. Time per batch is
    O(batch_size x block).

    Examples
    --------
    >>> import numpy as np
    >>> batches = stream_token_source(np.arange(10), block=4, batch_size=3, shuffle=False)
    >>> context, target = next(batches)
    >>> context.tolist(), target.tolist()
    ([[0, 1, 2, 3], [1, 2, 3, 4], [2, 3, 4, 5]], [4, 5, 6])
    """
    if _is_document_sequence(token_ids):
        stream = TokenStream(
            token_ids, block, batch_size, epochs=epochs, shuffle=shuffle, seed=seed
        )
        return iter(stream)
    block = PackOptions(block).block
    batch_size = ShardOptions(batch_size=batch_size).batch_size
    epochs = nonnegative_int("epochs", epochs)
    seed = nonnegative_int("seed", seed)
    shuffle = _check_flag("shuffle", shuffle)
    tokens = _token_array(token_ids)
    return window_tuples(_array_batches(tokens, block, batch_size, epochs, shuffle, seed))


class TokenStream(TokenStreamSeedViews):
    """Resumable ``(context, next_token)`` batches over the token stream of documents.

    The stream is the concatenation of ``documents`` in order, with ``boundary_id``
    between consecutive documents when given. Window ``i`` is ``stream[i : i + block]``
    with target ``stream[i + block]`` for ``i`` in ``[0, num_windows)``,
    ``num_windows = max(num_tokens - block, 0)``; windows straddle document and shard
    boundaries freely. Each epoch visits every window exactly once, in batches of
    ``batch_size`` (the last one may be smaller); with ``shuffle=True`` epoch ``e``
    visits window ``perm_e(k)`` at position ``k``, where ``perm_e`` is a keyed Feistel
    bijection on ``[0, num_windows)`` that depends only on ``(num_windows, seed, e)``.

    Iterating yields batches from the cursor ``(epoch, position)`` up to the end of
    epoch ``epochs - 1``, advancing the cursor as it goes; :meth:`state_dict` and
    :meth:`load_state_dict` save and restore it, and the stream continues bitwise
    identically. :meth:`epoch_batches` and :meth:`batch` are pure random access.

    Parameters
    ----------
    documents
        Any sequence of 1-D integer token arrays: a list, or a lazy sequence such as
        ``mixle.corpus.ShardedDocuments``. It is only indexed, never copied whole;
        ``documents.lengths``, ``.fingerprint`` and ``.prefetch`` are used when present.
    block, batch_size
        Positive ints: window length and windows per batch.
    epochs
        Nonnegative int; ``0`` yields nothing.
    shuffle
        Bool; ``False`` visits windows in stream order.
    seed
        Nonnegative int keying the shuffle.
    boundary_id
        Token id inserted between documents, or ``None`` (the default) for none.
    prefetch
        Pass the documents of the coming batches (a few thousand windows at a time)
        to ``documents.prefetch`` when it exists (e.g. ``madvise(WILLNEED)`` on mmap
        shards). Worth it when the corpus is not in the page cache — the normal case
        for corpora larger than RAM; it costs CPU per document when it is cached. Not
        part of the stream's identity: it never changes the batches.
    rank, world_size
        ``world_size=None`` (default): one consumer, batches of ``batch_size`` windows,
        a version-1 cursor tied to ``batch_size``. With ``world_size`` (``1`` included)
        the stream has global-batch semantics: global batch ``k`` is window positions
        ``[k * G, (k + 1) * G)``, ``G = world_size * batch_size``, and rank ``rank``
        takes its contiguous ``batch_size`` of them (at the end of an epoch a rank's
        part may be smaller or empty, so every rank takes the same number of steps).
        The concatenation over ranks of a step is the same for every factorisation of
        ``G``; the cursor counts global windows (``{"version": 2, "epoch",
        "position", "stream"}``) and resumes with any ``world_size`` and
        ``batch_size``: nothing repeated, nothing skipped. ``rank`` defaults to 0.
    mesh, dp_dims
        A ``torch.distributed.DeviceMesh`` and the names of its data-parallel
        dimensions, in place of ``rank``/``world_size``: the stream takes the global
        layout on the mesh's data-parallel place
        (:func:`~mixle.data.data_parallel_place`), so tensor-, pipeline- and
        context-parallel peers get identical batches.

    Raises
    ------
    ArgumentTypeError
        A scalar argument has the wrong type; ``documents`` is not a sequence of 1-D
        arrays (a single array must be wrapped: ``[token_ids]``).
    ArgumentError
        ``block``/``batch_size`` not positive, ``epochs``/``seed`` negative, negative
        document lengths.
    TokenIdError
        A document of an in-memory ``list``/``tuple`` holds an invalid id (checked at
        construction); for lazy sequences ids are checked as they are read, and an
        integer dtype of up to 32 bits, or int64, needs no per-token check.

    Notes
    -----
    Memory: one int64 prefix-sum array over document lengths, O(1) for the shuffle
    (six round keys plus a chunk of 4096 permuted positions), and O(batch_size x block)
    per batch. Each batch reads only the document pieces its windows overlap. Without
    ``documents.fingerprint`` the first :meth:`state_dict` hashes all documents once.

    Iterating the same ``TokenStream`` from two loops at once shares one cursor.

    To draw windows from a weighted blend of corpora, use
    ``Mixture(sources, ..., objective="windows")``: the same windows and Feistel
    shuffle per source, with an exact schedule choosing each global window's source.
    """

    def __init__(
        self,
        documents: Sequence[Any],
        block: int,
        batch_size: int,
        *,
        epochs: int = 1,
        shuffle: bool = True,
        seed: int = 0,
        boundary_id: int | None = None,
        prefetch: bool = True,
        rank: int | None = None,
        world_size: int | None = None,
        mesh: DeviceMesh | None = None,
        dp_dims: DpDims = ("dp",),
    ) -> None:
        rank, world_size = place_from_mesh(mesh, dp_dims, rank, world_size)
        rank = 0 if rank is None else rank
        self.pack = PackOptions(block, boundary_id=boundary_id)
        # Without world_size: one consumer (rank 0 of 1) with its own cursor; with it,
        # the global layout of windows.
        self.shard = ShardOptions(
            rank,
            1 if world_size is None else world_size,
            batch_size,
            "per-rank" if world_size is None else "global",
        )
        self.block, self.boundary_id = self.pack.block, self.pack.boundary_id
        self.batch_size, self.rank = self.shard.batch_size, self.shard.rank
        self.world_size = None if world_size is None else self.shard.world_size
        self.epochs = nonnegative_int("epochs", epochs)
        self.seed = nonnegative_int("seed", seed)
        self.shuffle = _check_flag("shuffle", shuffle)
        self.prefetch = _check_flag("prefetch", prefetch)
        if isinstance(documents, np.ndarray | str | bytes):
            raise ArgumentTypeError(
                "`documents` must be a sequence of 1-D token arrays. Got "
                f"{type(documents).__name__} instead; wrap one token array as [token_ids]."
            )
        if isinstance(documents, Mixture):
            raise ArgumentTypeError(
                "`documents` is a Mixture: build it with objective='windows' and iterate it "
                "(Mixture(sources, block=..., objective='windows')) to draw TokenStream "
                "windows from its sources."
            )
        source = as_documents(documents)
        lengths = np.asarray(source.lengths, dtype=np.int64)
        if lengths.ndim != 1 or lengths.shape[0] != len(documents):
            raise ArgumentError(
                f"`documents.lengths` must have one entry per document ({len(documents)}). "
                f"Got shape {lengths.shape} instead."
            )
        if lengths.size and int(lengths.min()) < 0:
            bad = int(np.flatnonzero(lengths < 0)[0])
            raise ArgumentError(
                f"document {bad} has negative length {int(lengths[bad])} in `documents.lengths`."
            )
        if isinstance(source, SequenceDocuments) and isinstance(source.items, list | tuple):
            # In memory: check every id now, as the array form does, rather than mid-epoch.
            for index in range(len(source)):
                checked_document(source, index, int(lengths[index]))
        self.documents = source
        self._windows = TokenWindows(source, lengths, self.block, self.boundary_id)
        self._cursor = (
            Cursor("TokenStream", index_key="position")
            if self.world_size is None
            else Cursor("TokenStream", index_key="position", version=2)
        )

    @property
    def num_tokens(self) -> int:
        """Tokens in the stream, boundary ids included."""
        return self._windows.num_tokens

    @property
    def num_windows(self) -> int:
        """Windows per epoch: ``max(num_tokens - block, 0)``."""
        return self._windows.num_windows

    def num_batches(self) -> int:
        """Batches per epoch: ``ceil(num_windows / batch_size)``; with ``world_size``,
        global batches (steps) per epoch, ``ceil(num_windows / global_batch_size)``."""
        return -(-self.num_windows // self.global_batch_size)

    @property
    def global_batch_size(self) -> int:
        """Windows of one step over all ranks: ``world_size * batch_size``."""
        return self.shard.global_batch_size

    def _read(self, starts: np.ndarray) -> Batch:
        """The windows at stream offsets ``starts`` as one batch."""
        context, targets = self._windows.read(starts, scattered=self.shuffle)
        return Batch(context, targets)

    def read(self, epoch: int, position: int) -> Batch:
        """The batch iteration yields at cursor ``(epoch, position)`` (see :attr:`cursor`):
        this rank's part of the global batch at window ``position`` with ``world_size``,
        else the batch of ``batch_size`` windows from ``position``."""
        epoch = nonnegative_int("epoch", epoch)
        position = nonnegative_int("position", position)
        first = min(position + self.rank * self.batch_size, self.num_windows)
        last = min(first + self.batch_size, self.num_windows)
        return self._read(self.window_indices(epoch, np.arange(first, last)))

    def epoch_size(self, epoch: int) -> int:
        """Where the cursor's position ends in an epoch: :attr:`num_windows`."""
        nonnegative_int("epoch", epoch)
        return self.num_windows

    def steps_left(self, epoch: int, position: int) -> int:
        """Batches (steps) from cursor ``(epoch, position)`` to the end of ``epoch``."""
        return max(-(-(self.epoch_size(epoch) - position) // self.global_batch_size), 0)

    def next_cursor(self, epoch: int, position: int, steps: int) -> tuple[int, int] | None:
        """The cursor ``steps`` batches (global batches with ``world_size``) after
        ``(epoch, position)``; ``None`` once past the last epoch (or when an epoch has no
        windows)."""
        size, total = self.global_batch_size, self.num_windows
        while total and epoch < self.epochs:
            left = -(-(total - position) // size) if position < total else 0
            if steps < left:
                return epoch, position + steps * size
            steps -= left
            epoch, position = epoch + 1, 0
        return None

    def window_indices(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        """Window starts (stream offsets) visited at ``positions`` of epoch ``epoch``."""
        positions = np.asarray(positions, dtype=np.int64)
        if not self.shuffle:
            return positions
        return FeistelPermutation(self.num_windows, self.seed, epoch)(positions)

    def iter_epoch(self, epoch: int, *, start_batch: int = 0, step: int = 1) -> Iterator[Batch]:
        """:meth:`epoch_batches` as :class:`~mixle.data.Batch` es."""
        epoch = nonnegative_int("epoch", epoch)
        start_batch = nonnegative_int("start_batch", start_batch)
        step = positive_int("step", step)
        if self.world_size is not None:  # this rank's parts of global batches
            for index in range(start_batch, self.num_batches(), step):
                yield self.read(epoch, index * self.global_batch_size)
            return
        indices = range(start_batch, self.num_batches(), step)
        permutation = (
            FeistelPermutation(self.num_windows, self.seed, epoch) if self.shuffle else None
        )
        most = max(1, _CHUNK_WINDOWS // self.batch_size)
        chunk_first, per_chunk = 0, 1
        while chunk_first < len(indices):
            chunk = indices[chunk_first : chunk_first + per_chunk]
            # Chunks grow 1, 2, 4, ... batches up to ~4096 windows, so the first batch
            # after a (re)start comes quickly and later ones amortise the permutation.
            chunk_first, per_chunk = chunk_first + per_chunk, min(2 * per_chunk, most)
            firsts = np.asarray(chunk, dtype=np.int64) * self.batch_size
            positions = (firsts[:, None] + np.arange(self.batch_size)).reshape(-1)
            positions = positions[positions < self.num_windows]
            starts = permutation(positions) if permutation is not None else positions
            if self.prefetch:
                # One hint per chunk: the documents of the coming batches, in read order.
                self._windows.prefetch(starts)
            offset = 0
            for first in firsts.tolist():
                size = min(self.batch_size, self.num_windows - first)
                yield self._read(starts[offset : offset + size])
                offset += size

    def batches(self) -> Iterator[Batch]:
        """Yield :class:`~mixle.data.Batch` es from the cursor to the end of the last
        epoch, advancing the cursor (moved before each batch is handed out)."""
        if self.world_size is not None:
            yield from self._iterate_global()
            return
        cursor = self._cursor
        while cursor.epoch < self.epochs:
            epoch = cursor.epoch
            start = cursor.index // self.batch_size
            for batch in self.iter_epoch(epoch, start_batch=start):
                position = cursor.index + batch.num_rows
                cursor.move(*((epoch, position) if position < self.num_windows else (epoch + 1, 0)))
                yield batch
            if cursor.epoch == epoch:  # an epoch without windows
                cursor.move(epoch + 1, 0)

    def _iterate_global(self) -> Iterator[Batch]:
        """Global batches from the cursor on; the cursor counts global windows."""
        cursor, size, total = self._cursor, self.global_batch_size, self.num_windows
        while cursor.epoch < self.epochs:
            epoch, start = cursor.position
            permutation = FeistelPermutation(total, self.seed, epoch) if self.shuffle else None
            for position in range(start, total, size):
                first = min(position + self.rank * self.batch_size, total)
                positions = np.arange(first, min(first + self.batch_size, total), dtype=np.int64)
                starts = permutation(positions) if permutation is not None else positions
                batch = self._read(starts)
                following = position + size
                cursor.move(*((epoch, following) if following < total else (epoch + 1, 0)))
                yield batch
            if cursor.position == (epoch, start):  # an epoch without windows left
                cursor.move(epoch + 1, 0)

    @property
    def cursor(self) -> tuple[int, int]:
        """``(epoch, position)``: the next batch starts at window position ``position``
        (a global window position with ``world_size``)."""
        return self._cursor.position

    def seek(self, epoch: int, position: int) -> None:
        """Move the cursor to ``(epoch, position)`` (no replay, no checks beyond the
        types: :meth:`load_state_dict` validates a saved cursor)."""
        self._cursor.move(nonnegative_int("epoch", epoch), nonnegative_int("position", position))

    def stream_identity(self) -> dict[str, Any]:
        """The fields that define the stream, as saved under ``"stream"`` in ``state_dict``.

        With ``world_size`` the batch size is not among them (nor rank or world size):
        the global-window cursor resumes with any of them.
        """
        if self.world_size is not None:
            return {
                "fingerprint": self.documents.fingerprint,
                "num_tokens": self.num_tokens,
                "block": self.block,
                "shuffle": self.shuffle,
                "seed": self.seed,
                "boundary_id": self.boundary_id,
                "layout": "global",
            }
        return {
            "fingerprint": self.documents.fingerprint,
            "num_tokens": self.num_tokens,
            "block": self.block,
            "batch_size": self.batch_size,
            "shuffle": self.shuffle,
            "seed": self.seed,
            "boundary_id": self.boundary_id,
        }

    def state_dict(self) -> dict[str, Any]:
        """Return the cursor as a JSON-able dict.

        ``{"version": 1, "epoch": e, "position": p, "stream": {...}}``: the next batch
        is the one starting at window position ``p`` of epoch ``e``; ``stream`` holds
        the fields that define the stream (documents fingerprint, token count, block,
        batch size, shuffle, seed, boundary id). ``epochs`` is not among them, so a
        run may be extended with more epochs.
        """
        return self._cursor.state_dict(self.stream_identity())

    def load_state_dict(self, state: Any) -> None:
        """Move the cursor to ``state`` (from :meth:`state_dict`); O(1), no replay.

        Raises
        ------
        StateMismatchError
            ``state`` is malformed, has another version, belongs to a different stream
            (each differing field named with both values), or its cursor lies outside
            this stream (epoch beyond ``epochs``, position not at a batch start).
        """
        version, expected = (
            state.get("version") if isinstance(state, dict) else None,
            self._cursor.version,
        )
        if version in (1, 2) and version != expected:
            raise StateMismatchError(
                f"TokenStream state is a version-{version} state; this stream reads version "
                f"{expected} (version 2: global windows, from a stream built with world_size). "
                f"world_size in checkpoint: {'set' if version == 2 else None} / in stream: "
                f"{self.world_size}."
            )
        epoch, position = self._cursor.check(state, self.stream_identity())
        if self.world_size is not None:
            if epoch > self.epochs or (epoch == self.epochs and position != 0):
                raise StateMismatchError(
                    f"TokenStream state is at epoch {epoch}, position {position}; "
                    f"this stream has only {self.epochs} epoch(s)."
                )
            if position > self.num_windows:
                raise self._cursor.past_end(epoch, position, self.num_windows, "windows")
            self._cursor.move(
                *((epoch, position) if position < self.num_windows else (epoch + 1, 0))
            )
            return
        if epoch > self.epochs or (epoch == self.epochs and position != 0):
            raise StateMismatchError(
                f"TokenStream state is at epoch {epoch}, position {position}; "
                f"this stream has only {self.epochs} epoch(s)."
            )
        if position % self.batch_size or (position and position >= self.num_windows):
            raise StateMismatchError(
                f"TokenStream state position {position} is not the start of a batch "
                f"of this stream ({self.num_windows} windows, batch_size {self.batch_size})."
            )
        self._cursor.move(epoch, position)

    def __repr__(self) -> str:
        return (
            f"TokenStream(documents={len(self.documents)}, block={self.block}, "
            f"batch_size={self.batch_size}, epochs={self.epochs}, shuffle={self.shuffle}, "
            f"seed={self.seed}, boundary_id={self.boundary_id})"
        )
