"""Which run is meant: a ``mixle train`` run, or a corpus and stream options, as a :class:`RunSpec`.

:func:`resolve_run` takes what a user names — a run's checkpoint directory (or one
checkpoint directory in it), a corpus directory or URL, or a mixture file — and
returns one :class:`RunSpec` that rebuilds the exact batch source the run fed from
(``mixle.train._sources.make_source``, or ``mixle.train._mixture.open_mixture`` for a
mixture) for any rank, and places any step on it in closed form (the stream's
``next_cursor``): nothing is replayed and torch is never imported.

From a run, everything comes from its newest checkpoint: the configuration
(``meta.json`` ``config``: corpus or mixture, objective, layout, order, packing,
block, batch size, boundary, holdout, seed), the world size, and the data cursor after
its step (``progress.cursor``). Each rank's saved stream state is loaded into the
rebuilt source, so the order follows the checkpoint exactly as ``mixle train --resume``
does, and a corpus that is no longer the one trained on is refused (its fingerprint).
The run's last step is the later of the checkpoint's and the last ``step`` record of
its metrics log (read from the end of the file, never the whole log).

API (stable; ``mixle show`` and ``mixle where`` build on it): :func:`resolve_run`,
:class:`RunSpec` (``data``, ``seed``, ``world_size``, ``record``, ``last_step``,
``source_names``, ``corpora``, ``order``, ``source``, ``at_step``, ``cursor_at``, ``batch``,
``check_step``, ``check_rank``) and :class:`RunRecord`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mixle._checks import nonnegative_int, positive_int
from mixle.corpus import PlanFiles, open_corpus
from mixle.data._batch import Batch
from mixle.errors import ArgumentError, CheckpointError, StateMismatchError
from mixle.train._config import DataConfig, TrainConfig
from mixle.train._mixture import MixtureBatches, open_mixture
from mixle.train._sources import (
    BatchSource,
    PackedBatches,
    StreamSource,
    WindowBatches,
    make_source,
    split_holdout,
)
from mixle.train.checkpoint import list_checkpoints, read_meta, read_rank_state

__all__ = ["BatchId", "RunRecord", "RunSpec", "resolve_run"]

BatchId = tuple[int, int]
"""A source's cursor ``(epoch, index)`` (the index counts batches, or global rows or
windows in the global layout; ``(0, row)`` for a mixture)."""

_METRICS_TAIL_BYTES = 1 << 16
# A run segment: (steps taken before it, its first cursor, world_size, batch_size).
_Segment = tuple[int, BatchId, int, int]
_META_FILE = "meta.json"


@dataclass(frozen=True, slots=True)
class RunRecord:
    """What a run's newest checkpoint records (see :func:`resolve_run`).

    Attributes
    ----------
    directory
        The run's checkpoint directory (``--checkpoint-dir``).
    checkpoint
        The newest checkpoint's directory (``<directory>/step-NNNNNNNN``).
    step
        Steps taken when that checkpoint was written.
    cursor
        The data cursor after ``step`` steps (``meta.json`` ``progress.cursor``).
    last_step
        The run's last step: ``step``, or the last ``step`` record of the metrics log
        when the run went on after its newest checkpoint.
    meta
        The checkpoint's verified ``meta.json``.
    """

    directory: str
    checkpoint: str
    step: int
    cursor: BatchId
    last_step: int
    meta: dict[str, Any]


class RunSpec:
    """A run's data stream, rebuilt: for every rank, the batch of any step.

    Build it with :func:`resolve_run`. ``data`` is the stream's configuration (the
    data section of ``mixle train``'s :class:`~mixle.train.TrainConfig`), ``seed`` the
    shuffle seed, ``world_size`` the number of ranks, ``record`` what the run's
    checkpoint records (``None`` for a corpus given with options), ``steps`` the run's
    ``--steps`` (what a ``block_schedule``'s fractions are of). Steps are numbered
    as ``mixle train`` counts them (``metrics.jsonl`` ``step``): step 1 is the first
    batch of the run.

    Raises
    ------
    ArgumentError
        ``length_buckets`` is set or ``vsl_curriculum`` is ``"bandit"`` (the bandit's
        order depends on the training losses, so its batches cannot be rebuilt from the
        configuration), or a mixture with
        ``layout="per-rank"`` or held-out documents (``mixle train`` refuses those too).
    """

    def __init__(
        self,
        data: DataConfig,
        *,
        seed: int,
        world_size: int,
        record: RunRecord | None = None,
        steps: int | None = None,
    ) -> None:
        if not isinstance(data, DataConfig):
            raise ArgumentError(f"`data` must be a DataConfig. Got {type(data).__name__}.")
        for name, value in (
            ("length_buckets", data.length_buckets),
            ("vsl_curriculum", "bandit" if data.vsl_curriculum == "bandit" else None),
        ):
            if value is not None:
                raise ArgumentError(
                    f"{name}={value!r}: the length bandit picks documents from the training "
                    "losses, so its batches cannot be rebuilt without them."
                )
        if data.mixture is not None and (data.layout != "global" or data.holdout_documents):
            raise ArgumentError(
                f"the mixture {data.mixture} needs layout='global' and holdout_documents=0 "
                f"(as in mixle train). Got layout={data.layout!r}, "
                f"holdout_documents={data.holdout_documents}."
            )
        self.data = data
        self.seed = nonnegative_int("seed", seed)
        self.world_size = positive_int("world_size", world_size)
        self.record = record
        self.steps = steps
        self._sources: dict[int, BatchSource] = {}
        self._whole_source: BatchSource | None = None
        self._documents: Sequence[Any] | None = None
        self._consistent_from_start: bool | None = None
        self._log: list[_Segment] | None = None  # the metrics log's segments, once read
        self._segments: dict[_Segment, RunSpec] = {}

    # ------------------------------------------------------------------ what it reads
    @property
    def last_step(self) -> int | None:
        """The run's last step (``None`` for a corpus given with options: no end but the
        stream's own)."""
        return None if self.record is None else self.record.last_step

    @property
    def source_names(self) -> tuple[str, ...]:
        """The name of each source, indexed as the rows' source ids: the mixture's
        source names, or the corpus location alone."""
        if self.data.mixture is None:
            return (self.data.corpus,)
        source = self._whole()
        assert isinstance(source, MixtureBatches)
        return tuple(source.mixture.names)

    @property
    def corpora(self) -> tuple[Sequence[Any], ...]:
        """The documents of each source (indexed like :attr:`source_names`), as opened:
        the whole corpus (held-out documents included: training indices are corpus
        indices), or each mixture source's corpus."""
        if self.data.mixture is None:
            return (self._corpus(),)
        source = self._whole()
        assert isinstance(source, MixtureBatches)
        return tuple(s.documents for s in source.mixture.sources)

    @property
    def order(self) -> str | None:
        """The epoch order the packed rows follow (``"blocks"`` or ``"permutation"``:
        the configured one, or the one the checkpoint was saved with), ``None`` for
        windows and VSL buckets (each shuffled by its own bijection)."""
        source = self._whole()
        if isinstance(source, MixtureBatches) and self.data.objective == "packed":
            return source.mixture.order.name
        if isinstance(source, PackedBatches):
            return source.corpus.order.name
        return None

    def _corpus(self) -> Sequence[Any]:
        if self._documents is None:
            self._documents = open_corpus(self.data.corpus)
        return self._documents

    # ------------------------------------------------------------------ the stream
    def check_rank(self, rank: int) -> int:
        """``rank``, checked to be in ``[0, world_size)``."""
        rank = nonnegative_int("rank", rank)
        if rank >= self.world_size:
            raise ArgumentError(
                f"`rank` must be below the run's world size {self.world_size} (ranks 0 to "
                f"{self.world_size - 1}). Got {rank} instead."
            )
        return rank

    def check_step(self, step: int) -> int:
        """``step``, checked to be a step of the run (``1 <= step <= last_step``)."""
        step = positive_int("step", step)
        last = self.last_step
        if last is not None and step > last:
            assert self.record is not None
            raise ArgumentError(
                f"`step` must be at most {last}, the last step of the run in "
                f"{self.record.directory}. Got {step} instead."
            )
        return step

    def source(self, rank: int) -> BatchSource:
        """The batch source ``mixle train`` built for ``rank`` (cached): packed rows
        carry ``document_ids`` and ``position_ids`` besides what was trained on; from a
        run, the rank's saved stream state is loaded (its order, its corpus checked)."""
        rank = self.check_rank(rank)
        if rank not in self._sources:
            self._sources[rank] = self._build(rank)
        return self._sources[rank]

    def _plan_store(self) -> PlanFiles | None:
        if self.record is None:
            return None
        plans = os.path.join(self.record.directory, "plans")
        return PlanFiles(plans) if os.path.isdir(plans) else None

    def _whole(self) -> BatchSource:
        """The source that reads whole steps: in a global layout (and a mixture) rank 0
        of a world of one with ``world_size * batch_size`` rows per batch, whose batch
        at a cursor is every rank's part end to end (rank ``r``'s part is rows ``[r *
        batch_size, (r + 1) * batch_size)``), so a step is read and planned once; in
        the per-rank layout rank 0's own source."""
        if self.data.layout != "global" and self.data.mixture is None:
            return self.source(0)
        if self._whole_source is None:
            size = self.world_size * self.data.batch_size
            self._whole_source = self._build(0, world_size=1, batch_size=size)
        return self._whole_source

    def _build(
        self, rank: int, *, world_size: int | None = None, batch_size: int | None = None
    ) -> BatchSource:
        world_size = self.world_size if world_size is None else world_size
        batch_size = self.data.batch_size if batch_size is None else batch_size
        data = self.data
        packed = data.objective == "packed"
        source: BatchSource
        if data.mixture is not None:
            mixture, _ = open_mixture(
                data.mixture,
                block=data.block,
                batch_size=batch_size,
                rank=rank,
                world_size=world_size,
                seed=self.seed,
                boundary_id=data.boundary_id,
                objective=data.objective,
                plan_store=self._plan_store(),
                document_ids=packed,
                packing=data.packing,
                attention_boundaries=data.document_mask,
                block_schedule=data.block_schedule_for(world_size, self.steps),
                total_tokens=(
                    None
                    if self.steps is None
                    else self.steps * world_size * batch_size * data.block
                ),
                **({} if data.order is None else {"order": data.order}),
            )
            source = MixtureBatches(mixture, follow_saved_order=data.order is None)
        else:
            train_docs, _ = split_holdout(self._corpus(), data.holdout_documents)
            source = make_source(
                data.objective,
                train_docs,
                rank=rank,
                world_size=world_size,
                layout=data.layout,
                plan_store=self._plan_store(),
                order=data.order,
                packing=data.packing,
                document_mask=data.document_mask,
                document_ids=packed,
                block_schedule=data.block_schedule_for(world_size, self.steps),
                vsl_buckets=data.vsl_buckets,
                vsl_curriculum=data.vsl_curriculum,
                block=data.block,
                batch_size=batch_size,
                seed=self.seed,
                boundary_id=data.boundary_id,
            )
        if self.record is not None:
            self._load_state(source, rank)
        return source

    def _load_state(self, source: BatchSource, rank: int) -> None:
        record = self.record
        assert record is not None
        saved = int(record.meta["world_size"])
        # Global layouts save the same cursor on every rank: rank 0's fits any rank.
        state = read_rank_state(record.checkpoint, record.meta, rank if rank < saved else 0)
        try:
            source.load_state_dict(state.get("stream"))
        except (StateMismatchError, ValueError, TypeError, KeyError) as exc:
            raise CheckpointError(
                f"{record.checkpoint}: rank {rank}'s data cursor does not fit the stream "
                f"rebuilt from its configuration (has the corpus or the mixture file "
                f"changed since?): {exc}"
            ) from exc

    def at_step(self, step: int) -> RunSpec:
        """The spec of the segment of the run that trained ``step``.

        A run resumed with another world size or batch size (the global layout allows
        it) is several segments; each resume writes a ``start`` record (its step,
        cursor and configuration) to the run's metrics log. The log is scanned once
        (only those records are parsed) and the step is placed from its segment's
        start, with that segment's shape. Without a log, the newest checkpoint
        anchors the steps after it, and the steps before it are placed from the start
        when the checkpoint's cursor is where this shape leads. ``self`` when the
        step's segment is the whole run so far (or for a corpus given with options).

        Raises
        ------
        ArgumentError
            Without a metrics log, a step before the newest checkpoint of a run whose
            shape changed (the checkpoint's cursor is not where this shape leads).
        """
        step = self.check_step(step)
        record = self.record
        if record is None:
            return self
        segment = self._segment(step)
        if segment is None:
            if step > record.step or self._consistent():
                return self
            raise ArgumentError(
                f"step {step} cannot be placed: {record.checkpoint} records the cursor "
                f"{list(record.cursor)} after step {record.step}, where the run's current "
                "shape leads elsewhere (it was resumed with another world size or batch "
                f"size) and no metrics log says where. Steps after {record.step} can be shown."
            )
        begin, cursor, world_size, batch_size = segment
        shape = (self.world_size, self.data.batch_size)
        same_shape = (world_size, batch_size) == shape
        assert self._log is not None
        if all((s[2], s[3]) == shape for s in self._log):
            return self  # one shape throughout: placed from the start or the checkpoint
        if segment not in self._segments:
            data = self.data
            if not same_shape:
                data = dataclasses.replace(data, batch_size=batch_size)
            anchor = RunRecord(
                record.directory, record.checkpoint, begin, cursor, record.last_step, record.meta
            )
            spec = RunSpec(
                data, seed=self.seed, world_size=world_size, record=anchor, steps=self.steps
            )
            spec._log = []  # placed from its own start: its steps all follow it
            self._segments[segment] = spec
        return self._segments[segment]

    def _segment(self, step: int) -> _Segment | None:
        """The metrics log's segment of ``step``, or ``None`` without a log."""
        if self._log is None:
            assert self.record is not None
            self._log = _read_segments(self.record)
        if not self._log:
            return None
        found = None
        for segment in self._log:
            if segment[0] < step:
                found = segment  # the last start before the step (a retry supersedes)
        return found

    def _consistent(self) -> bool:
        """Whether this shape, from the start, reaches the newest checkpoint's cursor."""
        if self._consistent_from_start is None:
            record = self.record
            assert record is not None
            self._consistent_from_start = (
                self._advance((0, 0), record.step, record.step + 1) == record.cursor
            )
        return self._consistent_from_start

    def cursor_at(self, step: int) -> BatchId:
        """The cursor ``(epoch, index)`` from which step ``step`` read its batch (the
        same on every rank), in closed form: from the run's checkpoint (or its metrics
        log's segment, see :meth:`at_step`) when the step comes after it, else from the
        start.

        Raises
        ------
        ArgumentError
            ``step`` is past the run's last step or the stream's end, or it cannot be
            placed (see :meth:`at_step`).
        """
        spec = self.at_step(step)
        if spec is not self:
            return spec.cursor_at(step)
        record = self.record
        if record is not None and step > record.step:
            return self._advance(record.cursor, step - 1 - record.step, step)
        return self._advance((0, 0), step - 1, step)

    def _advance(self, cursor: BatchId, steps: int, step: int) -> BatchId:
        """The cursor ``steps`` steps after ``cursor`` (``step`` names the step asked
        for in the error when the stream ends first)."""
        source = self.source(0)
        if isinstance(source, WindowBatches):
            per_epoch = source.steps_in_epoch(0)
            if per_epoch == 0:
                raise ArgumentError("the stream has no batch: every epoch is empty.")
            total = cursor[1] + steps
            return cursor[0] + total // per_epoch, total % per_epoch
        assert isinstance(source, StreamSource)
        reached = source.stream.next_cursor(cursor[0], cursor[1], steps)
        if reached is None:
            raise ArgumentError(f"`step` {step} is past the end of the stream.")
        return reached

    def batch(self, step: int, rank: int) -> Batch:
        """The rows ``rank`` took at step ``step``, as the trainer's source read them
        (plus ``document_ids``/``position_ids`` on packed rows, and the rows' source ids
        in a mixture). ``rank`` is of the world that trained the step (see
        :meth:`at_step`)."""
        spec = self.at_step(step)
        if spec is not self:
            return spec.batch(step, rank)
        rank = self.check_rank(rank)
        epoch, index = self.cursor_at(step)
        source = self._whole()
        if isinstance(source, WindowBatches):
            windows = self.source(rank)
            assert isinstance(windows, WindowBatches)
            position = (index * self.world_size + rank) * self.data.batch_size
            return windows.stream.read(epoch, position)
        assert isinstance(source, StreamSource)
        if source is not self._whole_source:  # per-rank layout: the rank's own stream
            source = self.source(rank)
            assert isinstance(source, StreamSource)
            return source.stream.read(epoch, index)
        whole = source.stream.read(epoch, index)
        # Each rank's share of a global batch is one contiguous run of its rows; a block
        # schedule or VSL buckets change the rows per batch, never the split.
        size = len(whole.context) // self.world_size
        return whole.rows(slice(rank * size, (rank + 1) * size))


def resolve_run(
    location: str | None,
    *,
    data: DataConfig | None = None,
    seed: int | None = None,
    world_size: int | None = None,
) -> RunSpec:
    """The :class:`RunSpec` of what ``location`` names.

    Parameters
    ----------
    location
        A ``mixle train`` checkpoint directory (the run's ``--checkpoint-dir``: its
        newest checkpoint is read) or one ``step-NNNNNNNN`` checkpoint in it (that one
        is read, and the run's last step is its step); else a corpus directory or URL,
        or ``None`` with ``data.mixture`` set (a mixture file).
    data, seed, world_size
        The stream of a corpus or mixture given this way: ``data`` (its ``corpus`` is
        ``location``; default: ``DataConfig(corpus=location)``, the defaults of
        ``mixle train``), the shuffle seed (default 0) and the number of ranks (default
        1). A run brings its own: each must then be ``None``.

    Raises
    ------
    ArgumentError
        ``location`` is neither a run nor a corpus (both reasons named), or a run was
        given stream options.
    CheckpointError
        The run's newest checkpoint is malformed (see :func:`~mixle.train.read_checkpoint`).
    """
    if location is not None and os.path.isdir(location):
        checkpoint = _checkpoint_in(location)
        if checkpoint is not None:
            given = [
                f"{name}={value!r}"
                for name, value in (
                    *(_changed(data) if data is not None else []),
                    ("seed", seed),
                    ("world_size", world_size),
                )
                if value is not None
            ]
            if given:
                raise ArgumentError(
                    f"{location} is a mixle train run: its stream options come from its "
                    f"checkpoint; give none. Got {', '.join(given)}."
                )
            return _from_checkpoint(*checkpoint)
    if data is None:
        if location is None:
            raise ArgumentError("give a run, a corpus, or a mixture file (`data.mixture`).")
        data = DataConfig(corpus=location)
    elif location is None and data.mixture is None:
        raise ArgumentError("give a run, a corpus, or a mixture file (`data.mixture`).")
    if location is not None and data.mixture is None:
        if data.corpus != location:
            data = DataConfig(**{**_fields(data), "corpus": location})
        _check_corpus(location)
    return RunSpec(
        data, seed=0 if seed is None else seed, world_size=1 if world_size is None else world_size
    )


def _fields(data: DataConfig) -> dict[str, Any]:
    return {name: getattr(data, name) for name in DataConfig.__dataclass_fields__}


def _changed(data: DataConfig) -> list[tuple[str, Any]]:
    """``data``'s options that differ from the defaults (``corpus`` included), or
    ``("data", data)`` when all are defaults: what was given that a run does not take."""
    defaults = _fields(DataConfig(corpus=data.corpus))
    changed = [(name, value) for name, value in _fields(data).items() if value != defaults[name]]
    return changed or [("data", data)]


def _checkpoint_in(directory: str) -> tuple[str, str, bool] | None:
    """``(run directory, checkpoint, named)`` when ``directory`` is a run (its newest
    checkpoint) or a checkpoint itself (``named``)."""
    if os.path.isfile(os.path.join(directory, _META_FILE)):
        return os.path.dirname(os.path.abspath(directory)), directory, True
    found = list_checkpoints(directory)
    return (directory, found[-1][1], False) if found else None


def _check_corpus(location: str) -> None:
    """Open the corpus at ``location`` once, naming both readings when it is not one."""
    try:
        open_corpus(location)
    except Exception as exc:
        if os.path.isdir(location):
            raise ArgumentError(
                f"{location} is neither a mixle train run (no step-* checkpoint with "
                f"{_META_FILE}) nor a corpus: {exc}"
            ) from exc
        raise


def _from_checkpoint(directory: str, checkpoint: str, named: bool) -> RunSpec:
    meta = read_meta(checkpoint)
    where = os.path.join(checkpoint, _META_FILE)
    try:
        config = TrainConfig.from_dict(meta.get("config"))
    except (ArgumentError, TypeError) as exc:
        raise CheckpointError(f"{where}: its `config` is not a mixle train config: {exc}") from exc
    progress = meta.get("progress", {})
    cursor = progress.get("cursor")
    if not (
        isinstance(cursor, list)
        and len(cursor) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in cursor)
    ):
        raise CheckpointError(f"{where}: `progress.cursor` must be two nonnegative integers.")
    step = int(meta["step"])
    # A checkpoint named by itself is the run as of that checkpoint; a run directory is
    # the run as far as its metrics log goes.
    last = step if named else max(step, _last_logged_step(config, directory))
    record = RunRecord(directory, checkpoint, step, (cursor[0], cursor[1]), last, meta)
    return RunSpec(
        config.data,
        seed=config.seed,
        world_size=int(meta["world_size"]),
        record=record,
        steps=config.runtime.steps,
    )


