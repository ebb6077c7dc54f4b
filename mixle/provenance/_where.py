"""``where``: every ``(epoch, step, rank, row)`` in which a run trained on one document.

:func:`where` resolves what the user names — a document index, an origin
(``PATH:RECORD``, as the corpus's origins sidecar records it and ``mixle show``
prints it) or an id (``--id-field`` at ingest) — to documents of the run's corpus (or
of its mixture's sources) and inverts the run's plan for each
(:func:`mixle.data.sightings`): no pass over an epoch with the ``"blocks"`` order
(the global layout's default) nor with variable-length buckets (``vsl_buckets``: the
document's pieces, the piece orders and the curriculum inverted), one pass over each
epoch's order with the seed's permutation (and with every per-rank stream), which the
report says (:attr:`WhereReport.closed_form`, :attr:`WhereReport.inversion`).

A run's checkpoint bounds the answer: by default the epochs its steps reached, and
only the steps up to its last step; a corpus given with stream options answers for
``epochs`` epochs (default 1) of the stream those options describe. Documents held out
of training (``--holdout``: the corpus's last ones) are reported as such, with no
sightings. A document index is checked against the corpus without reading it; an
origin or an id is looked up by one scan of the origins sidecar (O(documents) for an
id, O(runs) for an origin).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle._checks import exact_int, positive_int
from mixle.corpus import Origin
from mixle.data._mixture import Mixture
from mixle.data._mixture_phased import PhasedSourceRows
from mixle.data._sightings import Sighting, closed_form, epoch_numbers, sightings
from mixle.data._streaming import StreamingCorpus
from mixle.data._vsl_stream import VariableLengthStream
from mixle.errors import ArgumentError, CorpusError
from mixle.provenance._run import RunSpec
from mixle.train._sources import StreamSource

__all__ = ["DocumentSightings", "WhereReport", "find_id", "find_origin", "render_where", "where"]

_ORIGIN = re.compile(r"^(?P<path>.+):(?P<record>[0-9]+)$")


@dataclass(frozen=True, slots=True)
class DocumentSightings:
    """One document and every row that trained on it.

    Attributes
    ----------
    source
        The source's name (the mixture source, or the corpus location).
    document
        Its index in that source's corpus.
    origin
        Where it was read (:class:`~mixle.corpus.Origin`), or ``None`` (no sidecar).
    held_out
        Held out of training (``--holdout``): never a target, no sightings.
    sightings
        In step order (see :class:`~mixle.data.Sighting`).
    """

    source: str
    document: int
    origin: Origin | None
    held_out: bool
    sightings: tuple[Sighting, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (each sighting as a dict)."""
        return {
            "source": self.source,
            "document": self.document,
            "origin": None if self.origin is None else self.origin.to_dict(),
            "id": getattr(self.origin, "id", None),
            "held_out": self.held_out,
            "sightings": [
                {
                    "epoch": s.epoch,
                    "step": s.step,
                    "rank": s.rank,
                    "row": s.row,
                    "start": s.start,
                    "stop": s.stop,
                }
                for s in self.sightings
            ],
        }


