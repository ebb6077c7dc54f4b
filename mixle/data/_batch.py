"""The one batch type of the data layer: named arrays, optional fields, one tuple view.

Every iterator of :mod:`mixle.data` builds a :class:`Batch`; consumers (the trainer,
the torch and Hugging Face adapters, the prefetcher) read its fields by name. The seed
API's positional tuples are one view of it, :meth:`Batch.as_tuple`, so they stay
exactly what they were:

- packed rows: ``(context, targets, loss_mask[, document_ids, position_ids][,
  source_ids])``;
- windows: ``(context, next_tokens[, source_ids])`` (``loss_mask`` is ``None``: every
  window trains its one target).

A later stage adds a field (attention boundaries, row masks) as one more optional
attribute defaulting to ``None``: :meth:`Batch.replace`, :meth:`Batch.to_dict`,
:meth:`Batch.map` and :meth:`Batch.rows` carry it without change, and consumers that do
not read it never see it. ``as_tuple`` lists only the seed's fields, so the tuples never
grow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = ["TUPLE_FIELDS", "Batch"]

A = TypeVar("A")
B = TypeVar("B")

#: The fields of the seed API's tuples, in tuple order (absent ones are skipped).
TUPLE_FIELDS = ("context", "targets", "loss_mask", "document_ids", "position_ids", "source_ids")


@dataclass(frozen=True, slots=True, init=False)
class Batch(Generic[A]):
    """One batch of rows, by field name (numpy arrays unless converted with :meth:`map`).

    Attributes
    ----------
    context
        ``(b, block)`` int64 model input.
    targets
        ``(b, block)`` int64 next-token targets (packed rows: ``context`` shifted by
        one), or ``(b,)`` next tokens (windows).
    loss_mask
        ``(b, block)`` bool, False only on padding targets; ``None`` for windows, whose
        every target is real.
    document_ids, position_ids
        ``(b, block)`` int64: the document each input token belongs to and its position
        inside it (``-1`` and ``0`` on padding), or ``None`` when not asked for.
    source_ids
        ``(b,)`` int64 index of each row's mixture source, or ``None`` outside mixtures.
    cu_seqlens, max_seqlen, sequence_ids
        Attention boundaries of packed rows (:mod:`~mixle.data._attention`):
        ``(b, block + 1)`` int32 sequence starts padded with ``block``, ``(b,)`` int32
        longest sequence, ``(b, block)`` int64 sequence index per token; ``None``
        unless asked for (``attention_boundaries=True``).
    """

    context: A
    targets: A
    loss_mask: A | None = None
    document_ids: A | None = None
    position_ids: A | None = None
    source_ids: A | None = None
    cu_seqlens: A | None = None
    max_seqlen: A | None = None
    sequence_ids: A | None = None

    def __init__(
        self,
        context: A,
        targets: A,
        loss_mask: A | None = None,
        document_ids: A | None = None,
        position_ids: A | None = None,
        source_ids: A | None = None,
        cu_seqlens: A | None = None,
        max_seqlen: A | None = None,
        sequence_ids: A | None = None,
    ) -> None:
        # One batch is built per step of a hot loop: the slots' own setters cost half of
        # the object.__setattr__ calls a generated frozen __init__ makes.
        set0, set1, set2, set3, set4, set5, set6, set7, set8 = _SETTERS
        set0(self, context)
        set1(self, targets)
        set2(self, loss_mask)
        set3(self, document_ids)
        set4(self, position_ids)
        set5(self, source_ids)
        set6(self, cu_seqlens)
        set7(self, max_seqlen)
        set8(self, sequence_ids)

    # Batches are built and taken apart once per step of a hot loop: the helpers read
    # every field with one C-level attrgetter call instead of dataclasses.fields().
    def fields(self) -> tuple[str, ...]:
        """The names of the fields present (not ``None``), in declaration order."""
        return tuple([n for n, v in zip(_NAMES, _ALL(self), strict=True) if v is not None])

    def as_tuple(self) -> tuple[A, ...]:
        """The seed API's positional tuple: the present fields of :data:`TUPLE_FIELDS`."""
        if self.document_ids is None and self.position_ids is None:
            head: tuple[A, ...] = (self.context, self.targets)
            if self.loss_mask is not None:
                head += (self.loss_mask,)
            return head if self.source_ids is None else (*head, self.source_ids)
        return tuple([value for value in _SEED(self) if value is not None])

    def to_dict(self) -> dict[str, A]:
        """``{name: array}`` of the present fields, in declaration order."""
        return {n: v for n, v in zip(_NAMES, _ALL(self), strict=True) if v is not None}

    def replace(self, **changes: Any) -> Batch[A]:
        """A copy with some fields changed (``None`` drops a field)."""
        return dataclasses.replace(self, **changes)

    def map(self, function: Callable[[A], B]) -> Batch[B]:
        """``function`` applied to every present field (e.g. a conversion to tensors)."""
        values: list[Any] = [None if v is None else function(v) for v in _ALL(self)]
        return Batch(*values)

    def rows(self, selection: slice) -> Batch[A]:
        """The rows ``selection`` of every field (views for numpy arrays)."""
        # Spelled out (a new field gets a line here): this runs once per batch of a
        # mixture, where a comprehension over the fields costs as much as the slicing.
        c, t, m, d, p, s, cu, ml, si = _ALL(self)
        return Batch(
            c[selection],
            t[selection],
            None if m is None else m[selection],
            None if d is None else d[selection],
            None if p is None else p[selection],
            None if s is None else s[selection],
            None if cu is None else cu[selection],
            None if ml is None else ml[selection],
            None if si is None else si[selection],
        )

    @property
    def num_rows(self) -> int:
        """``b``, the number of rows."""
        return int(self.context.shape[0])  # type: ignore[attr-defined]

    @property
    def block(self) -> int:
        """Tokens per row input (``context``'s width): a stream with a block schedule
        hands out rows of each phase's block."""
        return int(self.context.shape[1])  # type: ignore[attr-defined]

    @property
    def num_targets(self) -> int:
        """Targets the batch trains on: unmasked positions, or one per window."""
        if self.loss_mask is None:
            return int(self.targets.shape[0])  # type: ignore[attr-defined]
        mask: Any = self.loss_mask
        return int(np.count_nonzero(mask))

    def to_torch(self) -> Batch[torch.Tensor]:
        """The same batch as CPU tensors (contiguous copies only where needed)."""
        import torch

        return self.map(lambda array: torch.from_numpy(np.ascontiguousarray(array)))


_NAMES = tuple(field.name for field in dataclasses.fields(Batch))
_SETTERS = tuple(getattr(Batch, name).__set__ for name in _NAMES)
_ALL = attrgetter(*_NAMES)
_SEED = attrgetter(*TUPLE_FIELDS)
