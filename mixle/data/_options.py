"""Stream options, validated once: how a stream is sharded and how it is packed.

``StreamingCorpus``, ``TokenStream`` and ``Mixture`` take the same arguments for the
same things — rank, world size and batch size; block, pad and boundary ids — and check
them here, in ``__post_init__``, with one message per constraint (the argument's name,
the constraint and the value). The objects are frozen: a stream's options never change
after it is built.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from mixle._checks import exact_int, nonnegative_int, positive_int
from mixle.data._order_windows import (
    BLOCK_ORDER_VERSIONS,
    BlockOrder,
    TokenOffsets,
    check_block_order_version,
    check_block_sizes,
)
from mixle.errors import ArgumentError, ArgumentTypeError

__all__ = [
    "DEFAULT_BLOCK_DOCUMENTS",
    "DEFAULT_WINDOW_BLOCKS",
    "LAYOUTS",
    "ORDERS",
    "OrderOptions",
    "PackOptions",
    "ShardOptions",
    "add_layout_name",
    "check_flag",
    "remove_layout_name",
]

#: The epoch orders a stream may use (see :class:`OrderOptions`).
ORDERS = ("blocks", "permutation")
#: Default documents per block and blocks per window of the ``"blocks"`` order (see
#: docs/streaming.md, "The epoch order", for the measurements behind them).
DEFAULT_BLOCK_DOCUMENTS = 4096
DEFAULT_WINDOW_BLOCKS = 64

#: The built-in row layouts of a stream (see :class:`ShardOptions`).
LAYOUTS = ("per-rank", "global")
# Every layout a stream may name: the built-ins and those registered with
# mixle.data._row_plan.register_layout, in registration order.
_LAYOUT_NAMES: list[str] = list(LAYOUTS)


def add_layout_name(name: str) -> None:
    """Accept ``name`` as a ``layout`` (called by ``register_layout``)."""
    if name not in _LAYOUT_NAMES:
        _LAYOUT_NAMES.append(name)


def remove_layout_name(name: str) -> None:
    """Stop accepting a registered ``layout`` name."""
    if name in _LAYOUT_NAMES and name not in LAYOUTS:
        _LAYOUT_NAMES.remove(name)


def check_flag(name: str, value: Any) -> bool:
    """``value`` when it is a bool.

    Raises
    ------
    ArgumentTypeError
        Anything else (``1`` and ``np.bool_`` included).
    """
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"`{name}` must be True or False. Got {value!r} instead.")
    return value


@dataclass(frozen=True, slots=True)
class ShardOptions:
    """How a stream is split over ranks and cut into batches.

    Attributes
    ----------
    rank, world_size
        ``0 <= rank < world_size``: this process's place among the data-parallel ranks.
    batch_size
        Positive: rows (or windows) per rank per step.
    layout
        One of :data:`LAYOUTS`. ``"per-rank"``: each rank has its own stream;
        ``"global"``: one stream for all ranks, cut into global batches of
        ``world_size * batch_size`` rows of which each rank reads its contiguous part.

    Raises
    ------
    ArgumentTypeError, ArgumentError
        A field is invalid (named, with the constraint and the value).
    """

    rank: int = 0
    world_size: int = 1
    batch_size: int = 1
    layout: str = "per-rank"

    def __post_init__(self) -> None:
        if self.layout not in _LAYOUT_NAMES:
            raise ArgumentError(
                f"`layout` must be one of {', '.join(map(repr, _LAYOUT_NAMES))}. "
                f"Got {self.layout!r} instead."
            )
        world_size = positive_int("world_size", self.world_size)
        rank = nonnegative_int("rank", self.rank)
        if rank >= world_size:
            raise ArgumentError(
                f"`rank` must be smaller than `world_size` ({world_size}). Got {rank} instead."
            )
        # Frozen: store the normalised ints (e.g. numpy integers become int).
        object.__setattr__(self, "world_size", world_size)
        object.__setattr__(self, "rank", rank)
        object.__setattr__(self, "batch_size", positive_int("batch_size", self.batch_size))

    @property
    def global_batch_size(self) -> int:
        """Rows of one step over all ranks: ``world_size * batch_size``."""
        return self.world_size * self.batch_size

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict (:meth:`from_dict` reads it back)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ShardOptions:
        """Options from :meth:`to_dict`'s dict (validated)."""
        return cls(**values)