@dataclass(frozen=True, slots=True)
class WhereReport:
    """What :func:`where` found.

    Attributes
    ----------
    query
        The document as given.
    epochs
        The epochs searched (of the corpus; of each source in a mixture).
    last_step
        The run's last step (sightings after it are left out), or ``None`` for a corpus.
    closed_form
        True: the order was inverted (O(window) per epoch; O(the document's pieces) with
        VSL buckets); False: one pass over each epoch's order (the seed's permutation).
    documents
        Every document the query names, with its sightings.
    inversion
        How the plan was inverted, in words (as :func:`render_where` prints it).
    """

    query: str
    epochs: tuple[int, ...]
    last_step: int | None
    closed_form: bool
    documents: tuple[DocumentSightings, ...]
    inversion: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (stable for tools)."""
        return {
            "query": self.query,
            "epochs": list(self.epochs),
            "last_step": self.last_step,
            "closed_form": self.closed_form,
            "inversion": self.inversion,
            "documents": [d.to_dict() for d in self.documents],
        }


def where(
    spec: RunSpec,
    document: int | str,
    *,
    epochs: int | None = None,
    source: str | None = None,
) -> WhereReport:
    """Every row of ``spec``'s run in which ``document`` was a target.

    Parameters
    ----------
    spec
        The run (:func:`~mixle.provenance.resolve_run`).
    document
        A document index (an int, or a string of digits), an origin ``PATH:RECORD``
        (``PATH`` as recorded, or its last path components; ``RECORD`` 0-based, as
        recorded) or an id.
    epochs
        Search epochs ``0 .. epochs - 1``; ``None``: those a run's steps reached (1 for
        a corpus).
    source
        The mixture source of a document index (needed with several sources); limits
        an origin or id lookup to that source.

    Raises
    ------
    ArgumentError
        A document index out of range, an origin or id that matches no document, an
        ``epochs`` that is not positive, an unknown ``source`` or a run of windows
        (``objective="windows"``: its rows hold no documents).
    CorpusError
        The origins sidecar of a corpus is missing, truncated or forged.
    """
    if epochs is not None:
        epochs = positive_int("epochs", epochs)
    stream = _stream(spec)
    names = spec.source_names
    chosen = _sources(names, source)
    matches = _resolve(spec, document, chosen)
    last = spec.last_step
    _check_placeable(spec)
    found = []
    for index, number in matches:
        corpus = spec.corpora[index]
        trained = _trained_count(stream, index)
        rows: tuple[Sighting, ...] = ()
        if number < trained:
            listed = sightings(
                stream,
                number,
                epochs=_epochs(spec, stream, index, epochs),
                source=index if isinstance(stream, Mixture) else None,
            )
            rows = tuple(s for s in listed if last is None or s.step <= last)
        found.append(
            DocumentSightings(
                names[index], number, _origin(corpus, number), number >= trained, rows
            )
        )
    searched = epoch_numbers(_epochs(spec, stream, matches[0][0], epochs))
    return WhereReport(
        str(document),
        tuple(searched),
        last,
        closed_form(stream),
        tuple(found),
        _inversion(stream),
    )


Stream = StreamingCorpus | Mixture | VariableLengthStream
"""The streams whose plans :func:`~mixle.data.sightings` inverts."""


def _inversion(stream: Stream) -> str:
    """How :func:`~mixle.data.sightings` inverts ``stream``'s plan, in words."""
    if isinstance(stream, VariableLengthStream):
        return (
            f"the {stream.curriculum} curriculum and the buckets' piece orders inverted: "
            "no pass over an epoch"
        )
    if closed_form(stream):
        return "the blocks order inverted: no pass over an epoch"
    return "the permutation order: one pass over each epoch's order"


def _stream(spec: RunSpec) -> Stream:
    source = spec.source(0)
    stream = source.stream if isinstance(source, StreamSource) else None
    if isinstance(stream, StreamingCorpus | VariableLengthStream) or (
        isinstance(stream, Mixture) and stream.objective == "packed"
    ):
        return stream
    raise ArgumentError(
        f"objective={spec.data.objective!r} trains on windows of the token stream, not packed "
        "rows of documents: `where` needs objective='packed'."
    )


def _sources(names: Sequence[str], source: str | None) -> list[int]:
    if source is None:
        return list(range(len(names)))
    if source not in names:
        raise ArgumentError(f"`source` must be one of {list(names)!r}. Got {source!r} instead.")
    return [list(names).index(source)]


def _resolve(spec: RunSpec, document: int | str, chosen: list[int]) -> list[tuple[int, int]]:
    """``(source, document)`` of every document the query names."""
    if isinstance(document, str) and document.isdigit():
        document = int(document)
    if not isinstance(document, str):
        number = exact_int("document", document)
        if len(chosen) > 1:
            raise ArgumentError(
                f"a document index needs its source: one of {list(spec.source_names)!r} "
                f"(`source`, --source). Got document {number}."
            )
        count = len(spec.corpora[chosen[0]])
        if not 0 <= number < count:
            raise ArgumentError(
                f"document index {number} is out of range: the corpus has {count} documents "
                f"(0 to {count - 1})."
            )
        return [(chosen[0], number)]
    found: list[tuple[int, int]] = []
    matched = _ORIGIN.match(document)
    for index in chosen:
        corpus = spec.corpora[index]
        if matched is not None:
            found += [
                (index, d) for d in find_origin(corpus, matched["path"], int(matched["record"]))
            ]
        found += [(index, d) for d in find_id(corpus, document) if (index, d) not in found]
    if not found:
        what = "origin or id" if matched is not None else "id"
        raise ArgumentError(f"no document has {what} {document!r}.")
    return found


