"""Mixtures in training: open a mixture file's corpora, feed its batches, report budgets.

:func:`open_mixture` reads a mixture file (:mod:`mixle.data._mixture_file`), opens every
source with :func:`mixle.corpus.open_corpus` and builds the :class:`~mixle.data.Mixture`;
:class:`MixtureBatches` is the trainer's batch source over it (the global layout: the
cursor and the batch ids are ``(0, first global row)``; the stream never ends, the run
stops at ``steps``); :func:`budget_table` and :func:`accounting_record` format the
budget and the per-source accounting for the console and ``metrics.jsonl``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from mixle.corpus import open_corpus
from mixle.data import BlockSchedule, Mixture, MixtureSource, SourceBudget
from mixle.data._mixture import source_order_key
from mixle.data._mixture_file import read_mixture_file
from mixle.data._options import OrderOptions
from mixle.data._order_windows import BLOCK_ORDER_VERSIONS
from mixle.errors import ArgumentError
from mixle.train._sources import StreamSource
from mixle.train.metrics import plot_figure, read_metrics

__all__ = [
    "MixtureBatches",
    "accounting_record",
    "budget_table",
    "open_mixture",
    "plot_mixture_shares",
    "shares_path",
]


def open_mixture(
    path: str,
    *,
    block: int,
    block_schedule: BlockSchedule | None = None,
    total_tokens: int | None = None,
    **options: Any,
) -> tuple[Mixture, int | None]:
    """The mixture described by the file at ``path``, and the sources' largest vocab size.

    ``options`` go to :class:`~mixle.data.Mixture` (``batch_size``, ``rank``,
    ``world_size``, ``seed``, ``boundary_id``, ``plan_store``...; ``mixle train`` passes
    ``PlanFiles(<checkpoint_dir>/plans)``, so a resumed run loads every source's epoch
    layouts instead of planning them). The block schedule is ``block_schedule`` (``mixle
    train --block-schedule``) or the file's ``block_schedule`` (its fractions then of
    ``total_tokens``, the run's tokens), not both. Raises what the file parser, the
    corpora and the mixture raise, before any batch.
    """
    spec = read_mixture_file(path)
    if spec.block_schedule is not None:
        if block_schedule is not None:
            raise ArgumentError(
                f"the mixture file {path} has a block_schedule and one is given too "
                "(--block-schedule): give it once, in the file or as the option."
            )
        block_schedule = BlockSchedule(spec.block_schedule.phases, total_tokens=total_tokens)
    sources, vocab = [], None
    for entry in spec.sources:
        documents = open_corpus(entry.location)
        size = documents.vocab_size
        if size is not None:
            vocab = size if vocab is None else max(vocab, size)
        sources.append(MixtureSource(documents, entry.weight, entry.name, entry.max_epochs))
    options.setdefault("schedule", spec.schedule)
    mixture = Mixture(
        sources, block=block, phases=spec.phases, block_schedule=block_schedule, **options
    )
    return mixture, vocab


def budget_table(budget: list[SourceBudget], rows: int) -> str:
    """The budget as aligned lines: rows, tokens, epochs needed and allowed per source."""
    width = max(len("source"), *(len(entry.name) for entry in budget))
    lines = [
        f"{'source':<{width}}  {'rows':>12}  {'tokens':>14}  {'epochs':>9}  {'max_epochs':>10}"
    ]
    for entry in budget:
        limit = "-" if entry.max_epochs is None else f"{entry.max_epochs:g}"
        flag = (
            "  EXCEEDS max_epochs"
            if entry.max_epochs is not None and entry.epochs > entry.max_epochs
            else ""
        )
        lines.append(
            f"{entry.name:<{width}}  {entry.rows:>12,}  {entry.tokens:>14,}  "
            f"{entry.epochs:>9.3f}  {limit:>10}{flag}"
        )
    lines.append(f"{'total':<{width}}  {rows:>12,}  {sum(e.tokens for e in budget):>14,}")
    return "\n".join(lines)


def accounting_record(mixture: Mixture, row: int) -> dict[str, dict[str, Any]]:
    """``{name: {rows, tokens, epochs, share, target}}`` over global rows ``[0, row)``."""
    return {
        account.name: {
            "rows": account.rows,
            "tokens": account.real_tokens,
            "epochs": account.epochs_started,
            "share": account.realised_share,
            "target": account.target_share,
        }
        for account in mixture.accounting(row)
    }


class MixtureBatches(StreamSource):
    """A rank's part of every global batch of a :class:`~mixle.data.Mixture`: the
    :class:`~mixle.train._sources.StreamSource` of the mixture.

    Yields ``(batch, (0, first global row))``: the batch without its source ids,
    ``(context, targets, loss_mask)`` (packed) or ``(context, next_tokens)`` (windows);
    the state is the mixture's row cursor (resumes with any world size and batch size).
    The stream is endless: the trainer stops at ``steps``. Unless
    ``follow_saved_order`` is False (an order given explicitly), a packed mixture
    resumes a state saved before sources had an order field (every ``mixle train``
    checkpoint from then) with the permutation order it was saved with, and one saved
    with an older version of the ``"blocks"`` order with that version.
    """

    def __init__(self, mixture: Mixture, *, follow_saved_order: bool = True) -> None:
        self.mixture = mixture
        self.follow_saved_order = follow_saved_order
        super().__init__(mixture)

    def phase_at(self, epoch: int, index: int) -> tuple[int, int]:
        """``(phase, block)`` of the batch at cursor ``(epoch, index)``
        (:meth:`Mixture.phase_at`)."""
        return self.mixture.phase_at(epoch, index)

    def load_state_dict(self, state: Any) -> None:
        saved = state.get("stream") if isinstance(state, Mapping) else None
        if self.follow_saved_order and isinstance(saved, Mapping):
            order = self._saved_order(saved)
            if order is not None:
                self.mixture = self.stream = self.mixture.reordered(order)
        self.stream.load_state_dict(state)

    def _saved_order(self, saved: Mapping[str, Any]) -> OrderOptions | None:
        """The order a packed blocks-order mixture switches to for a state's stream
        identity ``saved``: the permutation when no source has an order field (saved
        before there was a choice), the ``"blocks"`` version every source names when
        it is another known one; ``None`` to keep the mixture's (the state's own check
        then names any other difference)."""
        mixture = self.mixture
        if mixture.objective != "packed" or mixture.order.name == "permutation":
            return None
        fields = [saved.get(source_order_key(name)) for name in mixture.names]
        if all(field is None for field in fields):
            return OrderOptions("permutation")
        versions = {
            field.get("version") if isinstance(field, Mapping) else None for field in fields
        }
        version = versions.pop() if len(versions) == 1 else None
        if version == mixture.order.version or version not in BLOCK_ORDER_VERSIONS:
            return None
        order = mixture.order
        return OrderOptions(order.name, order.block_documents, order.window_blocks, version)


def shares_path(plot: str) -> str:
    """Where ``--plot FILE.png`` puts the per-source share plot: ``FILE.mixture.png``."""
    root, extension = os.path.splitext(plot)
    return f"{root}.mixture{extension or '.png'}"


def plot_mixture_shares(plot: str, metrics: str | None, mixture: Mixture, step: int) -> str:
    """Draw every source's realised share of trained tokens (and its target) by step.

    The shares come from the ``mixture`` field of the ``step`` records of the metrics
    log (the whole trajectory, across resumes); without a log they are recomputed in
    closed form at rows ``s * global_batch_size`` (a run without a log cannot have
    resumed). Writes :func:`shares_path` and returns it.
    """
    points: list[tuple[int, dict[str, Any]]] = []
    if metrics is not None:
        points = [
            (int(r["step"]), r["mixture"])
            for r in read_metrics(metrics)
            if r.get("type") == "step" and isinstance(r.get("mixture"), dict)
        ]
    else:
        size = mixture.step_size
        points = [
            (s, accounting_record(mixture, mixture.cursor_row(s * size)))
            for s in range(1, step + 1)
        ]
    steps = [s for s, _ in points]

    def draw(axes: Any) -> None:
        for index, name in enumerate(mixture.names):
            color = f"C{index % 10}"
            axes.plot(steps, [p[name]["share"] for _, p in points], color=color, label=name)
            axes.plot(
                steps,
                [p[name]["target"] for _, p in points],
                color=color,
                linestyle=":",
                linewidth=1,
            )
        axes.set_ylabel("share of trained tokens (dotted: target)")
        axes.set_ylim(0, 1)

    return plot_figure(shares_path(plot), draw, title="mixture: per-source token shares")