@dataclass(frozen=True, slots=True)
class PackOptions:
    """How documents become rows.

    Attributes
    ----------
    block
        Positive: tokens of a row's input (a window's length).
    pad_id
        Exact int64 integer filling the rows past a stream's end (always masked).
    boundary_id
        Exact int64 integer inserted between consecutive documents, or ``None``.
    document_ids
        Whether batches carry every input token's document id and position in it.

    Raises
    ------
    ArgumentTypeError, ArgumentError
        A field is invalid (named, with the constraint and the value).
    """

    block: int
    pad_id: int = 0
    boundary_id: int | None = None
    document_ids: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "block", positive_int("block", self.block))
        object.__setattr__(self, "pad_id", exact_int("pad_id", self.pad_id))
        if self.boundary_id is not None:
            object.__setattr__(self, "boundary_id", exact_int("boundary_id", self.boundary_id))
        check_flag("document_ids", self.document_ids)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict (:meth:`from_dict` reads it back)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> PackOptions:
        """Options from :meth:`to_dict`'s dict (validated)."""
        return cls(**values)


@dataclass(frozen=True, slots=True)
class OrderOptions:
    """Which epoch order a stream packs, and the sizes of the ``"blocks"`` order.

    Attributes
    ----------
    name
        One of :data:`ORDERS`. ``"blocks"``: the hierarchical order of
        :class:`~mixle.data._order_windows.BlockOrder` (O(documents / block) plan,
        window by window); ``"permutation"``: the seed's ``RandomState`` permutation
        (:func:`~mixle.data._order.global_document_order`, O(documents)).
    block_documents, window_blocks
        ``"blocks"`` only: documents per block and blocks per window; ``None`` takes
        :data:`DEFAULT_BLOCK_DOCUMENTS` and :data:`DEFAULT_WINDOW_BLOCKS`, capped by
        the corpus. An explicit size must lie inside the corpus
        (:meth:`sizes` checks it against the document count).
    version
        ``"blocks"`` only: the order's version, one of
        :data:`~mixle.data._order_windows.BLOCK_ORDER_VERSIONS`; ``None`` takes the
        newest (what new streams use; a state saved with version 1 names it, and
        resumes with ``version=1``). Always ``None`` for ``"permutation"``.

    Raises
    ------
    ArgumentTypeError, ArgumentError
        A field is invalid, or a size is given with ``name="permutation"``.
    """

    name: str = "blocks"
    block_documents: int | None = None
    window_blocks: int | None = None
    version: int | None = None

    def __post_init__(self) -> None:
        if self.name not in ORDERS:
            raise ArgumentError(
                f"`order` must be one of {', '.join(map(repr, ORDERS))}. Got {self.name!r} instead."
            )
        for field in ("block_documents", "window_blocks", "version"):
            value = getattr(self, field)
            if value is None:
                continue
            label = "order_version" if field == "version" else field
            if self.name != "blocks":
                raise ArgumentError(
                    f"`{label}` applies only to order='blocks'; this stream uses "
                    f"order={self.name!r}. Leave it out, or pass order='blocks'."
                )
            object.__setattr__(self, field, positive_int(label, value))
        if self.name == "blocks":
            version = BLOCK_ORDER_VERSIONS[-1] if self.version is None else self.version
            object.__setattr__(self, "version", check_block_order_version(version))

    def sizes(self, num_documents: int) -> tuple[int, int]:
        """``(block_documents, window_blocks)`` for a corpus of ``num_documents``.

        Raises
        ------
        ArgumentError
            An explicit size exceeds the corpus (see
            :func:`~mixle.data._order_windows.check_block_sizes`).
        """
        documents = max(num_documents, 1)
        block = self.block_documents or min(DEFAULT_BLOCK_DOCUMENTS, documents)
        window = self.window_blocks or min(DEFAULT_WINDOW_BLOCKS, -(-documents // block))
        check_block_sizes(num_documents, block, window)
        return block, window

    def block_order(
        self, num_documents: int, offsets: TokenOffsets, *, seed: int, epoch: int
    ) -> BlockOrder:
        """The ``"blocks"`` order of one epoch of a corpus of ``num_documents`` whose
        cumulative token offsets ``offsets`` reads (sizes as :meth:`sizes`)."""
        block_documents, window_blocks = self.sizes(num_documents)
        return BlockOrder(
            num_documents,
            offsets,
            seed=seed,
            epoch=epoch,
            block_documents=block_documents,
            window_blocks=window_blocks,
            version=self.version or BLOCK_ORDER_VERSIONS[-1],
        )

    def identity(self, num_documents: int) -> dict[str, Any] | None:
        """The ``"order"`` field of a stream identity (``None`` for the permutation
        order, whose states have never carried one)."""
        if self.name == "permutation":
            return None
        block, window = self.sizes(num_documents)
        return {
            "name": self.name,
            "version": self.version,
            "block_documents": block,
            "window_blocks": window,
        }

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict (:meth:`from_dict` reads it back)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> OrderOptions:
        """Options from :meth:`to_dict`'s dict (validated)."""
        return cls(**values)
