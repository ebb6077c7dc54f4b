"""Training batch sources: one rank's resumable stream of batches, with batch ids.

Two objectives feed the trainer:

- :class:`PackedBatches` — :class:`~mixle.data.StreamingCorpus` rows ``(context,
  targets, loss_mask)`` (dense, masked loss), rank-aware with even batch counts. Its
  cursor *is* the ``StreamingCorpus`` state dict.
- :class:`WindowBatches` — :class:`~mixle.data.stream_token_source.TokenStream`
  windows ``(context, next_tokens)``. ``TokenStream`` has no notion of ranks, so rank
  ``r`` of ``W`` takes batches ``r, r + W, r + 2W, ...`` of each epoch and every rank
  stops after ``num_batches // W`` of them (the last ``num_batches % W`` batches of an
  epoch are dropped so that every rank takes the same number of steps).

Both yield ``(batch, (epoch, index))``: the index is the rank's own step within the
epoch, so the pair names the batch uniquely for this rank. :func:`batch_digest` hashes a
batch's contents, for the metrics log (no batch repeated or skipped across resumes).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol, TypedDict, Unpack

import numpy as np

from mixle._checks import nonnegative_int
from mixle.data._batch import Batch
from mixle.data._block_schedule import BlockSchedule
from mixle.data._curriculum_bandit import LengthBandit
from mixle.data._cursor import Cursor
from mixle.data._options import ShardOptions
from mixle.data._order_state import saved_order
from mixle.data._plan_store import PlanStore
from mixle.data._resumable import ResumableStream
from mixle.data._vsl_stream import VariableLengthStream
from mixle.data.stream_token_source import TokenStream
from mixle.data.streaming_corpus import StreamingCorpus
from mixle.errors import ArgumentError

__all__ = [
    "BatchSource",
    "GlobalWindowBatches",
    "PackedBatches",
    "SourceArgs",
    "StreamArgs",
    "StreamSource",
    "WindowBatches",
    "batch_digest",
    "eval_batches",
    "make_source",
    "split_holdout",
]

BatchId = tuple[int, int]


class StreamArgs(TypedDict):
    """How every objective cuts its stream: window or row length, rows per batch, the
    shuffle seed and the optional boundary token."""

    block: int
    batch_size: int
    seed: int
    boundary_id: int | None


class SourceArgs(StreamArgs):
    """:class:`StreamArgs` plus this process's place in the job."""

    rank: int
    world_size: int


class BatchSource(Protocol):
    """What the trainer needs from a stream of training batches."""

    @property
    def cursor(self) -> BatchId:
        """``(epoch, index)`` of the next batch iteration yields."""
        ...

    def steps_in_epoch(self, epoch: int) -> int:
        """How many batches this rank takes in ``epoch`` (equal on every rank)."""
        ...

    def steps_left(self, epoch: int, index: int) -> int:
        """Batches from cursor ``(epoch, index)`` to the end of ``epoch``."""
        ...

    def __iter__(self) -> Iterator[tuple[Batch, BatchId]]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Any) -> None: ...


def split_holdout(documents: Sequence[Any], holdout: int) -> tuple[Sequence[Any], Sequence[Any]]:
    """Split off the last ``holdout`` documents: ``(train, held_out)``.

    Deterministic and O(1) for lazy corpora (slicing a ``ShardedDocuments`` returns a
    view whose fingerprint names the selection).

    Raises
    ------
    ArgumentError
        ``holdout`` leaves no training document.
    """
    holdout = nonnegative_int("holdout_documents", holdout)
    count = len(documents)
    if holdout >= count and count:
        raise ArgumentError(
            f"`holdout_documents` must leave training documents: the corpus has {count} "
            f"documents. Got {holdout} instead."
        )
    return documents[: count - holdout], documents[count - holdout :]


def batch_digest(batch: Batch) -> str:
    """First 16 hex digits of the SHA-256 of a batch's arrays (shape, dtype and bytes),
    in the order of :meth:`Batch.as_tuple`."""
    digest = hashlib.sha256()
    for array in batch.as_tuple():
        contiguous = np.ascontiguousarray(array)
        digest.update(f"{contiguous.dtype.str}{contiguous.shape}".encode())
        digest.update(contiguous.data)
    return digest.hexdigest()[:16]


