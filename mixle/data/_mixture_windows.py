"""One source of a windows mixture: its endless stream of shuffled windows.

The windows objective of :class:`~mixle.data.TokenStream` over a mixture: a source's
token stream is its documents concatenated in order (``boundary_id`` between
documents), window ``i`` is ``stream[i : i + block]`` with target ``stream[i + block]``,
``W = num_tokens - block`` windows per epoch. The source's ``m``-th window is window
``perm_e(m % W)`` of epoch ``e = m // W``, where ``perm_e`` is the keyed Feistel
bijection on ``[0, W)`` of :class:`~mixle.data._permutation.FeistelPermutation` keyed by
``(source seed, e)`` (the source seed hashes the mixture seed with the source's name
and fingerprint). So every epoch visits each window once, in a fresh order, a small
source is upsampled by reshuffled repeats, and the ``m``-th window is found in O(1)
with O(1) memory (no permutation array).
"""

from __future__ import annotations

import numpy as np

from mixle._arrays import distinct
from mixle.data._documents import DocumentSource, as_documents
from mixle.data._mixture_source import MixtureSource, source_seed
from mixle.data._permutation import FeistelPermutation
from mixle.data._token_windows import TokenWindows
from mixle.errors import ArgumentError

__all__ = ["SourceWindows"]


class SourceWindows:
    """The endless window stream of one source (see the module docstring).

    Attributes
    ----------
    rows_per_epoch
        ``W``: windows of one epoch (each window is one trained target).
    """

    def __init__(
        self, source: MixtureSource, *, block: int, seed: int, boundary_id: int | None
    ) -> None:
        self.name = source.name
        self.documents: DocumentSource = as_documents(source.documents)
        self.lengths = np.asarray(self.documents.lengths, dtype=np.int64)
        self.num_documents = len(self.lengths)
        self.fingerprint = self.documents.fingerprint
        self.seed = source_seed(seed, source.name, self.fingerprint)
        self.windows = TokenWindows(self.documents, self.lengths, block, boundary_id)
        self.rows_per_epoch = self.windows.num_windows
        if self.rows_per_epoch == 0:
            raise ArgumentError(
                f"source {self.name!r} is too small for the windows objective: its "
                f"{len(self.lengths)} document(s) hold {self.windows.num_tokens} token(s), "
                f"not more than block={block}. Give it documents, lower the block, or "
                "remove it from the mixture."
            )
        self._permutations: dict[int, FeistelPermutation] = {}

    def _permutation(self, epoch: int) -> FeistelPermutation:
        """The epoch's bijection (the two most recent epochs are cached)."""
        permutation = self._permutations.get(epoch)
        if permutation is None:
            permutation = FeistelPermutation(self.rows_per_epoch, self.seed, epoch)
            if len(self._permutations) >= 2:
                self._permutations.pop(next(iter(self._permutations)))
            self._permutations[epoch] = permutation
        return permutation

    def window_starts(self, first: int, count: int) -> np.ndarray:
        """Stream offsets of the source's windows ``[first, first + count)`` (int64)."""
        epochs, positions = np.divmod(
            np.arange(first, first + count, dtype=np.int64), self.rows_per_epoch
        )
        starts = np.empty(count, dtype=np.int64)
        for epoch in distinct(epochs).tolist():
            where = epochs == epoch
            starts[where] = self._permutation(epoch)(positions[where])
        return starts

    def real_tokens(self, rows: int) -> int:
        """Targets of the source's first ``rows`` windows: one each."""
        return rows

    def read(self, first: int, count: int, document_ids: bool) -> list[np.ndarray]:
        """The source's windows ``[first, first + count)``: ``(count, block)`` int64
        contexts and ``(count,)`` int64 next tokens (windows may span epochs)."""
        if document_ids:
            raise ArgumentError("the windows objective has no document ids.")
        context, targets = self.windows.read(self.window_starts(first, count), scattered=True)
        return [context, targets]
