"""The one resumable contract of the data layer, over the one :class:`~mixle.data._cursor.Cursor`.

``StreamingCorpus``, ``TokenStream`` and ``Mixture`` all keep their position in a
cursor ``(epoch, index)`` — the index counts what the stream counts (batches, global
rows, windows) — and answer the same verbs, so one adapter (the torch dataset, the
trainer's batch source, the accelerate row stream) serves all of them:

- ``cursor`` / ``state_dict()`` / ``load_state_dict(state)`` / ``stream_identity()``;
- ``batches()``: :class:`~mixle.data.Batch` es from the cursor on, moving it;
- ``read(epoch, index)``: the batch iteration yields at a cursor, by seeking;
- ``next_cursor(epoch, index, steps)``: the cursor ``steps`` batches later (pure;
  ``None`` where the stream ends);
- ``epoch_size(epoch)`` / ``steps_left(epoch, index)``: where an epoch's index ends,
  and how many batches are left in it from a cursor.

Older names stay as documented aliases: ``StreamingCorpus.batch_at``/``batch_at_row``/
``advance``, ``TokenStream.batch``/``batch_at_position``/``advance_position``,
``Mixture.batch_at_row``/``rows_at``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

from mixle.data._batch import Batch

__all__ = ["ResumableStream"]


@runtime_checkable
class ResumableStream(Protocol):
    """A resumable stream of batches addressed by its cursor (see the module docstring)."""

    @property
    def cursor(self) -> tuple[int, int]:
        """``(epoch, index)`` of the next batch :meth:`batches` yields."""
        ...

    def batches(self) -> Iterator[Batch]:
        """Batches from the cursor on, moving the cursor before each is handed out."""
        ...

    def read(self, epoch: int, index: int) -> Batch:
        """The batch iteration yields at cursor ``(epoch, index)`` (no state changes)."""
        ...

    def next_cursor(self, epoch: int, index: int, steps: int) -> tuple[int, int] | None:
        """The cursor ``steps`` batches after ``(epoch, index)``; ``None`` past the end."""
        ...

    def epoch_size(self, epoch: int) -> int:
        """The cursor index at which ``epoch`` ends."""
        ...

    def steps_left(self, epoch: int, index: int) -> int:
        """Batches from cursor ``(epoch, index)`` to the end of ``epoch``."""
        ...

    def stream_identity(self) -> dict[str, Any]:
        """Everything that defines the stream, as saved in :meth:`state_dict`."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """The cursor and the stream identity, JSON-able."""
        ...

    def load_state_dict(self, state: Any) -> None:
        """Move the cursor to a saved state of the same stream (no replay)."""
        ...
