"""When was document X trained on: every ``(epoch, step, rank, row)`` of a stream's plan.

:func:`sightings` inverts a stream's plan for one document. For each epoch asked, the
document's rows in the epoch's row stream come from :mod:`~mixle.data._row_sightings`
(closed form with the ``"blocks"`` order: O(window) per epoch; one pass over the
epoch's order with the seed's permutation); a row is placed on a step, a rank and a
row of that rank's batch as the stream hands rows out:

- global layout (:class:`~mixle.data.StreamingCorpus` ``layout="global"``, either
  packing): global row ``g`` of epoch ``e`` is taken at step ``S(e) + g // G + 1``
  (``G = world_size * batch_size``) by rank ``(g % G) // batch_size`` as its row
  ``g % batch_size``, where ``S(e)`` is the steps of the epochs before ``e``;
- a ``block_schedule`` (the global layout in phases): global batch ``k`` of the epoch
  holds the stream's targets ``k K + 1 .. (k + 1) K`` (``K`` tokens per global batch),
  in rows of the block ``b`` of the phase that rules them; the row that starts at stream
  token ``t = k K + o`` is taken at step ``S(e) + k + 1`` by rank ``o // (K / W)`` as
  its row ``(o % (K / W)) // b``;
- per-rank layout: the epoch's order is dealt round robin, so order position ``p``
  is rank ``p % world_size``'s document ``p // world_size``; that rank's row ``r`` is
  row ``r % batch_size`` of its batch ``r // batch_size`` (rows past ``num_batches``
  are never read: ``even_batches``); with a ``block_schedule`` the rank's batch ``k``
  holds its stream's targets ``k R + 1 .. (k + 1) R`` (``R = batch_size x block``) in
  rows of the phase's block ``b``, the row that starts at token ``k R + o`` being its
  row ``o // b``;
- a :class:`~mixle.data.Mixture`: :mod:`~mixle.data._mixture_sightings`;
- a :class:`~mixle.data.VariableLengthStream` (``"natural"`` or ``"grow_p2"``): its
  pieces, piece orders and curriculum inverted in closed form,
  :mod:`~mixle.data._vsl_sightings`.

Steps are numbered as ``mixle train`` numbers them: step 1 is the first batch of a run
that starts at epoch 0 (``S(0) = 0``), each epoch taking ``num_batches(epoch)`` steps.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from mixle._checks import exact_int, nonnegative_int, positive_int
from mixle.data._mixture import Mixture
from mixle.data._mixture_sightings import mixture_spans, source_index
from mixle.data._options import ShardOptions
from mixle.data._order import global_document_order
from mixle.data._plan_global_best_fit import BestFitEpochPlan
from mixle.data._plan_phased import PhasedEpochPlan
from mixle.data._row_sightings import (
    RowSpan,
    best_fit_spans,
    document_ranges,
    layout_spans,
    stream_spans,
)
from mixle.data._streaming import StreamingCorpus
from mixle.data._vsl_sightings import vsl_spans
from mixle.data._vsl_stream import VariableLengthStream
from mixle.errors import ArgumentError, ArgumentTypeError

__all__ = ["Sighting", "closed_form", "epoch_numbers", "sightings"]


@dataclass(frozen=True, slots=True)
class Sighting:
    """One row in which a document was trained on (any of its tokens a target).

    Attributes
    ----------
    epoch
        The epoch (of the stream; of the document's source in a mixture).
    step
        The training step, numbered as ``mixle train`` does (1: the run's first batch).
    rank
        The data-parallel rank whose batch held the row.
    row
        The row's place in that rank's batch (``0 <= row < batch_size``; in a
        variable-length stream, below the rows per rank of the step's bucket).
    document
        The document index (in the stream's documents; the source's in a mixture).
    start, stop
        The document's tokens ``[start, stop)`` that are targets in the row.
    source
        The mixture source's name (``None`` for a single corpus).
    """

    epoch: int
    step: int
    rank: int
    row: int
    document: int
    start: int
    stop: int
    source: str | None = None


def epoch_numbers(epochs: int | Iterable[int]) -> list[int]:
    """``range(epochs)`` for a count, or the given epoch numbers, sorted and unique.

    Raises
    ------
    ArgumentTypeError, ArgumentError
        A count that is not a positive integer, or an epoch that is not a nonnegative
        one (an empty collection included).
    """
    if isinstance(epochs, Iterable) and not isinstance(epochs, str | bytes):
        chosen = sorted({nonnegative_int("epochs", e) for e in epochs})
        if not chosen:
            raise ArgumentError("`epochs` must name at least one epoch. Got none.")
        return chosen
    return list(range(positive_int("epochs", epochs)))


def closed_form(stream: StreamingCorpus | Mixture | VariableLengthStream) -> bool:
    """Whether :func:`sightings` inverts ``stream``'s order in closed form (the
    ``"blocks"`` order, O(window) per epoch; a variable-length stream's pieces and
    curriculum, O(the document's pieces) per epoch) rather than with one pass over each
    epoch's order (the seed's permutation, which every per-rank stream uses)."""
    if isinstance(stream, VariableLengthStream):
        return True
    return stream.order.name == "blocks"


def sightings(
    stream: StreamingCorpus | Mixture | VariableLengthStream,
    document: int,
    *,
    epochs: int | Iterable[int] = 1,
    source: int | str | None = None,
) -> list[Sighting]:
    """Every row in which ``document`` is trained on in ``epochs``, in step order.

    Parameters
    ----------
    stream
        A :class:`StreamingCorpus` or a :class:`VariableLengthStream` (any rank of the
        run: the answer covers every rank) or a packed :class:`Mixture`.
    document
        A document index of the stream's documents (of the source's, in a mixture).
    epochs
        How many epochs from epoch 0 (a positive count), or which epochs (numbers).
    source
        The mixture source (its name or index); ``None`` for a ``StreamingCorpus``.

    Returns
    -------
    list[Sighting]
        Sorted by ``(step, rank, row, start)``. Cost: O(window) per epoch with the
        ``"blocks"`` order (see :func:`closed_form`), O(the document's pieces) for a
        variable-length stream, else one pass per epoch.

    Raises
    ------
    ArgumentTypeError, ArgumentError
        ``stream`` is neither, ``document`` is out of range, ``epochs`` is not a positive
        count or epoch numbers, ``source`` is missing, unknown or given for a corpus or
        a variable-length stream, the mixture is of windows, or the variable-length
        stream's curriculum is ``"bandit"``.
    """
    chosen = epoch_numbers(epochs)
    if isinstance(stream, Mixture):
        index = source_index(stream, source)
        name = stream.names[index]
        found = [
            Sighting(epoch, step, rank, row, document, start, stop, name)
            for epoch, (step, rank, row), start, stop in mixture_spans(
                stream, index, _document(document, stream.rows[index].num_documents), chosen
            )
        ]
    elif isinstance(stream, StreamingCorpus | VariableLengthStream):
        if source is not None:
            raise ArgumentError(
                f"`source` names a mixture source; a {type(stream).__name__} has none. "
                f"Got {source!r}."
            )
        document = _document(document, len(stream.documents))
        if isinstance(stream, VariableLengthStream):
            found = [
                Sighting(epoch, step, rank, row, document, start, stop)
                for epoch, (step, rank, row), start, stop in vsl_spans(stream, document, chosen)
            ]
        elif stream.layout == "per-rank":
            found = _per_rank(stream, document, chosen)
        else:
            found = _global(stream, document, chosen)
    else:
        raise ArgumentTypeError(
            "`stream` must be a StreamingCorpus, a Mixture or a VariableLengthStream. Got "
            f"{type(stream).__name__}."
        )
    return sorted(found, key=lambda s: (s.step, s.rank, s.row, s.start))


def _document(document: int, count: int) -> int:
    value = exact_int("document", document)
    if not 0 <= value < count:
        bound = f"0 to {count - 1}" if count else "none: there are no documents"
        raise ArgumentError(f"`document` must be a document index ({bound}). Got {value} instead.")
    return value


def _epoch_spans(stream: StreamingCorpus, document: int, epoch: int) -> list[RowSpan]:
    """``document``'s rows in ``epoch``'s rows of ``stream`` (global or one rank's)."""
    plan = stream.epoch_plan(epoch)
    if isinstance(plan, BestFitEpochPlan):
        return best_fit_spans(plan.best_fit, document)
    return layout_spans(plan.layout, document, stream.block, plan.rows)


def _global(stream: StreamingCorpus, document: int, epochs: list[int]) -> list[Sighting]:
    size, group = stream.batch_size, stream.global_batch_size
    found: list[Sighting] = []
    before = 0  # steps of the epochs before `epoch`
    for epoch in range(epochs[-1] + 1):
        if epoch in epochs:
            plan = stream.epoch_plan(epoch)
            if isinstance(plan, PhasedEpochPlan):
                places = _phased(plan, document, stream.world_size)
            else:
                places = [
                    (span.row // group, *divmod(span.row % group, size), span.start, span.stop)
                    for span in _epoch_spans(stream, document, epoch)
                ]
            for batch, rank, row, start, stop in places:
                found.append(Sighting(epoch, before + batch + 1, rank, row, document, start, stop))
        before += stream.num_batches(epoch)
    return found


def _phased(
    plan: PhasedEpochPlan, document: int, world_size: int
) -> list[tuple[int, int, int, int, int]]:
    """``(batch of the epoch, rank, row, start, stop)`` of every row of a block-schedule
    epoch that trains ``document``: its stream ranges cut at the phases (the rows of a
    phase start at the phase's tokens ``[first, stop)``, so they train its targets
    ``first + 1 .. stop``), each phase's part cut into that phase's rows."""
    phases, tokens = plan.phases, plan.tokens_per_batch
    share = tokens // world_size  # tokens of one rank's rows in a global batch
    found = []
    for begin, length in document_ranges(plan.layout, document):
        for position, block in enumerate(phases.blocks):
            first, stop = phases.starts[position], phases.stop(position)
            low, high = max(begin, first + 1), min(begin + length, stop + 1)
            if high <= low:
                continue
            for span in stream_spans(low, high - low, block, stop // block):
                batch, offset = divmod(span.row * block, tokens)
                rank, within = divmod(offset, share)
                shift = low - begin
                found.append((batch, rank, within // block, shift + span.start, shift + span.stop))
    return found


def _per_rank(stream: StreamingCorpus, document: int, epochs: list[int]) -> list[Sighting]:
    world, size = stream.world_size, stream.batch_size
    views = {
        rank: stream.reshaped(ShardOptions(rank, world, size, stream.layout))
        for rank in range(world)
    }
    before = dict.fromkeys(views, 0)
    # With even batches every rank takes the epoch's smallest count: one plan tells.
    counters = dict.fromkeys(views, stream) if stream.even_batches else views
    found: list[Sighting] = []
    for epoch in range(epochs[-1] + 1):
        if epoch in epochs:
            order = global_document_order(
                len(stream.documents),
                seed=stream.seed,
                epoch=epoch,
                sequence_selector=stream.sequence_selector,
            )
            for rank in sorted({int(p) % world for p in np.flatnonzero(order == document)}):
                view = views[rank]
                plan = view.epoch_plan(epoch)
                if isinstance(plan, PhasedEpochPlan):
                    # The rank's own stream in phases: its steps of R tokens each.
                    places = [
                        (batch, row, start, stop)
                        for batch, _, row, start, stop in _phased(plan, document, 1)
                    ]
                else:
                    places = [
                        (*divmod(span.row, size), span.start, span.stop)
                        for span in _epoch_spans(view, document, epoch)
                    ]
                for batch, row, start, stop in places:
                    if batch < view.num_batches(epoch):
                        step = before[rank] + batch + 1
                        found.append(Sighting(epoch, step, rank, row, document, start, stop))
        for rank, counter in counters.items():
            before[rank] += counter.num_batches(epoch)
    return found
