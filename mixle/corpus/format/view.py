"""DocumentsView: the lazy selection that slicing a ShardedDocuments returns."""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from mixle.errors import ArgumentTypeError

if TYPE_CHECKING:
    from mixle.corpus.format.documents import ShardedDocuments
    from mixle.corpus.format.manifest import Manifest

__all__ = ["DocumentsView", "as_index"]


def as_index(index: Any) -> int:
    if isinstance(index, bool | np.bool_):
        raise TypeError(f"document index must be an integer, not {type(index).__name__}.")
    try:
        return operator.index(index)
    except TypeError:
        raise TypeError(
            f"document index must be an integer or a slice, not {type(index).__name__}."
        ) from None


class DocumentsView(Sequence[np.ndarray]):
    """A lazy selection ``range`` of a :class:`ShardedDocuments` (what slicing returns)."""

    def __init__(self, base: ShardedDocuments, selection: range) -> None:
        self._base = base
        self._range = selection

    def __len__(self) -> int:
        return len(self._range)

    @overload
    def __getitem__(self, index: int) -> np.ndarray: ...

    @overload
    def __getitem__(self, index: slice) -> DocumentsView: ...

    def __getitem__(self, index: int | slice) -> np.ndarray | DocumentsView:
        if isinstance(index, slice):
            return DocumentsView(self._base, self._range[index])
        try:
            position = self._range[as_index(index)]
        except IndexError:
            raise IndexError(
                f"document index {index} is out of range for a view of {len(self._range)} documents."
            ) from None
        return self._base[position]

    def _indices(self) -> np.ndarray:
        selection = self._range
        return np.arange(selection.start, selection.stop, selection.step, dtype=np.int64)

    @property
    def lengths(self) -> np.ndarray:
        """Int64 lengths of the selected documents."""
        return self._base.lengths[self._indices()]

    @property
    def fingerprint(self) -> str:
        """Fingerprint of the base corpus combined with the selection."""
        selection = self._range
        text = f"{self._base.fingerprint}[{selection.start}:{selection.stop}:{selection.step}]"
        return hashlib.sha256(text.encode("ascii")).hexdigest()

    @property
    def num_tokens(self) -> int:
        """Total tokens of the selected documents."""
        return int(self.lengths.sum())

    def token_offsets(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """The position of each view document's first token in the view's token order
        (index ``len(view)`` gives its ``num_tokens``), as
        :meth:`ShardedDocuments.token_offsets` for the corpus. A contiguous view (a
        slice without a step, as ``split_holdout`` takes) asks the corpus for those
        offsets, so a plan over it stays O(indices), never O(documents); a strided view
        sums its lengths.

        Raises
        ------
        IndexError
            An index is outside ``[0, len(view)]`` (names its position).
        ArgumentTypeError
            ``indices`` is not a 1-D integer sequence.
        """
        array = np.asarray(indices)
        if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
            raise ArgumentTypeError("`indices` must be a 1-D sequence of integers.")
        array = array.astype(np.int64)
        count = len(self._range)
        bad = (array < 0) | (array > count)
        if bad.any():
            position = int(np.flatnonzero(bad)[0])
            raise IndexError(
                f"`indices[{position}]` is {int(array[position])}, outside [0, {count}] "
                f"for a view of {count} documents."
            )
        if self._range.step == 1:
            start = self._range.start
            offsets = self._base.token_offsets(np.concatenate([[start], start + array]))
            return np.asarray(offsets[1:] - offsets[0], dtype=np.int64)
        ends = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=ends[1:])
        return ends[array]

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._base.dtype

    @property
    def vocab_size(self) -> int | None:
        return self._base.vocab_size

    @property
    def manifest(self) -> Mapping[str, Any]:
        """The base corpus's manifest."""
        return self._base.manifest

    @property
    def parsed_manifest(self) -> Manifest:
        """The base corpus's manifest, typed."""
        return self._base.parsed_manifest

    def take(self, indices: Sequence[int] | np.ndarray) -> list[np.ndarray]:
        """Batched read of view positions ``indices`` (see :meth:`ShardedDocuments.take`)."""
        array = np.asarray(indices)
        if array.size == 0:
            return []
        if array.dtype.kind not in "iu" or array.ndim != 1:
            raise ArgumentTypeError("`indices` must be a 1-D sequence of integers.")
        array = array.astype(np.int64)
        count = len(self._range)
        array = np.where(array < 0, array + count, array)
        bad = (array < 0) | (array >= count)
        if bad.any():
            position = int(np.flatnonzero(bad)[0])
            raise IndexError(f"`indices[{position}]` is out of range for a view of {count}.")
        return self._base.take(self._range.start + array * self._range.step)

    @property
    def gathers_split_output(self) -> bool:
        """Whether :meth:`gather_into` takes a ``mixle._gather.SplitOutput`` (as the
        base corpus's does)."""
        return getattr(self._base, "gathers_split_output", False) is True

    def gather_into(
        self,
        indices: np.ndarray,
        begins: np.ndarray,
        ends: np.ndarray,
        out: np.ndarray,
        at: np.ndarray,
    ) -> None:
        """Pieces of the documents at view positions ``indices`` into ``out`` (see
        :meth:`ShardedDocuments.gather_into`; no negative positions)."""
        array = np.asarray(indices)
        if array.size and (array.dtype.kind not in "iu" or array.ndim != 1):
            raise ArgumentTypeError("`indices` must be a 1-D sequence of integers.")
        array = array.astype(np.int64)
        count = len(self._range)
        bad = (array < 0) | (array >= count)
        if bad.any():
            position = int(np.flatnonzero(bad)[0])
            raise IndexError(f"`indices[{position}]` is out of range for a view of {count}.")
        self._base.gather_into(self._range.start + array * self._range.step, begins, ends, out, at)

    def prefetch(self, indices: Sequence[int] | np.ndarray) -> None:
        """Forward the hint to the base corpus (invalid indices are ignored)."""
        array = np.asarray(indices)
        if array.size and array.dtype.kind in "iu" and array.ndim == 1:
            count = len(self._range)
            array = array[(array >= 0) & (array < count)].astype(np.int64)
            self._base.prefetch(self._range.start + array * self._range.step)

    def __repr__(self) -> str:
        return f"DocumentsView({self._base!r}, {self._range!r})"
