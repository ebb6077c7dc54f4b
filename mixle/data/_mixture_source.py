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

A source's epoch order is its :class:`~mixle.data._options.OrderOptions`: the
hierarchical ``"blocks"`` order (default) is laid out window by window
(:class:`~mixle.data._windowed_layout.WindowedLayout`; its token count comes from the
cumulative offsets at ``0`` and ``N``, so no length is read), the seed's
``"permutation"`` as a whole :class:`~mixle.data._packing.StreamLayout`.

With a :class:`~mixle.data._plan_store.PlanStore`, a permutation source keeps its
epoch layouts in it, keyed by the source's identity (name, fingerprint, document count, source seed,
block, boundary) and the epoch, together with its token count: a restarted process
loads them (checked against the documents on a sample) instead of reading every
length and planning the epoch again, and rebuilds any that is missing or corrupt.
"""

from __future__ import annotations

import hashlib
import math
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from mixle.data._documents import DocumentSource, as_documents
from mixle.data._options import OrderOptions, ShardOptions
from mixle.data._order import global_document_order, length_table
from mixle.data._order_windows import CumulativeOffsets
from mixle.data._packed_rows import read_packed_rows
from mixle.data._packing import RowLayout, StreamLayout, rows_for_stream
from mixle.data._plan_global import GlobalPlan
from mixle.data._plan_store import (
    PLAN_FORMAT,
    PlanStore,
    plan_arrays,
    plan_from_arrays,
    sampled_lengths,
    stored_or_built,
)
from mixle.errors import ArgumentError, ArgumentTypeError, CorpusFormatError

__all__ = [
    "MixtureSource",
    "SourceRows",
    "check_max_epochs",
    "check_unique_names",
    "check_weight",
    "check_weight_sum",
]


def _shown(value: Any) -> str:
    """``repr(value)``, shortened for integers too long to print usefully."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    return repr(value)


# The row plan of every source's epochs (the global layout over the source alone).
_SOURCE_PLAN = GlobalPlan(ShardOptions(layout="global"), even_batches=False)


