"""One source of a mixture: validated settings, and its endless stream of packed rows.

A source's documents are packed on their own, epoch after epoch: epoch ``e`` orders
the documents by :func:`global_document_order` keyed by ``(source seed, e)``, where the
source seed hashes the mixture seed with the source's name and fingerprint, so every
source reshuffles independently and a small source is upsampled by reshuffled repeats,
never by repeating a row inside an epoch. The stream of an epoch is packed exactly as
the global layout packs a corpus (``block + 1`` tokens at stride ``block``, the
boundary between documents, padding only at the tail of the epoch's last row), so an
epoch has the same number of rows ``R`` whatever its order and the source's row ``m``
is row ``m % R`` of epoch ``m // R``: O(1), no replay.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle.data._documents import DocumentSource, as_documents
from mixle.data._order import global_document_order
from mixle.data._packed_rows import read_packed_rows
from mixle.data._packing import StreamLayout, rows_for_stream
from mixle.errors import ArgumentError, ArgumentTypeError

__all__ = ["MixtureSource", "SourceRows", "check_weight"]


def check_weight(value: Any, where: str) -> float:
    """A finite nonnegative real weight, or an error naming ``where`` and the fix."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ArgumentTypeError(
            f"weight of {where} must be a number (a share of trained tokens, e.g. 0.3). "
            f"Got {value!r} ({type(value).__name__}) instead."
        )
    weight = float(value)
    if math.isnan(weight) or math.isinf(weight) or weight < 0:
        raise ArgumentError(
            f"weight of {where} must be a finite number >= 0 (a share of trained tokens). "
            f"Got {value!r} instead."
        )
    return weight


@dataclass(frozen=True, slots=True)
class MixtureSource:
    """A source of a :class:`~mixle.data.Mixture`.

    Parameters
    ----------
    documents
        Any documents sequence (a local or remote corpus, a list of 1-D token arrays).
    weight
        Share of the trained tokens (relative: the weights are normalised), ``>= 0``.
    name
        Unique, non-empty name used in messages, accounting and the state.
    max_epochs
        Optional positive limit on how many passes over the source a run may need;
        :meth:`~mixle.data.Mixture.check_budget` raises before training when exceeded.

    Raises
    ------
    ArgumentTypeError, ArgumentError
        A field is invalid (the message names the source).
    """

    documents: Any
    weight: float
    name: str
    max_epochs: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ArgumentTypeError(
                f"source `name` must be a non-empty string. Got {self.name!r} instead."
            )
        check_weight(self.weight, f"source {self.name!r}")
        limit = self.max_epochs
        if limit is not None and (
            isinstance(limit, bool)
            or not isinstance(limit, int | float)
            or not math.isfinite(limit)
            or limit <= 0
        ):
            raise ArgumentError(
                f"max_epochs of source {self.name!r} must be a positive number or None. "
                f"Got {limit!r} instead."
            )


def source_seed(seed: int, name: str, fingerprint: str) -> int:
    """The shuffle seed of a source: a 63-bit hash of ``(seed, name, fingerprint)``."""
    digest = hashlib.sha256(f"mixle-mixture-source\0{seed}\0{name}\0{fingerprint}".encode())
    return int.from_bytes(digest.digest()[:8], "little") >> 1


class SourceRows:
    """The endless packed row stream of one source (see the module docstring).

    Attributes
    ----------
    stream_tokens
        Tokens of one epoch's stream, boundaries included (the same every epoch).
    rows_per_epoch
        ``R``: rows of one epoch.
    """

    def __init__(
        self,
        source: MixtureSource,
        *,
        block: int,
        seed: int,
        boundary_id: int | None,
        pad_id: int,
    ) -> None:
        self.name = source.name
        self.documents: DocumentSource = as_documents(source.documents)
        self.lengths = np.asarray(self.documents.lengths, dtype=np.int64)
        self.fingerprint = self.documents.fingerprint
        self.block, self.boundary_id, self.pad_id = block, boundary_id, pad_id
        self.seed = source_seed(seed, source.name, self.fingerprint)
        count = len(self.lengths)
        boundaries = count - 1 if boundary_id is not None and count else 0
        self.stream_tokens = int(self.lengths.sum()) + boundaries
        self.rows_per_epoch = rows_for_stream(self.stream_tokens, block)
        if self.rows_per_epoch == 0:
            raise ArgumentError(
                f"source {self.name!r} is empty: its {count} document(s) hold "
                f"{self.stream_tokens} token(s), fewer than the 2 a training target needs. "
                "Give it documents, or remove it from the mixture."
            )
        self._layouts: dict[int, StreamLayout] = {}

    def __getstate__(self) -> dict[str, Any]:
        # Epoch layouts are O(documents) and cheap to rebuild: never ship them.
        return {**self.__dict__, "_layouts": {}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def layout(self, epoch: int) -> StreamLayout:
        """The epoch's layout (the two most recent epochs are cached)."""
        layout = self._layouts.get(epoch)
        if layout is None:
            order = global_document_order(len(self.lengths), seed=self.seed, epoch=epoch)
            layout = StreamLayout.build(order, self.lengths[order], self.boundary_id is not None)
            if len(self._layouts) >= 2:
                self._layouts.pop(next(iter(self._layouts)))
            self._layouts[epoch] = layout
        return layout

    def real_tokens(self, rows: int) -> int:
        """Real (unmasked) targets in the source's first ``rows`` rows, closed form."""
        epochs, part = divmod(rows, self.rows_per_epoch)
        # Only an epoch's last row holds padding, so a partial epoch is all real.
        return epochs * (self.stream_tokens - 1) + part * self.block

    def read(self, first: int, count: int, document_ids: bool) -> list[np.ndarray]:
        """The source's rows ``[first, first + count)`` as ``(count, block + 1)`` tokens,
        a ``(count, block)`` mask and, if asked, document and position ids (rows may
        span epochs)."""
        parts: list[list[np.ndarray]] = []
        row = first
        while row < first + count:
            epoch, start = divmod(row, self.rows_per_epoch)
            take = min(first + count - row, self.rows_per_epoch - start)
            rows = read_packed_rows(
                self.documents,
                self.layout(epoch),
                start,
                take,
                block=self.block,
                pad_id=self.pad_id,
                boundary_id=self.boundary_id,
                document_ids=document_ids,
            )
            part = [rows.rows, rows.mask]
            if rows.document_ids is not None and rows.position_ids is not None:
                part += [rows.document_ids, rows.position_ids]
            parts.append(part)
            row += take
        if len(parts) == 1:
            return parts[0]
        return [np.concatenate(pieces) for pieces in zip(*parts, strict=True)]


def build_rows(
    sources: Sequence[MixtureSource],
    *,
    block: int,
    seed: int,
    boundary_id: int | None,
    pad_id: int,
) -> list[SourceRows]:
    """One :class:`SourceRows` per source (raises on the first empty source)."""
    return [
        SourceRows(s, block=block, seed=seed, boundary_id=boundary_id, pad_id=pad_id)
        for s in sources
    ]
