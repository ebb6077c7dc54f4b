"""``VariableLengthStream``: batches of one power-of-two bucket each, a constant token count.

Variable-sequence-length training (OLMo-core's ``NumpyVSLDataset``; "Dataset
Decomposition", Pouransari et al. 2024): every document is cut into power-of-two
pieces (:mod:`~mixle.data._vsl_buckets`), a piece of ``L`` targets goes to bucket
``L``, and every global batch comes from one bucket and holds ``tokens_per_batch``
positions: ``tokens_per_batch / L`` rows of ``L``. Short documents are no longer
packed next to others nor padded to the block; attention never crosses a document;
short batches cost less attention. The order of the buckets follows a closed-form
curriculum (:mod:`~mixle.data._vsl_curriculum`: ``"natural"`` or ``"grow_p2"``) or a
:class:`~mixle.data.LengthBandit` rewarded by the trainer (``"bandit"``,
:mod:`~mixle.data._vsl_bandit`).

An epoch holds every piece exactly once: bucket ``k`` has ``ceil(pieces / rows)``
batches, the pieces in a keyed pseudo-random order (a Feistel permutation per bucket and
epoch); the last batch of a bucket is completed with fully masked rows (document id
-1), so its token count stays constant and only its real targets differ. Everything
is keyed by ``(seed, epoch, corpus fingerprint)``.

Resume and elasticity: the cursor is ``(epoch, global batch)``. Reading batch ``i``
is a binary search in the curriculum's small plan, one permutation lookup per row and
an O(log documents) search per row in the bucket's piece table: no replay, no
per-epoch O(documents) work. The piece tables themselves are built once per stream
from ``lengths`` (O(documents), vectorised; the one O(documents) cost, paid at
construction as the global layout pays its plan per window). Rank ``r`` of ``W``
reads rows ``[r * n / W, (r + 1) * n / W)`` of a global batch of ``n`` rows, so the
state (which names neither rank, world size nor rows per rank) resumes with any world
size that divides the longest bucket's batch, as long as ``tokens_per_batch`` (the
global token count) is unchanged. The ``"bandit"`` order is not closed-form: its state
adds the batches each bucket gave in the epoch and the bandit's state (O(buckets), plus
K floats per window of the bandit), and a batch is read at the cursor only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from mixle._checks import exact_int, nonnegative_int, one_of, positive_int
from mixle.data._batch import Batch
from mixle.data._curriculum_bandit import LengthBandit
from mixle.data._cursor import Cursor
from mixle.data._documents import DocumentSource, as_documents
from mixle.data._options import ShardOptions
from mixle.data._permutation import FeistelPermutation
from mixle.data._vsl_bandit import BanditOrder
from mixle.data._vsl_buckets import BucketPieces
from mixle.data._vsl_curriculum import CURRICULA as CLOSED_FORM
from mixle.data._vsl_curriculum import CurriculumPlan, plan_curriculum
from mixle.errors import ArgumentError, StateMismatchError

__all__ = ["CURRICULA", "VariableLengthStream"]

#: The orders of the bucket batches: the closed-form curricula and the length bandit.
CURRICULA = (*CLOSED_FORM, "bandit")

STATE_VERSION = 1
KIND = "variable-length"
_PIECE_DOMAIN = 0x56534C50  # "VSLP": keys the piece orders apart from the segment orders


def _fingerprint_word(fingerprint: str) -> int:
    """A nonzero 62-bit key word derived from the corpus fingerprint."""
    return int(hashlib.sha256(fingerprint.encode()).hexdigest()[:15], 16) | 1


class VariableLengthStream:
    """Variable-sequence-length batches of one rank (module docstring), resumable.

    Parameters
    ----------
    documents
        Any sequence of 1-D integer token arrays, or a
        :class:`~mixle.data.DocumentSource`.
    block
        The longest bucket (and the model's context length): a power of two.
    min_length
        The shortest bucket: a power of two ``<= block``; the buckets are every power
        of two from it to ``block``.
    tokens_per_batch
        Positions of one *global* batch: ``tokens_per_batch / L`` rows of bucket ``L``
        over all ranks. A multiple of ``block * world_size`` (the longest bucket's
        rows split evenly over the ranks).
    curriculum
        ``"natural"`` (default) or ``"grow_p2"`` (:mod:`~mixle.data._vsl_curriculum`), or
        ``"bandit"``: a :class:`~mixle.data.LengthBandit` over the buckets picks the
        bucket of each batch from the rewards given to :attr:`bandit`
        (:mod:`~mixle.data._vsl_bandit`; read at the cursor only, no random access).
    num_cycles
        grow_p2's cycles per epoch (8, as OLMo-core's default); part of the identity.
    bandit_window
        ``"bandit"``: batches between two foldings of the rewards into its weights.
    remainder
        ``"pad"`` (default) or ``"drop"``: what becomes of a document's last targets
        below ``min_length`` (:mod:`~mixle.data._vsl_buckets`).
    seed
        Keys the piece and batch orders (with the epoch and the corpus fingerprint).
    rank, world_size
        This process's data-parallel place.
    pad_id
        The token of padded positions (masked out of the loss).

    Raises
    ------
    ArgumentError, ArgumentTypeError
        A bad argument (named with its value): ``block``/``min_length`` not powers of
        two or ``min_length > block`` (no bucket), ``tokens_per_batch`` not a multiple
        of ``block * world_size``, an unknown ``curriculum``/``remainder``, or grow_p2
        asked for a bucket without pieces (named).
    """

    def __init__(
        self,
        documents: Sequence[Any] | DocumentSource,
        *,
        block: int,
        min_length: int,
        tokens_per_batch: int,
        curriculum: str = "natural",
        num_cycles: int = 8,
        bandit_window: int = 64,
        remainder: str = "pad",
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        pad_id: int = 0,
    ) -> None:
        self.documents = as_documents(documents)
        self.seed = nonnegative_int("seed", seed)
        self.pad_id = exact_int("pad_id", pad_id)
        shard = ShardOptions(rank, world_size)
        self.rank, self.world_size = shard.rank, shard.world_size
        self.tokens_per_batch = positive_int("tokens_per_batch", tokens_per_batch)
        self.pieces = BucketPieces(
            self.documents.lengths, min_length=min_length, block=block, remainder=remainder
        )
        self.block, self.min_length = self.pieces.block, self.pieces.min_length
        unit = self.block * self.world_size
        if self.tokens_per_batch % unit:
            raise ArgumentError(
                f"`tokens_per_batch` must be a multiple of block x world_size = {self.block} x "
                f"{self.world_size} = {unit} (the longest bucket's rows split over the ranks). "
                f"Got {self.tokens_per_batch} instead."
            )
        self.curriculum = one_of("curriculum", curriculum, CURRICULA)
        self.num_cycles = positive_int("num_cycles", num_cycles)
        self.bandit_window = positive_int("bandit_window", bandit_window)
        self.remainder = self.pieces.remainder
        self._key = (self.seed, _fingerprint_word(self.documents.fingerprint))
        batches = tuple(
            -(-count // self.rows_per_batch(bucket))
            for bucket, count in enumerate(self.pieces.counts)
        )
        self._batches, self._total = batches, sum(batches)
        self.plan: CurriculumPlan | None = None
        self._bandit: BanditOrder | None = None
        if self.curriculum == "bandit":
            self._bandit = BanditOrder(
                self.bucket_lengths, batches, key=self._key, window=self.bandit_window
            )
        else:
            self.plan = plan_curriculum(
                self.curriculum,
                batches,
                key=self._key,
                num_cycles=self.num_cycles,
                bucket_names=tuple(self.pieces.bucket_name(k) for k in range(len(batches))),
            )
        self._cursor = Cursor("VariableLengthStream", index_key="batch", version=STATE_VERSION)
        self._identity: dict[str, Any] | None = None
        self._piece_orders: dict[tuple[int, int], FeistelPermutation] = {}

    # ------------------------------------------------------------------ layout
    @property
    def bucket_lengths(self) -> tuple[int, ...]:
        """The bucket lengths, shortest first."""
        return self.pieces.lengths_of_buckets

    @property
    def pieces_per_bucket(self) -> tuple[int, ...]:
        """Document pieces in each bucket (the same every epoch)."""
        return self.pieces.counts

    @property
    def batches_per_bucket(self) -> tuple[int, ...]:
        """Global batches of each bucket per epoch."""
        return self._batches

    @property
    def bandit(self) -> LengthBandit | None:
        """The ``"bandit"`` curriculum's :class:`~mixle.data.LengthBandit` (bucket ``k``
        of the stream is its bucket ``k``): report each bucket's reward to it."""
        return None if self._bandit is None else self._bandit.bandit

    def bucket_tokens(self, batch: Batch) -> np.ndarray:
        """Real targets of ``batch`` per bucket (int64, one count per bucket): all in the
        bucket of its width."""
        counts = np.zeros(len(self.bucket_lengths), dtype=np.int64)
        counts[self.bucket_lengths.index(int(batch.context.shape[1]))] = batch.num_targets
        return counts

    def rows_per_batch(self, bucket: int) -> int:
        """Rows of one *global* batch of ``bucket``: ``tokens_per_batch / length``."""
        return self.tokens_per_batch // self.bucket_lengths[bucket]

    def bucket_of(self, epoch: int, index: int) -> int:
        """The bucket of global batch ``index`` of ``epoch`` (``"bandit"``: at the cursor only)."""
        return self._locate(*self._checked(epoch, index))[0]

    # ----------------------------------------------------------- resumable API
    @property
    def cursor(self) -> tuple[int, int]:
        """``(epoch, global batch)`` of the next batch :meth:`batches` yields."""
        return self._cursor.position

    def epoch_size(self, epoch: int) -> int:
        """Global batches of ``epoch`` (the same for every epoch)."""
        nonnegative_int("epoch", epoch)
        return self._total

    def steps_left(self, epoch: int, index: int) -> int:
        """Batches from cursor ``(epoch, index)`` to the end of ``epoch``."""
        return max(self.epoch_size(epoch) - index, 0)

    def next_cursor(self, epoch: int, index: int, steps: int) -> tuple[int, int] | None:
        """The cursor ``steps`` batches after ``(epoch, index)``; ``None`` for an empty stream."""
        steps = nonnegative_int("steps", steps)
        total = self.epoch_size(epoch)
        if total == 0:
            return None
        position = epoch * total + nonnegative_int("index", index) + steps
        return divmod(position, total)

    def read(self, epoch: int, index: int) -> Batch:
        """This rank's part of global batch ``index`` of ``epoch`` (no state changes).

        Raises
        ------
        ArgumentError
            ``index >= epoch_size(epoch)``, a negative argument, or (``"bandit"``) a
            batch other than the cursor's.
        """
        epoch, index = self._checked(epoch, index)
        return self._rows(epoch, *self._locate(epoch, index))

    def batches(self) -> Iterator[Batch]:
        """Batches from the cursor on, across epochs, moving the cursor before each is
        handed out (a state taken after ``k`` batches resumes with batch ``k + 1``)."""
        cursor, total = self._cursor, self._total
        while total:
            epoch, start = cursor.position
            for index in range(start, total):
                if self._bandit is not None:
                    bucket, ordinal = self._bandit.draw(epoch, index)
                else:
                    bucket, ordinal = self._locate(epoch, index)
                cursor.move(*((epoch, index + 1) if index + 1 < total else (epoch + 1, 0)))
                yield self._rows(epoch, bucket, ordinal)
            if cursor.position == (epoch, start):  # start == total: nothing left
                cursor.move(epoch + 1, 0)

    def stream_identity(self) -> dict[str, Any]:
        """Everything that defines the stream (no rank, world size or rows per rank)."""
        if self._identity is None:
            self._identity = {
                "kind": KIND,
                "fingerprint": self.documents.fingerprint,
                "num_documents": len(self.documents),
                "seed": self.seed,
                "block": self.block,
                "min_length": self.min_length,
                "tokens_per_batch": self.tokens_per_batch,
                "curriculum": self.curriculum,
                "num_cycles": self.num_cycles,
                "bandit_window": self.bandit_window if self._bandit is not None else None,
                "remainder": self.remainder,
                "pad_id": self.pad_id,
            }
        return self._identity

    def state_dict(self) -> dict[str, Any]:
        """``{"version": 1, "epoch", "batch", "stream": identity}`` (JSON-able); the
        ``"bandit"`` curriculum adds ``"bandit"``: the batches each bucket gave in the
        epoch and the bandit's state."""
        state = self._cursor.state_dict(self.stream_identity())
        if self._bandit is not None:
            state["bandit"] = self._bandit.state_dict()
        return state

    def load_state_dict(self, state: Any) -> None:
        """Move to a saved cursor in O(1).

        Raises
        ------
        StateMismatchError
            Malformed, another version, another stream — e.g. another ``curriculum`` or
            ``tokens_per_batch`` (each differing field named with both values) — or a
            batch past the epoch's end; for ``"bandit"``, a missing or inconsistent
            ``bandit`` field or a bandit state of another policy. Nothing moves unless
            every check passes.
        """
        identity = self.stream_identity()
        _, index = self._cursor.check(state, identity)
        if self._bandit is not None:
            if "bandit" not in state:
                raise StateMismatchError(
                    "VariableLengthStream state lacks the field `bandit` (the batches each "
                    "bucket gave and the bandit's weights)."
                )
            self._bandit.load_state_dict(state["bandit"], index)
        self._cursor.load(state, identity, epoch_size=self.epoch_size)

    # ------------------------------------------------------------------ reading
    def _checked(self, epoch: int, index: int) -> tuple[int, int]:
        epoch = nonnegative_int("epoch", epoch)
        index = nonnegative_int("index", index)
        if index >= self._total:
            raise ArgumentError(
                f"`index` must be smaller than epoch_size({epoch}) = {self._total}. "
                f"Got {index} instead."
            )
        return epoch, index

    def _locate(self, epoch: int, index: int) -> tuple[int, int]:
        """``(bucket, ordinal)`` of batch ``index`` of ``epoch``, without moving anything."""
        if self._bandit is None:
            assert self.plan is not None
            return self.plan.locate(epoch, index)
        if (epoch, index) != self.cursor:
            raise ArgumentError(
                f"a bandit-ordered stream is read at its cursor {self.cursor} only. Got "
                f"({epoch}, {index})."
            )
        return self._bandit.peek(epoch, index)

    def piece_order(self, epoch: int, bucket: int) -> FeistelPermutation:
        """The keyed order of ``bucket``'s pieces in ``epoch``: the ``p``-th row of the
        bucket's rows in the epoch (batch ``p // rows_per_batch(bucket)``) holds piece
        ``order(p)`` (its ordinal, :meth:`BucketPieces.pieces`). Kept for the latest epoch."""
        order = self._piece_orders.get((epoch, bucket))
        if order is None:
            if any(seen != epoch for seen, _ in self._piece_orders):
                self._piece_orders.clear()
            order = FeistelPermutation(
                self.pieces.counts[bucket],
                self.seed,
                epoch,
                domain=(self._key[1], bucket, _PIECE_DOMAIN),
            )
            self._piece_orders[epoch, bucket] = order
        return order

    def _rows(self, epoch: int, bucket: int, ordinal: int) -> Batch:
        """This rank's rows of the ``ordinal``-th batch of ``bucket`` in ``epoch``."""
        length = self.bucket_lengths[bucket]
        global_rows = self.rows_per_batch(bucket)
        count = global_rows // self.world_size
        rows = ordinal * global_rows + self.rank * count + np.arange(count, dtype=np.int64)
        pieces_here = self.pieces.counts[bucket]
        real = np.flatnonzero(rows < pieces_here)
        order = self.piece_order(epoch, bucket)
        pieces = self.pieces.pieces(bucket, order(rows[real]) if real.size else real)
        width = length + 1
        buffer = np.full((count, width), self.pad_id, dtype=np.int64)
        self.documents.gather_into(
            pieces.documents,
            pieces.starts,
            pieces.starts + pieces.targets + 1,
            buffer.reshape(-1),
            real * width,
        )
        targets_per_row = np.zeros(count, dtype=np.int64)
        targets_per_row[real] = pieces.targets
        positions = np.arange(length, dtype=np.int64)
        mask = positions[None, :] < targets_per_row[:, None]
        documents = np.full(count, -1, dtype=np.int64)
        documents[real] = pieces.documents
        starts = np.zeros(count, dtype=np.int64)
        starts[real] = pieces.starts
        return Batch(
            buffer[:, :length],
            buffer[:, 1:],
            mask,
            np.where(mask, documents[:, None], -1),
            np.where(mask, starts[:, None] + positions[None, :], 0),
        )