def check_weight(value: Any, where: str) -> float:
    """A finite nonnegative real weight, or an error naming ``where`` and the fix."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ArgumentTypeError(
            f"weight of {where} must be a number (a share of trained tokens, e.g. 0.3). "
            f"Got {_shown(value)} ({type(value).__name__}) instead."
        )
    try:
        weight = float(value)
    except OverflowError:  # an integer beyond the float range
        weight = math.inf
    if math.isnan(weight) or math.isinf(weight) or weight < 0:
        raise ArgumentError(
            f"weight of {where} must be a finite number >= 0 (a share of trained tokens). "
            f"Got {_shown(value)} instead."
        )
    return weight


def check_max_epochs(value: Any, where: str) -> None:
    """Raise unless ``value`` (a source's ``max_epochs``) is ``None`` or a finite
    positive number.

    Raises
    ------
    ArgumentError
        Anything else, naming ``where`` and the value.
    """
    if value is None:
        return
    finite = False
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            finite = math.isfinite(value) and value > 0
        except OverflowError:  # an integer beyond the float range
            finite = False
    if not finite:
        raise ArgumentError(
            f"max_epochs of {where} must be a positive number or None. Got {_shown(value)} instead."
        )


def check_weight_sum(weights: Sequence[float], where: str) -> None:
    """Raise unless the checked weights ``weights`` have a finite sum (the schedule
    normalises by it).

    Raises
    ------
    ArgumentError
        The sum overflows a float; names ``where`` and the fix.
    """
    try:
        total = math.fsum(weights)
    except OverflowError:
        total = math.inf
    if math.isinf(total):
        raise ArgumentError(
            f"the weights of {where} sum to more than the largest float (about 1.8e308); "
            "only their ratios matter: scale them down."
        )


def check_unique_names(names: Iterable[str], where: str) -> None:
    """Raise unless ``names`` are distinct once Unicode-normalised (NFC), so that two
    spellings of one name ("café" composed and decomposed) are never two sources.

    Raises
    ------
    ArgumentError
        Two names are equal, or equal after NFC normalisation (both shown escaped).
    """
    seen: dict[str, str] = {}
    for name in names:
        key = unicodedata.normalize("NFC", name)
        if key in seen:
            if seen[key] == name:
                same = f"{name!r} is used twice"
            else:
                same = f"{name!a} is the same name as {seen[key]!a} once Unicode-normalised (NFC)"
            raise ArgumentError(f"source name {same} in {where}; give every source its own name.")
        seen[key] = name


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
        check_max_epochs(self.max_epochs, f"source {self.name!r}")


def source_seed(seed: int, name: str, fingerprint: str) -> int:
    """The shuffle seed of a source: a 63-bit hash of ``(seed, name, fingerprint)``."""
    digest = hashlib.sha256(f"mixle-mixture-source\0{seed}\0{name}\0{fingerprint}".encode())
    return int.from_bytes(digest.digest()[:8], "little") >> 1


def _tokens_arrays(tokens: int) -> dict[str, np.ndarray]:
    """The stored record of a source's token count, with a digest of it: a plan file's
    header is checksummed but its arrays are not, and this count is not checked against
    the documents when it is loaded."""
    return {"tokens": np.array([tokens, _tokens_digest(tokens)], dtype=np.int64)}


def _tokens_digest(tokens: int) -> int:
    digest = hashlib.sha256(f"mixle-source-tokens\0{tokens}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


class SourceRows:
    """The endless packed row stream of one source (see the module docstring).

    Attributes
    ----------
    num_documents
        Documents of the source.
    stream_tokens
        Tokens of one epoch's stream, boundaries included (the same every epoch).
    rows_per_epoch
        ``R``: rows of one epoch.
    order
        The epoch order (its sizes valid for the source's documents).
    plan_store
        Where the epoch layouts and the token count of a permutation source are kept
        across processes, or ``None`` (every process reads the lengths and plans each
        epoch it reads).
    """

    def __init__(
        self,
        source: MixtureSource,
        *,
        block: int,
        seed: int,
        boundary_id: int | None,
        pad_id: int,
        order: OrderOptions,
        plan_store: PlanStore | None = None,
    ) -> None:
        self.name = source.name
        self.documents: DocumentSource = as_documents(source.documents)
        self.num_documents = len(self.documents)
        self.fingerprint = self.documents.fingerprint
        self.block, self.boundary_id, self.pad_id = block, boundary_id, pad_id
        self.seed = source_seed(seed, source.name, self.fingerprint)
        self.plan_store = plan_store
        self.order = order
        self.offsets = CumulativeOffsets(self.documents)
        self._lengths_array: np.ndarray | None = None
        count = self.num_documents
        try:
            order.sizes(count)
        except ArgumentError as error:
            raise ArgumentError(f"source {self.name!r}: {error}") from None
        boundaries = count - 1 if boundary_id is not None and count else 0
        self.stream_tokens = self._document_tokens() + boundaries
        self._layouts: dict[int, RowLayout] = {}
        self.rows_per_epoch = self._epoch_rows()
        if self.rows_per_epoch == 0:
            raise ArgumentError(
                f"source {self.name!r} is empty: its {count} document(s) hold "
                f"{self.stream_tokens} token(s), too few for one training target. "
                "Give it documents, or remove it from the mixture."
            )

    def _epoch_rows(self) -> int:
        """``R``, the rows of every epoch (0 when an epoch trains no target)."""
        return rows_for_stream(self.stream_tokens, self.block)

    def __getstate__(self) -> dict[str, Any]:
        # Epoch layouts are O(documents) and cheap to rebuild: never ship them.
        return {**self.__dict__, "_layouts": {}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def _lengths(self) -> np.ndarray:
        """Every document's length (a :func:`length_table`), read on first use."""
        if self._lengths_array is None:
            self._lengths_array = length_table(self.documents.lengths)
        return self._lengths_array

    def _identity(self, **plan: Any) -> dict[str, Any]:
        """The identity of one of this source's plans in the store."""
        return {
            "mixture_source": self.name,
            "fingerprint": self.fingerprint,
            "num_documents": self.num_documents,
            "seed": self.seed,
            "block": self.block,
            "boundary_id": self.boundary_id,
            "plan_format": PLAN_FORMAT,
            **plan,
        }

    def _document_tokens(self) -> int:
        """Tokens of all documents (boundaries excluded): from the cumulative offsets
        in the blocks order, else from the store when kept."""
        if self.order.name == "blocks":
            return int(self.offsets(np.array([self.num_documents]))[0])
        if self.plan_store is None:
            return int(self._lengths().sum(dtype=np.int64))

        def check(arrays: Any) -> int | None:
            record = arrays.get("tokens")
            if record is None or record.dtype != np.int64 or record.shape != (2,):
                return None
            tokens, digest = (int(v) for v in record)
            return tokens if tokens >= 0 and digest == _tokens_digest(tokens) else None

        def build() -> tuple[int, dict[str, np.ndarray]]:
            tokens = int(self._lengths().sum(dtype=np.int64))
            return tokens, _tokens_arrays(tokens)

        return stored_or_built(self.plan_store, self._identity(plan="tokens"), check, build)

    def layout(self, epoch: int) -> RowLayout:
        """The epoch's layout (the two most recent epochs are cached; a permutation
        layout is loaded from the plan store when it holds a consistent one, else built
        and saved to it)."""
        layout = self._layouts.get(epoch)
        if layout is None:
            store = self.plan_store
            if self.order.name == "blocks":
                layout = self._windowed_layout(epoch)
            elif store is None:
                layout = self._build_layout(epoch)
            else:

                def build() -> tuple[StreamLayout, dict[str, np.ndarray]]:
                    built = self._build_layout(epoch)
                    return built, plan_arrays(built, self.rows_per_epoch, self.rows_per_epoch)

                identity = self._identity(epoch=epoch)
                layout = stored_or_built(store, identity, self._stored_layout, build)
            if len(self._layouts) >= 2:
                self._layouts.pop(next(iter(self._layouts)))
            self._layouts[epoch] = layout
        return layout

    def _windowed_layout(self, epoch: int) -> RowLayout:
        windows = self.order.block_order(
            self.num_documents, self.offsets, seed=self.seed, epoch=epoch
        )
        plan = _SOURCE_PLAN.build_windows(
            windows, self.boundary_id is not None, self.block, epoch=epoch
        )
        return plan.layout

    def _build_layout(self, epoch: int) -> StreamLayout:
        order = global_document_order(self.num_documents, seed=self.seed, epoch=epoch)
        # A source's epoch is one row stream of its whole order: the global row plan,
        # read one row at a time by the mixture's schedule.
        layout = cast(
            StreamLayout,
            _SOURCE_PLAN.build(
                order, self._lengths(), self.boundary_id is not None, self.block, epoch=epoch
            ).layout,
        )
        if layout.stream_tokens != self.stream_tokens:
            # Only a token count loaded from the store can disagree with the lengths.
            if self.plan_store is not None:
                tokens = int(self._lengths().sum(dtype=np.int64))
                self.plan_store.save(self._identity(plan="tokens"), _tokens_arrays(tokens))
            raise CorpusFormatError(
                f"the plan store {self.plan_store!r} held a token count for source "
                f"{self.name!r} that its documents do not have ({self.stream_tokens} stream "
                f"tokens recorded, {layout.stream_tokens} now); the record has been rewritten: "
                "build the mixture again."
            )
        return layout

    def _stored_layout(self, arrays: Any) -> StreamLayout | None:
        """A loaded layout, or ``None`` when it is not consistent with this source."""
        loaded = plan_from_arrays(
            arrays,
            self.num_documents,
            lambda indices: sampled_lengths(self.documents, self._lengths_array, indices),
            self.boundary_id is not None,
        )
        if loaded is None:
            return None
        layout, rows, _ = loaded
        if layout.stream_tokens != self.stream_tokens or rows != self.rows_per_epoch:
            return None
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
            parts.append(self._read_epoch(epoch, start, take, document_ids))
            row += take
        if len(parts) == 1:
            return parts[0]
        return [np.concatenate(pieces) for pieces in zip(*parts, strict=True)]

    def _read_epoch(
        self, epoch: int, start: int, count: int, document_ids: bool
    ) -> list[np.ndarray]:
        """Rows ``[start, start + count)`` of one epoch, as :meth:`read` returns them."""
        rows = read_packed_rows(
            self.documents,
            self.layout(epoch),
            start,
            count,
            block=self.block,
            pad_id=self.pad_id,
            boundary_id=self.boundary_id,
            document_ids=document_ids,
        )
        part = [rows.rows, rows.mask]
        if rows.document_ids is not None and rows.position_ids is not None:
            part += [rows.document_ids, rows.position_ids]
        return part


def build_rows(
    sources: Sequence[MixtureSource],
    *,
    block: int,
    seed: int,
    boundary_id: int | None,
    pad_id: int,
    order: OrderOptions,
    plan_store: PlanStore | None = None,
) -> list[SourceRows]:
    """One :class:`SourceRows` per source (raises on the first empty source, or the
    first whose documents ``order``'s sizes do not fit)."""
    return [
        SourceRows(
            s,
            block=block,
            seed=seed,
            boundary_id=boundary_id,
            pad_id=pad_id,
            order=order,
            plan_store=plan_store,
        )
        for s in sources
    ]