def _last_logged_step(config: TrainConfig, directory: str) -> int:
    """The last ``step`` record at the end of the run's metrics log (0 without one)."""
    # The default log lives in the run directory (whatever the cwd of the training was).
    path = config.metrics or os.path.join(directory, "metrics.jsonl")
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - _METRICS_TAIL_BYTES))
            tail = handle.read()
    except OSError:
        return 0
    for line in reversed(tail.splitlines()):
        try:
            record = json.loads(line)
        except ValueError:
            continue  # the first line of the tail may be cut
        if isinstance(record, dict) and record.get("type") == "step":
            value = record.get("step")
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return 0


def _read_segments(record: RunRecord) -> list[_Segment]:
    """Every ``start`` record of the run's metrics log, in file order, as
    ``(steps before it, cursor, world_size, batch_size)``; empty without a log. Only
    the lines that hold ``"start"`` are parsed as JSON."""
    config = record.meta.get("config", {})
    metrics = config.get("metrics") if isinstance(config, dict) else None
    path = metrics if isinstance(metrics, str) else os.path.join(record.directory, "metrics.jsonl")
    segments = []
    try:
        with open(path, "rb") as handle:
            for line in handle:
                if b'"start"' in line:
                    start = _start_record(line)
                    if start is not None:
                        segments.append(start)
    except OSError:
        return []
    return segments


def _start_record(line: bytes) -> _Segment | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("type") != "start":
        return None
    step, cursor, world = record.get("step"), record.get("cursor"), record.get("world_size")
    config = record.get("config")
    batch = config.get("batch_size") if isinstance(config, dict) else None
    values = [step, world, batch, *(cursor if isinstance(cursor, list) else [None])]
    if not (
        isinstance(cursor, list)
        and len(cursor) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values)
    ):
        return None
    assert isinstance(step, int) and isinstance(world, int) and isinstance(batch, int)
    return step, (cursor[0], cursor[1]), world, batch