class StreamSource:
    """The trainer's source over any resumable stream (``StreamingCorpus``,
    ``TokenStream``, ``Mixture``): its cursor and state are the stream's.

    Iteration pairs each batch with the cursor read just before the batch is drawn: the
    stream moves its cursor as it hands a batch out, so the pair names the batch itself.
    A batch's mixture source ids stay out of the step.
    """

    def __init__(self, stream: ResumableStream) -> None:
        self.stream = stream

    @property
    def cursor(self) -> BatchId:
        return self.stream.cursor

    def steps_in_epoch(self, epoch: int) -> int:
        return self.stream.steps_left(nonnegative_int("epoch", epoch), 0)

    def steps_left(self, epoch: int, index: int) -> int:
        return self.stream.steps_left(epoch, index)

    def __iter__(self) -> Iterator[tuple[Batch, BatchId]]:
        batches = self.stream.batches()
        while True:
            batch_id = self.stream.cursor
            batch = next(batches, None)
            if batch is None:
                return
            yield batch.replace(source_ids=None), batch_id

    def state_dict(self) -> dict[str, Any]:
        return self.stream.state_dict()

    def load_state_dict(self, state: Any) -> None:
        self.stream.load_state_dict(state)


def _check_names(owner: str, args: Mapping[str, Any], spec: Any) -> None:
    """Raise ``TypeError`` for a missing or unknown keyword argument, as an explicit
    signature would (``spec`` is the :class:`StreamArgs`/:class:`SourceArgs` type)."""
    expected = spec.__required_keys__
    if args.keys() != expected:
        raise TypeError(
            f"{owner}() got unexpected keyword arguments {sorted(args.keys() - expected)} "
            f"and lacks {sorted(expected - args.keys())}."
        )


def _shuffled_stream(
    documents: Sequence[Any],
    args: StreamArgs,
    *,
    epochs: int,
    rank: int = 0,
    world_size: int | None = None,
) -> TokenStream:
    """The shuffled :class:`TokenStream` of ``args`` (``world_size=None``: rank-agnostic)."""
    return TokenStream(
        documents,
        args["block"],
        args["batch_size"],
        epochs=epochs,
        shuffle=True,
        seed=args["seed"],
        boundary_id=args["boundary_id"],
        rank=rank,
        world_size=world_size,
    )


class PackedBatches(StreamSource):
    """A rank's :class:`StreamingCorpus` batches with their ``(epoch, index)`` ids.

    Parameters
    ----------
    documents
        Training documents (any sequence of 1-D token arrays).
    layout
        As for :class:`StreamingCorpus`. In the global layout the cursor and the batch
        ids are ``(epoch, first global row)``.
    plan_store
        Where the corpus keeps its epoch plans across processes (``None``: nowhere).
    order
        The epoch order, as for :class:`StreamingCorpus`. ``None`` (default): the
        stream's default (``"blocks"`` in the global layout), except that
        :meth:`load_state_dict` takes the order a state was saved with (a checkpoint
        from before there was a choice resumes with ``"permutation"``).
    packing, attention_boundaries
        As for :class:`StreamingCorpus` (``"best_fit"`` needs the global layout; the
        boundaries let the model mask attention per document).
    sequence_selector
        A :class:`~mixle.data.LengthBandit` rationing documents by length (``None``:
        none); the rows then carry document ids, from which the trainer rewards it.
    block_schedule
        Context length per phase (global layout), as for :class:`StreamingCorpus`.
    document_ids
        The rows carry ``(document_ids, position_ids)`` (what ``mixle show`` reads);
        the other fields are unchanged.
    **args
        ``rank, world_size, block, batch_size, seed, boundary_id`` (:class:`SourceArgs`),
        as for :class:`StreamingCorpus`; ``even_batches`` is always on (per-rank layout)
        so that every rank takes the same number of steps per epoch, as the global
        layout guarantees by construction.
    """

    def __init__(
        self,
        documents: Sequence[Any],
        *,
        layout: str = "per-rank",
        plan_store: PlanStore | None = None,
        order: str | None = None,
        packing: str = "concatenate",
        attention_boundaries: bool = False,
        sequence_selector: LengthBandit | None = None,
        block_schedule: BlockSchedule | None = None,
        document_ids: bool = False,
        **args: Unpack[SourceArgs],
    ) -> None:
        _check_names("PackedBatches", args, SourceArgs)
        self._follows_state = order is None
        self._corpus = functools.partial(
            StreamingCorpus,
            documents,
            even_batches=True,
            layout=layout,
            plan_store=plan_store,
            packing=packing,
            attention_boundaries=attention_boundaries,
            sequence_selector=sequence_selector,
            # The rewards count tokens per bucket.
            document_ids=document_ids or sequence_selector is not None,
            block_schedule=block_schedule,
            **args,
        )
        self.corpus = self._corpus(order=order)
        super().__init__(self.corpus)

    def phase_at(self, epoch: int, index: int) -> tuple[int, int]:
        """``(phase, block)`` of the batch at cursor ``(epoch, index)``
        (:meth:`StreamingCorpus.phase_at`)."""
        return self.corpus.phase_at(epoch, index)

    def load_state_dict(self, state: Any) -> None:
        saved = saved_order(state, self.corpus.stream_identity())
        count = len(self.corpus.documents)
        if (
            self._follows_state
            and saved is not None
            and saved.identity(count) != self.corpus.order.identity(count)
        ):
            # The default order follows the checkpoint: build the stream it was saved with.
            self.corpus = self.stream = self._corpus(
                order=saved.name,
                block_documents=saved.block_documents,
                window_blocks=saved.window_blocks,
                order_version=saved.version,
            )
        self.stream.load_state_dict(state)


