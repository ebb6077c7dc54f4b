"""``show_step``: exactly the rows a run trained on at one step, document by document.

The rows are the batch each rank's rebuilt source reads at the step's cursor
(:meth:`RunSpec.batch`), so they are the rows ``mixle train`` fed, bit for bit; each
rank's :attr:`RankRows.digest` is the digest ``metrics.jsonl`` records for that rank
and step (its ``batches`` field), which checks it. A packed row is cut into the
documents it holds from its ``document_ids`` and ``position_ids``: per document, its
source and corpus index, the token range ``[start, end)`` of the document the row
holds, the targets of the row that train on it (the loss mask's count), its origin
(input file, kind and record, from the corpus's origins sidecar) and id, and with a
decoder its text. A window (``objective="windows"``) trains one target and carries no
document ids: its rows list tokens and text only.

Work is O(world_size x batch_size x block) plus the source's O(log documents) seek:
never O(documents) (the ``"permutation"`` order and the per-rank layout plan each epoch
in O(documents) once, as ``mixle train`` does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mixle.corpus import Origin
from mixle.data._batch import Batch
from mixle.errors import CorpusError
from mixle.provenance._run import BatchId, RunSpec
from mixle.provenance._text import Decoder
from mixle.train._sources import batch_digest

__all__ = ["DocumentSpan", "RankRows", "RowReport", "StepReport", "show_step"]


@dataclass(frozen=True, slots=True)
class DocumentSpan:
    """One document's piece of a packed row.

    Attributes
    ----------
    source
        The source's name (the mixture source, or the corpus location).
    document
        The document's index in its source's corpus (``open_corpus(...)[document]``).
    start, end
        The document's tokens ``[start, end)`` that are the row's inputs (a boundary
        token after the document is not counted).
    length
        The document's length in tokens.
    targets
        Targets of the row trained on this document (``loss_mask`` true at its inputs).
    origin
        Where the document was read (:class:`~mixle.corpus.Origin`), or ``None``: then
        ``origin_note`` says why (no sidecar, a sidecar that does not verify).
    id
        The document's id from its origin (``--id-field`` at ingest), or ``None``.
    text
        The decoded tokens ``[start, end)``, or ``None`` without a decoder.
    """

    source: str
    document: int
    start: int
    end: int
    length: int
    targets: int
    origin: Origin | None
    origin_note: str | None
    id: str | None
    text: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (``origin`` as its own dict)."""
        return {
            "source": self.source,
            "document": self.document,
            "start": self.start,
            "end": self.end,
            "length": self.length,
            "targets": self.targets,
            "origin": None if self.origin is None else self.origin.to_dict(),
            "origin_note": self.origin_note,
            "id": self.id,
            "text": self.text,
        }


@dataclass(frozen=True, slots=True)
class RowReport:
    """One row a rank trained on: its documents, its loss-mask summary and tokens.

    ``targets`` is the row's trained targets (its loss mask's count, 1 for a window),
    ``padding`` its inputs that belong to no document; ``source`` the row's source name;
    ``text`` a window's decoded inputs with a decoder (a packed row's text is its
    documents' ``text``).
    """

    row: int
    source: str
    positions: int
    targets: int
    padding: int
    documents: tuple[DocumentSpan, ...]
    text: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "row": self.row,
            "source": self.source,
            "positions": self.positions,
            "targets": self.targets,
            "padding": self.padding,
            "documents": [d.to_dict() for d in self.documents],
            "text": self.text,
        }


@dataclass(frozen=True, slots=True)
class RankRows:
    """A rank's batch at the step: its rows and the digest ``metrics.jsonl`` records
    for it (``batches[rank][2]``: the batch's :func:`~mixle.train.batch_digest` shifted
    right by one bit, as 16 hex digits)."""

    rank: int
    digest: str
    rows: tuple[RowReport, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"rank": self.rank, "digest": self.digest, "rows": [r.to_dict() for r in self.rows]}


