"""The training loop: stream batches, step the transformer leaf, evaluate, checkpoint.

One step on each rank: take the rank's next batch, compute the weighted gradient
numerator with the leaf's accumulator, sum numerators, losses and weights over ranks
(gloo/NCCL ``all_reduce``), and apply one AdamW step with the global weighted mean
gradient — the exact masked mean over every target of every rank's batch. Ranks start
from identical weights and apply identical updates, so they stay bitwise identical.

Bitwise resume on CPU: the checkpoint holds the weights, the AdamW state, every rank's
stream cursor and the RNG states; deterministic algorithms are switched on and the
thread count is fixed by ``threads``. A resumed run therefore computes the same floats
as an uninterrupted one and consumes the same batches — none repeated, none skipped.
"""

from __future__ import annotations

import functools
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from mixle.corpus import open_corpus
from mixle.corpus.storage.plan_cache import PlanFiles
from mixle.data._batch import Batch
from mixle.data._curriculum_bandit import LengthBandit
from mixle.data._documents import as_documents, documents_fingerprint
from mixle.data._vsl_stream import VariableLengthStream
from mixle.errors import ArgumentError, CheckpointError
from mixle.models import (
    StreamingGradientState,
    StreamingTransformer,
    StreamingTransformerEstimator,
)
from mixle.models._inputs import TokenBatch, parse_batch
from mixle.stats.registry import tensors_from_blob
from mixle.train._config import TrainConfig, length_edges
from mixle.train._distributed import DistributedContext, setup_distributed
from mixle.train._length_rewards import LengthRewards
from mixle.train._mixture import (
    MixtureBatches,
    accounting_record,
    open_mixture,
    plot_mixture_shares,
)
from mixle.train._prefetch import PrefetchedBatches
from mixle.train._rng import get_rng_state, seed_everything, set_rng_state
from mixle.train._runtime import StopFlag, deterministic, stop_on_signals
from mixle.train._sources import (
    BatchSource,
    PackedBatches,
    StreamArgs,
    StreamSource,
    batch_digest,
    eval_batches,
    make_source,
    split_holdout,
)
from mixle.train._staging import pin_for, stage_batch
from mixle.train._summary import TrainSummary, mean_or_none
from mixle.train.checkpoint import (
    latest_checkpoint,
    misnamed_checkpoints,
    prune_checkpoints,
    read_checkpoint,
    remove_partial_checkpoints,
    write_checkpoint,
)
from mixle.train.checkpoint_checks import require_integer
from mixle.train.metrics import MetricsLog, plot_losses, require_plotting

__all__ = ["train"]


@runtime_checkable
class _RecordsVocab(Protocol):
    """A corpus that records its vocabulary size (``None`` when it does not know it)."""

    @property
    def vocab_size(self) -> int | None: ...


def _optimizer_state(leaf: StreamingTransformer) -> dict[str, Any] | None:
    # The leaf exposes its AdamW state only through to_dict (as a weights-only blob).
    blob = leaf.to_dict()["optimizer_state"]
    return None if blob is None else tensors_from_blob(blob, "optimizer state")


def _run_tokens(config: TrainConfig, world_size: int) -> int | None:
    """The run's tokens (``steps x world_size x batch_size x block``): what a mixture
    file's block schedule fractions are of."""
    if config.steps is None:
        return None
    return config.steps * world_size * config.batch_size * config.block