class GlobalWindowBatches(StreamSource):
    """A rank's part of every global batch of :class:`TokenStream` windows.

    The stream is built with ``rank``/``world_size`` (global-batch semantics): step
    ``k`` is global windows ``[p, p + world_size * batch_size)`` from the cursor ``p``,
    and rank ``r`` takes its contiguous ``batch_size`` of them (fewer, or none, at the
    end of an epoch, so every rank takes the same steps). The cursor and the batch ids
    are ``(epoch, global window position)``; the state is the stream's version-2
    cursor, which resumes with any world size and batch size. ``**args`` as for
    :class:`WindowBatches`.
    """

    # The trainer decides when to stop; the stream itself runs on.
    _EPOCHS = 2**31

    def __init__(self, documents: Sequence[Any], **args: Unpack[SourceArgs]) -> None:
        _check_names("GlobalWindowBatches", args, SourceArgs)
        self.stream = _shuffled_stream(
            documents,
            args,
            epochs=self._EPOCHS,
            rank=args["rank"],
            world_size=args["world_size"],
        )
        super().__init__(self.stream)


class WindowBatches:
    """A rank's share of :class:`TokenStream` windows, resumable, even across ranks.

    Rank ``rank`` takes batch ``index * world_size + rank`` of the stream's epoch as its
    step ``index``, for ``index < num_batches // world_size``. The cursor is
    ``(epoch, index)``; the state dict nests the stream's identity plus the rank layout.

    Parameters
    ----------
    documents
        Training documents (any sequence of 1-D token arrays).
    **args
        ``rank, world_size`` (keyword-only, validated) and the ``block, batch_size,
        seed, boundary_id`` of the shuffled :class:`TokenStream` (:class:`SourceArgs`).
    """

    def __init__(self, documents: Sequence[Any], **args: Unpack[SourceArgs]) -> None:
        _check_names("WindowBatches", args, SourceArgs)
        self.stream = _shuffled_stream(documents, args, epochs=1)
        shard = ShardOptions(args["rank"], args["world_size"], args["batch_size"])
        self.rank, self.world_size = shard.rank, shard.world_size
        self._cursor = Cursor("WindowBatches")
        self._identity: dict[str, Any] | None = None

    @property
    def cursor(self) -> BatchId:
        return self._cursor.position

    def steps_in_epoch(self, epoch: int) -> int:
        nonnegative_int("epoch", epoch)
        return self.stream.num_batches() // self.world_size

    def steps_left(self, epoch: int, index: int) -> int:
        return max(self.steps_in_epoch(epoch) - index, 0)

    def __iter__(self) -> Iterator[tuple[Batch, BatchId]]:
        cursor = self._cursor
        per_epoch = self.steps_in_epoch(0)
        while per_epoch:
            epoch, start = cursor.position
            batches = self.stream.iter_epoch(
                epoch, start_batch=start * self.world_size + self.rank, step=self.world_size
            )
            for index in range(start, per_epoch):
                batch = next(batches)
                cursor.move(*((epoch, index + 1) if index + 1 < per_epoch else (epoch + 1, 0)))
                yield batch, (epoch, index)
            cursor.move(epoch + 1, 0)

    def stream_identity(self) -> dict[str, Any]:
        """The stream's identity fields plus ``rank`` and ``world_size``."""
        if self._identity is None:
            self._identity = {
                **self.stream.stream_identity(),
                "rank": self.rank,
                "world_size": self.world_size,
            }
        return self._identity

    def state_dict(self) -> dict[str, Any]:
        """``{"version": 1, "epoch", "batch", "stream": {...}}`` (JSON-able)."""
        return self._cursor.state_dict(self.stream_identity())

    def load_state_dict(self, state: Any) -> None:
        """Restore a cursor from :meth:`state_dict`; O(1).

        Raises
        ------
        StateMismatchError
            Malformed, another version, another stream (each field named), or a batch
            index beyond the epoch.
        """
        self._cursor.load(
            state, self.stream_identity(), epoch_size=self.steps_in_epoch, unit="batches per rank"
        )