@dataclass(frozen=True, slots=True)
class StepReport:
    """What a run trained on at ``step``: the cursor it read from and every rank's rows.

    ``stream`` names the stream (objective, layout, order, packing, block, batch size,
    world size, seed, corpus or mixture) and the step's own shape (``step_rows`` rows per
    rank of ``step_block`` tokens: another than ``batch_size`` x ``block`` in a later phase
    of a block schedule or in a VSL bucket); ``last_step`` is the run's last step
    (``None`` for a corpus given with options).
    """

    step: int
    cursor: BatchId
    last_step: int | None
    stream: dict[str, Any]
    ranks: tuple[RankRows, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, stable for tools (``mixle show --json``)."""
        return {
            "step": self.step,
            "cursor": list(self.cursor),
            "last_step": self.last_step,
            "stream": dict(self.stream),
            "ranks": [r.to_dict() for r in self.ranks],
        }


class _Origins:
    """Each source's origins, looked up per document; a sidecar that fails is noted
    once and never read again."""

    def __init__(self, corpora: Sequence[Sequence[Any]]) -> None:
        self.corpora = corpora
        self._notes: dict[int, str] = {}

    def lookup(self, source: int, document: int) -> tuple[Origin | None, str | None]:
        if source in self._notes:
            return None, self._notes[source]
        reader = getattr(self.corpora[source], "origin", None)
        if reader is None:
            return self._note(source, "in-memory documents record no origins")
        try:
            origin = reader(document)
        except CorpusError as exc:
            return self._note(source, f"origins sidecar unusable: {' '.join(str(exc).split())}")
        if origin is None:
            return self._note(source, "the corpus has no origins sidecar (ingested without one)")
        return origin, None

    def _note(self, source: int, note: str) -> tuple[None, str]:
        self._notes[source] = note
        return None, note


def _trained(batch: Batch, spec: RunSpec) -> Batch:
    """The batch as the trainer took it: without the document ids ``mixle show`` asked
    for (kept under ``document_mask`` and in VSL buckets, whose rows carry them) and the
    source ids."""
    if spec.data.document_mask or spec.data.vsl_buckets is not None:
        return batch.replace(source_ids=None)
    return batch.replace(document_ids=None, position_ids=None, source_ids=None)


def _digest(batch: Batch) -> str:
    return f"{int(batch_digest(batch), 16) >> 1:016x}"


def _stream_fields(spec: RunSpec) -> dict[str, Any]:
    data = spec.data
    return {
        "corpus": None if data.mixture is not None else data.corpus,
        "mixture": data.mixture,
        "run": None if spec.record is None else spec.record.directory,
        "checkpoint": None if spec.record is None else spec.record.checkpoint,
        "objective": data.objective,
        "layout": data.layout,
        "order": spec.order,
        "packing": data.packing,
        "block": data.block,
        "batch_size": data.batch_size,
        "world_size": spec.world_size,
        "seed": spec.seed,
        "boundary_id": data.boundary_id,
        "holdout_documents": data.holdout_documents,
        "sources": list(spec.source_names),
    }


def show_step(
    spec: RunSpec,
    step: int,
    *,
    rank: int | None = None,
    decoder: Decoder | None = None,
) -> StepReport:
    """The rows ``spec``'s run trained on at ``step`` (1-based, as ``metrics.jsonl``
    counts), on every rank or only on ``rank``, each cut into its documents; with
    ``decoder`` (:func:`~mixle.provenance.load_decoder`) every document's text.

    Raises
    ------
    ArgumentError
        ``step`` is not a step of the run (the run's last step named), ``rank`` is
        outside the run's world, or the step cannot be placed (see
        :meth:`RunSpec.cursor_at`).
    """
    step = spec.check_step(step)
    spec = spec.at_step(step)  # the shape (world size, batch size) that trained the step
    ranks = range(spec.world_size) if rank is None else [spec.check_rank(rank)]
    cursor = spec.cursor_at(step)
    names = spec.source_names
    origins = _Origins(spec.corpora)
    reports = []
    stream = _stream_fields(spec)
    for r in ranks:
        batch = spec.batch(step, r)
        rows = tuple(_rows(batch, names, origins, decoder))
        reports.append(RankRows(r, _digest(_trained(batch, spec)), rows))
        # What this step trained: a block schedule or VSL buckets change the shape.
        stream["step_rows"], stream["step_block"] = (int(n) for n in np.shape(batch.context))
    return StepReport(step, cursor, spec.last_step, stream, tuple(reports))


def _rows(
    batch: Batch, names: Sequence[str], origins: _Origins, decoder: Decoder | None
) -> list[RowReport]:
    context = np.asarray(batch.context)
    sources = (
        np.zeros(len(context), dtype=np.int64)
        if batch.source_ids is None
        else np.asarray(batch.source_ids)
    )
    rows = []
    for index in range(len(context)):
        source = int(sources[index])
        tokens = context[index]
        if batch.document_ids is None:  # a window: one target, no document ids
            text = None if decoder is None else decoder(tokens)
            rows.append(RowReport(index, names[source], len(tokens), 1, 0, (), text))
            continue
        documents = np.asarray(batch.document_ids)[index]
        positions = np.asarray(batch.position_ids)[index]
        mask = np.asarray(batch.loss_mask)[index]
        spans = tuple(_spans(tokens, documents, positions, mask, source, names, origins, decoder))
        rows.append(
            RowReport(
                index,
                names[source],
                len(tokens),
                int(mask.sum()),
                int((documents < 0).sum()),
                spans,
                None,
            )
        )
    return rows


def _spans(
    tokens: np.ndarray,
    documents: np.ndarray,
    positions: np.ndarray,
    mask: np.ndarray,
    source: int,
    names: Sequence[str],
    origins: _Origins,
    decoder: Decoder | None,
) -> list[DocumentSpan]:
    """The documents of one packed row, in row order (a document twice in a row, as a
    short corpus's epochs can pack it, is two spans)."""
    corpus = origins.corpora[source]
    edges = np.flatnonzero(np.diff(documents) != 0) + 1
    spans = []
    for begin, stop in zip([0, *edges.tolist()], [*edges.tolist(), len(documents)], strict=True):
        document = int(documents[begin])
        if document < 0:
            continue  # padding
        length = _length(corpus, document)
        start = int(positions[begin])
        end = min(int(positions[stop - 1]) + 1, length)
        held = tokens[begin : begin + max(end - start, 0)]
        origin, note = origins.lookup(source, document)
        spans.append(
            DocumentSpan(
                names[source],
                document,
                start,
                end,
                length,
                int(mask[begin:stop].sum()),
                origin,
                note,
                getattr(origin, "id", None),
                None if decoder is None else decoder(held),
            )
        )
    return spans


def _length(corpus: Sequence[Any], document: int) -> int:
    """A document's length: from two token offsets of a sharded corpus (never its
    whole ``lengths``), else by reading it."""
    offsets = getattr(corpus, "token_offsets", None)
    if offsets is not None:
        first, stop = offsets([document, document + 1])
        return int(stop - first)
    return len(corpus[document])
