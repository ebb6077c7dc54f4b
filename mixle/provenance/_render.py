"""``render_step``: a :class:`~mixle.provenance.StepReport` as text for people.

One header (the step, the run or corpus, the cursor and the stream), then per rank its
digest and per row a compact table — a line per document: its source (in a mixture),
corpus index, token range, length, targets, origin and id — with each text snippet under its line,
cut at ``max_chars`` characters (newlines shown as ``\\n``). Origins that are
unavailable are said once per source, with the reason, after the rows.
"""

from __future__ import annotations

from typing import Any

from mixle.provenance._show import DocumentSpan, RowReport, StepReport

__all__ = ["render_step"]

_COLUMNS = ("source", "document", "tokens", "length", "targets", "origin", "id")


def _snippet(text: str, max_chars: int) -> str:
    flat = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")
    if max_chars and len(flat) > max_chars:
        return f'"{flat[:max_chars]}"... (+{len(flat) - max_chars} chars)'
    return f'"{flat}"'


def _origin(span: DocumentSpan) -> str:
    if span.origin is None:
        return "unavailable"
    return f"{span.origin.path} {span.origin.kind} {span.origin.record}"


def _cells(span: DocumentSpan, with_source: bool) -> tuple[str, ...]:
    return (
        *((span.source,) if with_source else ()),
        str(span.document),
        f"{span.start}-{span.end}",
        str(span.length),
        str(span.targets),
        _origin(span),
        "-" if span.id is None else span.id,
    )


def _table(row: RowReport, max_chars: int, with_source: bool) -> list[str]:
    columns = _COLUMNS if with_source else _COLUMNS[1:]
    cells = [_cells(span, with_source) for span in row.documents]
    widths = [max(len(c[i]) for c in [columns, *cells]) for i in range(len(columns))]
    line = "    " + "  ".join(f"{name:<{w}}" for name, w in zip(columns, widths, strict=True))
    lines = [line.rstrip()]
    for span, values in zip(row.documents, cells, strict=True):
        text = "  ".join(f"{v:<{w}}" for v, w in zip(values, widths, strict=True))
        lines.append(f"    {text}".rstrip())
        if span.text is not None:
            lines.append(f"      {_snippet(span.text, max_chars)}")
    return lines


def _header(report: StepReport) -> list[str]:
    stream = report.stream
    of = "" if report.last_step is None else f" (of {report.last_step})"
    if stream["run"] is not None:
        where = f"run {stream['run']} (checkpoint {stream['checkpoint']})"
    else:
        where = (
            f"mixture {stream['mixture']}" if stream["mixture"] else f"corpus {stream['corpus']}"
        )
    epoch, index = report.cursor
    ranks = stream["world_size"]
    order = "" if stream["order"] is None else f"{stream['order']} order, "
    return [
        f"step {report.step}{of}: {where}",
        f"cursor: epoch {epoch}, index {index}; {stream['objective']} rows, {stream['layout']} "
        f"layout, {order}{stream['packing']} packing, block {stream['block']}, "
        f"{stream['batch_size']} rows x {ranks} rank{'s' if ranks != 1 else ''}, "
        f"seed {stream['seed']}{_step_shape(stream)}",
    ]


def _step_shape(stream: dict[str, Any]) -> str:
    """The step's own shape where a schedule or VSL bucket made it another."""
    rows, block = stream.get("step_rows"), stream.get("step_block")
    if rows is None or (rows, block) == (stream["batch_size"], stream["block"]):
        return ""
    return f"; this step: {rows} row{'s' if rows != 1 else ''} of {block} tokens per rank"


def render_step(report: StepReport, *, max_chars: int = 160) -> str:
    """``report`` as aligned text (see the module docstring); ``max_chars`` cuts each
    text snippet (0: whole)."""
    lines = _header(report)
    mixture = report.stream["mixture"] is not None
    notes: dict[str, str] = {}
    for rank in report.ranks:
        lines.append(f"rank {rank.rank}  digest {rank.digest}  ({len(rank.rows)} rows)")
        for row in rank.rows:
            source = f"  source {row.source}" if mixture else ""
            lines.append(
                f"  row {row.row}{source}  targets {row.targets}/{row.positions}"
                f"  padding {row.padding}  documents {len(row.documents)}"
            )
            if row.documents:
                lines.extend(_table(row, max_chars, mixture))
            elif row.text is not None:
                lines.append(f"      {_snippet(row.text, max_chars)}")
            for span in row.documents:
                if span.origin_note is not None:
                    notes.setdefault(span.source, span.origin_note)
    lines.extend(f"origins of {source} unavailable: {note}" for source, note in notes.items())
    return "\n".join(lines)