def make_source(
    objective: str,
    documents: Sequence[Any],
    *,
    layout: str = "per-rank",
    plan_store: PlanStore | None = None,
    order: str | None = None,
    packing: str = "concatenate",
    document_mask: bool = False,
    length_bandit: LengthBandit | None = None,
    block_schedule: BlockSchedule | None = None,
    vsl_buckets: int | None = None,
    vsl_curriculum: str = "natural",
    document_ids: bool = False,
    **args: Unpack[SourceArgs],
) -> StreamSource | WindowBatches:
    """The batch source for ``objective`` (``"packed"`` or ``"windows"``) and ``layout``;
    ``plan_store`` keeps the packed objective's epoch plans (windows plan in O(1)),
    ``order`` is its epoch order (:class:`PackedBatches`; windows have their own), and
    ``packing``, ``document_mask`` (attention boundaries) and ``length_bandit`` (the
    ``sequence_selector``; the rows then carry document ids), ``block_schedule`` and
    ``document_ids`` (rows with document ids and positions) apply to packed rows.
    ``vsl_buckets`` (the shortest bucket) makes the packed source a
    :class:`~mixle.data.VariableLengthStream` of ``vsl_curriculum`` whose global batch
    holds ``world_size * batch_size * block`` tokens (``layout``, ``order``, ``packing``
    and the boundary token do not apply)."""
    if objective == "packed" and vsl_buckets is not None:
        return StreamSource(
            VariableLengthStream(
                documents,
                block=args["block"],
                min_length=vsl_buckets,
                tokens_per_batch=args["world_size"] * args["batch_size"] * args["block"],
                curriculum=vsl_curriculum,
                seed=args["seed"],
                rank=args["rank"],
                world_size=args["world_size"],
            )
        )
    if objective == "packed":
        return PackedBatches(
            documents,
            layout=layout,
            plan_store=plan_store,
            order=order,
            packing=packing,
            attention_boundaries=document_mask,
            sequence_selector=length_bandit,
            block_schedule=block_schedule,
            document_ids=document_ids,
            **args,
        )
    cls = GlobalWindowBatches if layout == "global" else WindowBatches
    return cls(documents, **args)


def eval_batches(
    objective: str,
    documents: Sequence[Any],
    *,
    limit: int,
    document_mask: bool = False,
    **args: Unpack[StreamArgs],
) -> list[Batch]:
    """The fixed held-out batches: the first ``limit`` batches of epoch 0 (all ranks
    alike; concatenate-and-chunk rows, with attention boundaries under ``document_mask``)."""
    _check_names("eval_batches", args, StreamArgs)
    if not len(documents):
        return []
    if objective == "packed":
        corpus = StreamingCorpus(
            documents,
            rank=0,
            world_size=1,
            even_batches=False,
            attention_boundaries=document_mask,
            **args,
        )
        count = min(limit, corpus.num_batches(0))
        return [corpus.read(0, index) for index in range(count)]
    stream = _shuffled_stream(documents, args, epochs=1)
    count = min(limit, stream.num_batches())
    return [stream.read(0, index * stream.batch_size) for index in range(count)]