class _Trainer:
    def __init__(
        self,
        config: TrainConfig,
        ctx: DistributedContext,
        documents: Sequence[Any],
        log: Callable[[str], Any],
        stop: StopFlag,
    ) -> None:
        self.config, self.ctx, self.stop = config, ctx, stop
        self._log = log
        vocab = config.vocab
        self.mixture = None
        if config.mixture is not None:
            # Every source opened and every budget checked before the first batch.
            self.mixture, mixture_vocab = open_mixture(
                config.mixture,
                block=config.block,
                batch_size=config.batch_size,
                rank=ctx.rank,
                world_size=ctx.world_size,
                seed=config.seed,
                boundary_id=config.boundary_id,
                objective=config.objective,
                plan_store=self._plan_store(),
                packing=config.packing,
                attention_boundaries=config.document_mask,
                block_schedule=config.block_schedule_for(ctx.world_size),
                total_tokens=_run_tokens(config, ctx.world_size),
                **({} if config.order is None else {"order": config.order}),
            )
            self.mixture.check_budget(steps=config.steps)
            vocab = vocab if vocab is not None else mixture_vocab
        if vocab is None and isinstance(documents, _RecordsVocab):
            vocab = documents.vocab_size
        if vocab is None:
            raise ArgumentError(
                f"the corpus {config.corpus} records no vocab_size; pass `vocab` (--vocab)."
            )
        if config.boundary_id is not None and config.boundary_id >= vocab:
            raise ArgumentError(
                f"`boundary_id` must be a token id below vocab={vocab}. Got {config.boundary_id}."
            )
        self.vocab = int(vocab)
        train_docs, held_out = split_holdout(documents, config.holdout_documents)
        stream = StreamArgs(
            block=config.block,
            batch_size=config.batch_size,
            seed=config.seed,
            boundary_id=config.boundary_id,
        )
        self.layout = config.layout
        self.length_rewards = self._length_rewards(train_docs)
        self.source: BatchSource = (
            MixtureBatches(self.mixture, follow_saved_order=config.order is None)
            if self.mixture is not None
            else make_source(
                config.objective,
                train_docs,
                rank=ctx.rank,
                world_size=ctx.world_size,
                layout=self.layout,
                plan_store=self._plan_store(),
                order=config.order,
                packing=config.packing,
                document_mask=config.document_mask,
                length_bandit=None if self.length_rewards is None else self.length_rewards.bandit,
                block_schedule=config.block_schedule_for(ctx.world_size),
                vsl_buckets=config.vsl_buckets,
                vsl_curriculum=config.vsl_curriculum,
                **stream,
            )
        )
        # With a block schedule (of the stream, or of the mixture file), each step logs
        # its phase and block.
        self._phased: PackedBatches | MixtureBatches | None = None
        if config.block_schedule is not None and isinstance(self.source, PackedBatches):
            self._phased = self.source
        if self._scheduled_mixture and isinstance(self.source, MixtureBatches):
            self._phased = self.source
        if config.vsl_curriculum == "bandit":
            self.length_rewards = self._vsl_rewards()
        if self.source.steps_in_epoch(0) == 0:
            raise ArgumentError(
                f"the corpus is too small for one batch per rank: {len(train_docs)} training "
                f"documents, block {config.block}, {ctx.world_size} rank(s)."
            )
        limit = config.eval_batches if config.eval_every else 0
        self.eval_set = eval_batches(
            config.objective, held_out, limit=limit, document_mask=config.document_mask, **stream
        )
        # The largest block of the schedule (of the stream, or of the mixture file).
        self.model_block = (
            config.model_block if self.mixture is None else self.mixture.largest_block
        )
        self.leaf = StreamingTransformer.from_config(
            self.vocab,
            d_model=config.d_model,
            n_layer=config.n_layer,
            n_head=config.n_head,
            block=self.model_block,
            device=ctx.device,
            seed=config.seed,
            tie_head=config.tie_head,
            lr=config.lr,
        )
        self.identity: dict[str, Any] = {
            "run": {**config.identity(), "vocab": self.vocab},
            "corpus": (
                # The mixture's own state names (and checks) every source and phase.
                {"mixture": self.mixture.names}
                if self.mixture is not None
                else {
                    "fingerprint": documents_fingerprint(documents),
                    "num_documents": len(documents),
                }
            ),
        }
        if self.layout == "per-rank":
            # Per-rank cursors are tied to the shape; the global row cursor is not.
            self.identity["world_size"] = ctx.world_size
        self.changes: dict[str, list[int]] = {}
        self.metrics = MetricsLog(config.metrics_path if ctx.is_main else None)
        self.step = 0
        self.total_tokens = 0
        self.resumed_from: str | None = None
        self.last_checkpoint: str | None = None
        self.eval_loss: float | None = None
        self._estimator: StreamingTransformerEstimator | None = None
        self._factory: Any = None

    def _length_rewards(self, documents: Sequence[Any]) -> LengthRewards | None:
        """The bandit of ``length_buckets`` over ``documents`` and its rewards, or ``None``."""
        edges = self.config.length_buckets
        if edges is None:
            return None
        bandit = LengthBandit(
            as_documents(documents).lengths,
            edges=length_edges("length_buckets", edges),
            seed=self.config.seed,
        )
        return LengthRewards(bandit, self.ctx.all_reduce_sum_)

    def _vsl_rewards(self) -> LengthRewards:
        """The rewards of the variable-length stream's bucket bandit (``--vsl-curriculum
        bandit``): each step's targets are all in the bucket of its width."""
        stream = self.source.stream if isinstance(self.source, StreamSource) else None
        if not isinstance(stream, VariableLengthStream) or stream.bandit is None:
            raise ArgumentError("vsl_curriculum='bandit' needs vsl_buckets (--vsl-buckets).")
        return LengthRewards(
            stream.bandit, self.ctx.all_reduce_sum_, batch_buckets=stream.bucket_tokens
        )

    @property
    def _scheduled_mixture(self) -> bool:
        """Whether the run feeds from a mixture with a block schedule."""
        return self.mixture is not None and self.mixture.block_schedule is not None

    def _plan_store(self) -> PlanFiles | None:
        """Epoch plans beside the run (``<checkpoint_dir>/plans``), so a resumed process
        loads them instead of planning every epoch again."""
        directory = self.config.checkpoint_dir
        return None if directory is None else PlanFiles(os.path.join(directory, "plans"))

    # ----------------------------------------------------------------- console
    def log(self, message: str) -> None:
        if self.ctx.is_main:
            self._log(message)

    # -------------------------------------------------------------- checkpoints
    def restore(self) -> None:
        """Resume from the newest checkpoint, or refuse to clobber one."""
        directory = self.config.checkpoint_dir
        if directory is None:
            self.metrics.restart_at(0)
            return
        if self.ctx.is_main:
            remove_partial_checkpoints(directory)
        self.ctx.barrier()
        for path, recorded in misnamed_checkpoints(directory):
            self.log(
                f"ignoring {path}: its meta.json records step {recorded} (a renamed "
                "checkpoint is never resumed from)"
            )
        latest = latest_checkpoint(directory)
        if latest is None:
            self.metrics.restart_at(0)
            return
        if not self.config.resume:
            raise CheckpointError(
                f"{directory} already holds checkpoints (newest: {latest}); pass --resume to "
                "continue that run, or choose another --checkpoint-dir."
            )
        ckpt = read_checkpoint(
            latest,
            rank=self.ctx.rank,
            world_size=self.ctx.world_size,
            identity=self.identity,
            map_location=self.ctx.device,
            elastic=self.layout == "global",
        )
        self.changes = {
            name: [before, now]
            for name, before, now in (
                ("world_size", int(ckpt.meta["world_size"]), self.ctx.world_size),
                (
                    "batch_size",
                    require_integer(ckpt.meta, "config.batch_size", f"{latest}/meta.json", 1),
                    self.config.batch_size,
                ),
            )
            if before != now
        }
        try:
            self.leaf.module.load_state_dict(ckpt.tensors["model"], strict=True)
        except (RuntimeError, ValueError, TypeError) as exc:
            raise CheckpointError(f"{latest}: the model weights do not fit: {exc}") from exc
        try:
            self.leaf = StreamingTransformer(
                self.leaf.module,
                self.ctx.device,
                lr=self.config.lr,
                optimizer_state=ckpt.tensors["optimizer"],
            )
        except (RuntimeError, ValueError, TypeError, KeyError, IndexError) as exc:
            raise CheckpointError(f"{latest}: the optimizer state does not fit: {exc}") from exc
        try:
            self.source.load_state_dict(ckpt.rank_state.get("stream"))
        except (ValueError, TypeError, KeyError) as exc:  # StateMismatchError is a ValueError
            raise CheckpointError(f"{latest}: rank {self.ctx.rank} data cursor: {exc}") from exc
        if self.length_rewards is not None:
            try:
                self.length_rewards.load_state_dict(ckpt.rank_state.get("length_rewards"))
            except ValueError as exc:
                raise CheckpointError(f"{latest}: rank {self.ctx.rank}: {exc}") from exc
        set_rng_state(ckpt.rank_state.get("rng"), f"{latest}: rank {self.ctx.rank} state")
        self.step = ckpt.step
        progress = ckpt.meta.get("progress", {})
        self.total_tokens = int(progress.get("total_tokens", 0))
        self.resumed_from = self.last_checkpoint = latest
        self.metrics.restart_at(self.step)

    def save(self) -> None:
        directory = self.config.checkpoint_dir
        if directory is None or self.last_checkpoint_step == self.step:
            return
        main = self.ctx.is_main
        path = write_checkpoint(
            directory,
            self.step,
            rank=self.ctx.rank,
            world_size=self.ctx.world_size,
            rank_state={
                "stream": self.source.state_dict(),
                "rng": get_rng_state(),
                **(
                    {}
                    if self.length_rewards is None
                    else {"length_rewards": self.length_rewards.state_dict()}
                ),
            },
            tensors=(
                {"model": self.leaf.module.state_dict(), "optimizer": _optimizer_state(self.leaf)}
                if main
                else None
            ),
            meta=(
                {
                    "identity": self.identity,
                    "config": self.config.to_dict(),
                    "progress": {"total_tokens": self.total_tokens, "cursor": self.source.cursor},
                }
                if main
                else None
            ),
            barrier=self.ctx.barrier,
        )
        if main:
            prune_checkpoints(directory, self.config.keep_last)
            self.metrics.write({"type": "checkpoint", "step": self.step, "path": path})
        self.last_checkpoint = path

    @property
    def last_checkpoint_step(self) -> int | None:
        if self.last_checkpoint is None:
            return None
        return int(self.last_checkpoint.rstrip("/").rsplit("step-", 1)[1])

    # ----------------------------------------------------------------- stepping
    def train_step(self, batch: Batch | TokenBatch, stop: bool) -> tuple[float, float, bool]:
        """One optimizer step; returns ``(global loss sum, global weight, stop)``.

        ``batch`` is a raw batch, or one the prefetch thread already staged (parsed,
        pinned on CUDA: see ``_staging``).
        """
        if isinstance(batch, TokenBatch):
            parsed = batch
        else:
            parsed = parse_batch(batch, self.vocab, self.model_block)
        if self._estimator is None:
            # One estimator for the run: it shares the leaf's module and persistent AdamW.
            self._estimator = self.leaf.estimator()
            self._factory = self._estimator.accumulator_factory()
        estimator, accumulator = self._estimator, self._factory.make()
        accumulator.accumulate(parsed)
        loss_sum = float(accumulator.loss_tensor())
        weight = accumulator.effective_weight
        if self.ctx.world_size == 1:
            if weight > 0:
                self.leaf = estimator.estimate(None, accumulator)
            return loss_sum, weight, stop
        state = accumulator.value()
        names = state.parameter_names
        grads = [state.gradient_sums[name] for name in names]
        scalars = torch.tensor(
            [loss_sum, weight, float(stop)], dtype=torch.float64, device=self.ctx.device
        )
        self.ctx.all_reduce_sum_([*grads, scalars])
        loss_sum, weight, stops = (float(x) for x in scalars.cpu())
        if weight > 0:
            combined = StreamingGradientState(
                state.base_sha256,
                names,
                dict(zip(names, grads, strict=True)),
                loss_sum,
                weight,
                state.rows,
                state.batches,
            )
            self.leaf = estimator.estimate(None, combined)
        return loss_sum, weight, stops > 0

    def global_digest(self, batch: Batch) -> str:
        """:func:`batch_digest` of this step's batch concatenated over ranks (rank order):
        the same for every ``(world_size, batch_size)`` with the same product."""
        world = self.ctx.world_size
        # A rank's part of the last global batch of windows may be short: pad every part
        # to the most rows any rank has (batch_size, or more for a short VSL bucket) for
        # the collective, then keep each rank's real rows.
        counts = [c[0] for c in self.ctx.all_gather_int64([batch.num_rows])]
        size = max(counts)

        def gathered(array: np.ndarray) -> np.ndarray:
            padded = np.zeros((size, *array.shape[1:]), dtype=np.int64)
            padded[: len(array)] = array
            every = self.ctx.all_gather_concat(torch.from_numpy(padded)).numpy()
            pieces = [every[r * size : r * size + counts[r]] for r in range(world)]
            return np.concatenate(pieces).astype(array.dtype, copy=False)

        # Field by field in the same order on every rank: the collectives pair up.
        return batch_digest(batch.map(gathered))

    def evaluate(self) -> float | None:
        """Mean held-out loss over the fixed evaluation batches (shared over ranks)."""
        if not self.eval_set:
            return None
        loss_sum = weight = 0.0
        for batch in self.eval_set[self.ctx.rank :: self.ctx.world_size]:
            w = batch.num_targets
            if w:
                loss_sum += self.leaf.batch_loss(batch) * w
                weight += w
        totals = torch.tensor([loss_sum, weight], dtype=torch.float64, device=self.ctx.device)
        self.ctx.all_reduce_sum_([totals])
        loss_sum, weight = (float(x) for x in totals.cpu())
        return loss_sum / weight if weight else None

    def _run_eval(self) -> None:
        loss = self.evaluate()
        if loss is not None:
            self.eval_loss = loss
            self.metrics.write({"type": "eval", "step": self.step, "loss": loss})
            self.log(f"step {self.step} | held-out loss {loss:.4f}")

    def _planned_total(self) -> int | None:
        config = self.config
        if config.steps is not None:
            return config.steps
        epochs = 1 if config.epochs is None else config.epochs
        epoch, index = self.source.cursor
        if epoch >= epochs:
            return self.step
        remaining = self.source.steps_left(epoch, index)
        remaining += sum(self.source.steps_in_epoch(e) for e in range(epoch + 1, epochs))
        return self.step + remaining

    def run(self) -> TrainSummary:
        config, ctx = self.config, self.ctx
        epochs = 1 if config.steps is None and config.epochs is None else config.epochs
        start_step, start_time = self.step, time.perf_counter()
        self.metrics.write(
            {
                "type": "start",
                "step": self.step,
                "world_size": ctx.world_size,
                "resumed_from": self.resumed_from,
                "changed": self.changes,
                "cursor": list(self.source.cursor),
                "config": config.to_dict(),
            }
        )
        if self.resumed_from is not None:
            changed = "".join(
                f"; {name} {before} -> {now}" for name, (before, now) in self.changes.items()
            )
            unit = "batch"
            if self.layout == "global" and config.vsl_buckets is None:
                unit = "row" if self.config.objective == "packed" else "window"
            if self.config.block_schedule is not None or self._scheduled_mixture:
                unit = "token"
            epoch, index = self.source.cursor
            self.log(
                f"resumed from {self.resumed_from} at step {self.step} "
                f"(epoch {epoch}, {unit} {index}){changed}"
            )
        total = self._planned_total()
        show_bar = config.progress if config.progress is not None else sys.stderr.isatty()
        from tqdm import tqdm

        bar = tqdm(
            total=total,
            initial=self.step,
            unit="step",
            dynamic_ncols=True,
            disable=not (show_bar and ctx.is_main),
            file=sys.stderr,
        )
        printer = self._log
        if not bar.disable:
            self._log = bar.write
        tokens = 0
        train_seconds = 0.0
        window: list[float] = []
        window_tokens, window_seconds = 0, 0.0
        stopped = "data exhausted"
        # The bandit plans an epoch when its first batch is read: read in this thread,
        # after the rewards of every step before it (a read-ahead thread would race them).
        if config.prefetch and self.length_rewards is None:
            # Batches are produced ahead in a thread; the wrapper reports the cursor and
            # state of the last batch taken here, so checkpoints are unchanged.
            # The thread also parses each batch and, on CUDA, pins it for an
            # asynchronous copy (``_staging``); the values are unchanged.
            stage = functools.partial(
                stage_batch,
                vocab=self.vocab,
                block=self.model_block,
                pin=pin_for(ctx.device),
            )
            self.source = PrefetchedBatches(self.source, config.prefetch, prepare=stage)
        batches = iter(self.source)
        try:
            while True:
                if config.steps is not None and self.step >= config.steps:
                    stopped = f"{config.steps} steps"
                    break
                if epochs is not None and self.source.cursor[0] >= epochs:
                    stopped = f"{epochs} epoch(s)"
                    break
                began = time.perf_counter()
                try:
                    batch, (epoch, index) = next(batches)
                except StopIteration:
                    break
                data_wait = time.perf_counter() - began
                # The prefetch thread staged the batch (parsed, pinned on CUDA).
                staged = (
                    self.source.prepared if isinstance(self.source, PrefetchedBatches) else batch
                )
                loss_sum, weight, stop = self.train_step(staged, self.stop.signal is not None)
                ids = ctx.all_gather_int64([epoch, index, int(batch_digest(batch), 16) >> 1])
                extra: dict[str, Any] = {}
                if self.layout == "global":
                    extra["global_batch"] = self.global_digest(batch)
                if config.vsl_buckets is not None:
                    extra["sequence_length"] = int(batch.context.shape[1])
                if self.mixture is not None:
                    extra["mixture"] = accounting_record(
                        self.mixture, self.mixture.cursor_row(self.source.cursor[1])
                    )
                phase = ""
                if self._phased is not None:
                    extra["phase"], extra["block"] = self._phased.phase_at(epoch, index)
                    phase = f" | phase {extra['phase']} block {extra['block']}"
                elapsed = time.perf_counter() - began
                self.step += 1
                step_tokens = int(weight)
                tokens += step_tokens
                self.total_tokens += step_tokens
                train_seconds += elapsed
                loss = loss_sum / weight if weight else math.nan
                if self.length_rewards is not None:
                    self.length_rewards.step(batch, loss)
                self.metrics.write(
                    {
                        "type": "step",
                        "step": self.step,
                        "loss": loss,
                        "tokens": step_tokens,
                        "total_tokens": self.total_tokens,
                        "tokens_per_s": step_tokens / elapsed if elapsed > 0 else None,
                        "data_wait_s": data_wait,
                        "step_s": elapsed,
                        "batches": [[e, i, f"{h:016x}"] for e, i, h in ids],
                        **extra,
                    }
                )
                window.append(loss)
                window_tokens += step_tokens
                window_seconds += elapsed
                rate = window_tokens / window_seconds if window_seconds > 0 else 0.0
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{rate:,.0f}", refresh=False)
                if config.log_every and self.step % config.log_every == 0:
                    self.log(
                        f"step {self.step}/{total} | loss {sum(window) / len(window):.4f} "
                        f"| {rate:,.0f} tok/s{phase}"
                    )
                    window, window_tokens, window_seconds = [], 0, 0.0
                if config.eval_every and self.step % config.eval_every == 0:
                    self._run_eval()
                if stop:
                    received = self.stop.signal or signal.SIGTERM
                    stopped = f"signal {signal.Signals(received).name}"
                    break
                if config.checkpoint_every and self.step % config.checkpoint_every == 0:
                    self.save()
            # Every rank takes the same decision here (a collective follows).
            if config.eval_every and self.step > start_step and self.step % config.eval_every:
                self._run_eval()
            self.save()
        finally:
            if isinstance(self.source, PrefetchedBatches):
                self.source.close()
            bar.close()
            self._log = printer
        seconds = time.perf_counter() - start_time
        plot = None
        if config.plot is not None and ctx.is_main:
            plot = plot_losses(
                config.plot, self.metrics.losses, self.metrics.eval_losses, title=config.corpus
            )
            if self.mixture is not None:
                plot_mixture_shares(config.plot, self.metrics.path, self.mixture, self.step)
        span = max(1, min(20, len(self.metrics.losses) // 10))
        summary = TrainSummary(
            start_step=start_step,
            step=self.step,
            tokens=tokens,
            total_tokens=self.total_tokens,
            seconds=seconds,
            tokens_per_second=tokens / train_seconds if train_seconds > 0 else 0.0,
            first_loss=mean_or_none([v for _, v in self.metrics.losses[:span]]),
            final_loss=mean_or_none([v for _, v in self.metrics.losses[-span:]]),
            eval_loss=self.eval_loss,
            stopped=stopped,
            resumed_from=self.resumed_from,
            checkpoint=self.last_checkpoint,
            metrics=self.metrics.path,
            plot=plot,
            world_size=ctx.world_size,
            mixture=(
                None
                if self.mixture is None
                else accounting_record(self.mixture, self.mixture.cursor_row(self.source.cursor[1]))
            ),
        )
        self.metrics.write({"type": "end", "step": self.step, "summary": summary.to_dict()})
        self.metrics.close()
        return summary


def train(
    config: TrainConfig,
    *,
    documents: Sequence[Any] | None = None,
    log: Callable[[str], Any] = print,
    handle_signals: bool = False,
) -> TrainSummary:
    """Run (or resume) the training job ``config`` describes; return its summary.

    Single process, or one rank of a ``torchrun`` job (``RANK``/``WORLD_SIZE`` in the
    environment: a gloo or NCCL process group is created and destroyed here).

    Parameters
    ----------
    config
        The run (see :class:`TrainConfig`).
    documents
        Use these documents instead of opening ``config.corpus`` (any sequence of 1-D
        token arrays; ``config.vocab`` is then required unless they carry
        ``vocab_size``). ``config.corpus`` still labels the run.
    log
        Receives the progress lines and the summary (rank 0 only).
    handle_signals
        Install SIGTERM/SIGINT handlers that finish the current step, write a
        checkpoint and stop (``stopped == "signal"``). The CLI turns this on.

    Raises
    ------
    ArgumentError
        The corpus is unusable for this configuration (no vocab size, too small for a
        batch per rank), or ``--plot`` without matplotlib.
    CheckpointError
        The checkpoint directory holds checkpoints and ``resume`` is off, or the newest
        checkpoint is corrupt or from a different run (every difference named).

    Notes
    -----
    Deterministic algorithms are on during the call (restored afterwards); the global
    RNGs are seeded from ``config.seed`` (or restored from the checkpoint).
    """
    if not isinstance(config, TrainConfig):
        raise ArgumentError(f"`config` must be a TrainConfig. Got {type(config).__name__}.")
    if config.device.startswith("cuda"):
        # Deterministic cuBLAS needs this before the first matmul (else only a warning).
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    ctx = setup_distributed(config.device)
    try:
        if config.plot is not None and ctx.is_main:
            require_plotting()
        if documents is None:
            documents = [] if config.mixture is not None else open_corpus(config.corpus)
        with deterministic(ctx.device, config.threads), stop_on_signals(handle_signals) as stop:
            seed_everything(config.seed)
            trainer = _Trainer(config, ctx, documents, log, stop)
            trainer.restore()
            summary = trainer.run()
        if ctx.is_main:
            log(summary.describe())
        return summary
    finally:
        ctx.close()