def find_origin(corpus: Sequence[Any], path: str, record: int) -> list[int]:
    """Documents of ``corpus`` read from ``record`` of an input whose recorded path is
    ``path`` or ends with ``/path``: one scan of the sidecar's runs (O(runs)) through
    the corpus's ``origins_table``, else of every document's origin (O(documents))."""

    def named(recorded: str) -> bool:
        return recorded == path or recorded.endswith("/" + path)

    table_of = getattr(corpus, "origins_table", None)
    if table_of is None:
        return [
            d
            for d, origin in enumerate(_origins(corpus))
            if origin is not None and origin.record == record and named(origin.path)
        ]
    table = table_of()
    if table is None:
        return []
    runs = table.runs
    inputs = [k for k, (recorded, _) in enumerate(table.inputs) if named(recorded)]
    sizes = np.append(runs.first[1:], len(corpus)) - runs.first
    hit = np.isin(runs.input, inputs) & (runs.record <= record) & (record < runs.record + sizes)
    return sorted(int(d) for d in (runs.first + record - runs.record)[hit])


def find_id(corpus: Sequence[Any], value: str) -> list[int]:
    """Documents of ``corpus`` whose id is ``value``: the corpus's ``find_id`` (one scan
    of the sidecar's id column), else a scan of every document's origin."""
    finder = getattr(corpus, "find_id", None)
    if finder is None:
        return [
            d for d, origin in enumerate(_origins(corpus)) if getattr(origin, "id", None) == value
        ]
    ids = finder(value)
    return [] if ids is None else [int(d) for d in ids]


def _origins(corpus: Sequence[Any]) -> list[Origin | None]:
    """Every document's origin (all ``None`` without a sidecar or for in-memory documents)."""
    reader = getattr(corpus, "origin", None)
    if reader is None or not len(corpus) or reader(0) is None:
        return []
    return [reader(d) for d in range(len(corpus))]


def _origin(corpus: Sequence[Any], document: int) -> Origin | None:
    reader = getattr(corpus, "origin", None)
    try:
        return None if reader is None else reader(document)
    except CorpusError:
        return None


def _trained_count(stream: Stream, source: int) -> int:
    """Documents of ``source`` the stream trains on (the corpus less its held-out tail)."""
    if isinstance(stream, Mixture):
        return stream.rows[source].num_documents
    return len(stream.documents)


def _epochs(spec: RunSpec, stream: Stream, source: int, epochs: int | None) -> int:
    """``epochs``, or the epochs a run's steps reached (of the source, in a mixture)."""
    if epochs is not None:
        return epochs
    last = spec.last_step
    if last is None:
        return 1
    epoch, index = spec.cursor_at(last)
    if isinstance(stream, Mixture):
        end = stream.cursor_row(index + stream.step_size)
        taken = int(stream.schedule.counts_before(end)[source])
        rows = stream.rows[source]
        if isinstance(rows, PhasedSourceRows):
            return max(rows.epochs_started(taken), 1)
        return max(taken - 1, 0) // rows.rows_per_epoch + 1
    return epoch + 1


def _check_placeable(spec: RunSpec) -> None:
    """Refuse a run resumed with another world size or batch size: its steps are placed
    with one shape from the start (``mixle show`` places such a run's steps one by one,
    :meth:`RunSpec.at_step`)."""
    record = spec.record
    if record is None or record.last_step < 1:
        return
    try:
        shapes = {id(spec.at_step(step)) for step in (1, record.last_step)}
    except ArgumentError as exc:
        raise ArgumentError(
            f"the steps of {record.directory} cannot be placed from its configuration: {exc}"
        ) from None
    if shapes != {id(spec)}:
        raise ArgumentError(
            f"{record.directory} was resumed with another world size or batch size: `where` "
            "places a run's steps with one shape from its start (`mixle show --step N` "
            "places each step of such a run)."
        )


def render_where(report: WhereReport) -> str:
    """The report as text: per document its source, index, origin and id, then one line
    per sighting (epoch, step, rank, row, the document's trained tokens)."""
    epochs = report.epochs
    searched = f"epoch {epochs[0]}" if len(epochs) == 1 else f"epochs {epochs[0]}-{epochs[-1]}"
    until = "" if report.last_step is None else f", up to the run's last step {report.last_step}"
    lines = [f"{report.query}: {searched} searched ({report.inversion}{until})"]
    for found in report.documents:
        origin = found.origin
        where = "" if origin is None else f"  origin {origin.path} {origin.kind} {origin.record}"
        ident = getattr(origin, "id", None)
        lines.append(
            f"document {found.document} of {found.source}{where}"
            + ("" if ident is None else f"  id {ident}")
        )
        if found.held_out:
            lines.append("  held out of training (--holdout): never trained on")
            continue
        lines.append(f"  {len(found.sightings)} row(s) trained on it")
        if found.sightings:
            lines.append("  epoch  step  rank  row  tokens")
            lines.extend(
                f"  {s.epoch:>5}  {s.step:>4}  {s.rank:>4}  {s.row:>3}  [{s.start}, {s.stop})"
                for s in found.sightings
            )
    return "\n".join(lines)
