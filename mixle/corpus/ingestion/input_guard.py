"""The one place where a failure while reading an input becomes a rejected record.

Input files are untrusted: a damaged ``.gz`` stream, a corrupt Parquet page or
``.npz`` member, an ``.npy`` header claiming 2**40 ids, a FIFO where a file should
be. Whatever a parser raises, the readers in
:mod:`mixle.corpus.ingestion.input_readers` report it here, at the record they
had reached (:class:`ReadCursor`), and the worker treats it like any bad record:
with ``on_error="raise"`` the ingest fails with an :class:`~mixle.errors.IngestError`
naming the file, the line/record and the position; with ``on_error="skip"`` the
rest of that file is listed in the rejects file and the ingest goes on. Only
``BaseException``\\ s that are not errors (``KeyboardInterrupt``, ``SystemExit``,
``GeneratorExit``) pass through.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from mixle.errors import IngestError

__all__ = ["ReadCursor", "failure_reason", "guard"]

_MAX_DETAIL = 240


@dataclass
class ReadCursor:
    """Where a reader is: ``location`` of the record being read (the format's
    ``(a, b)`` pair, see ``describe_location``) and ``offset``, the byte offset in the
    (uncompressed) file when the format has one, else -1."""

    location: tuple[int, int] = (0, 0)
    offset: int = -1


def failure_reason(exc: BaseException, cursor: ReadCursor) -> str:
    """A one-line reason for ``exc`` raised while reading at ``cursor``."""
    if isinstance(exc, IngestError):
        text = str(exc)
    elif isinstance(exc, MemoryError):
        text = "the input claims more data than can be held in memory (corrupt header?)"
    else:
        detail = " ".join(str(exc).split())
        if len(detail) > _MAX_DETAIL:
            detail = detail[:_MAX_DETAIL] + "..."
        text = f"cannot read the input ({type(exc).__name__}: {detail or 'no detail'})"
    if cursor.offset >= 0:
        text += f" at byte {cursor.offset}"
    # The reason may already be a sentence ("... none of its records were read."):
    # join the clauses with one "; ", not ".; ".
    return text.rstrip(" .") + "; nothing after this point of the file was read"


@contextlib.contextmanager
def guard(cursor: ReadCursor, reject: Callable[[tuple[int, int], str], None]) -> Iterator[None]:
    """Run a reading block; turn any ``Exception`` into ``reject(location, reason)``.

    The block (which may contain ``yield``) ends at the failure: a file cannot be
    read past a point where its parser failed.
    """
    try:
        yield
    except Exception as exc:
        reject(cursor.location, failure_reason(exc, cursor))
