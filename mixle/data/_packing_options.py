"""How documents are packed into rows: concatenate-and-chunk (the default) or best-fit.

:class:`PackingOptions` is the ``packing`` argument of a stream, validated once:
``"concatenate"`` packs the order as one stream cut into rows (documents are cut at
row edges); ``"best_fit"`` packs windows of ``window_documents`` consecutive positions
of the order by best-fit decreasing, so only documents longer than a row are cut
(:mod:`~mixle.data._plan_best_fit`; global layout only).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from mixle._checks import positive_int
from mixle.data._options import check_flag
from mixle.errors import ArgumentError, ArgumentTypeError

__all__ = ["DEFAULT_WINDOW_DOCUMENTS", "PACKINGS", "PackingOptions", "as_packing"]

#: The packings a stream accepts.
PACKINGS = ("concatenate", "best_fit")
#: Documents per best-fit window by default: a window of 16K documents plans in ~6 ms
#: compiled (~75 ms in pure Python) and already cuts only the documents longer than a
#: row on the benchmark mixes (docs/benchmarks.md).
DEFAULT_WINDOW_DOCUMENTS = 16384
# The packing's version in stream identities: a change to the rows bumps it.
_BEST_FIT_VERSION = 1


@dataclass(frozen=True, slots=True)
class PackingOptions:
    """How a stream packs its documents.

    Attributes
    ----------
    name
        One of :data:`PACKINGS`.
    window_documents
        Best-fit: documents per packing window (positive).
    truncate
        Best-fit: cut documents longer than a row to one row (the rest is dropped and
        counted) instead of splitting them over rows.

    Raises
    ------
    ArgumentTypeError, ArgumentError
        A field is invalid (named, with the accepted values).
    """

    name: str = "concatenate"
    window_documents: int = DEFAULT_WINDOW_DOCUMENTS
    truncate: bool = False

    def __post_init__(self) -> None:
        if self.name not in PACKINGS:
            raise ArgumentError(
                f"`packing` must be one of {', '.join(map(repr, PACKINGS))}. "
                f"Got {self.name!r} instead."
            )
        object.__setattr__(
            self, "window_documents", positive_int("window_documents", self.window_documents)
        )
        check_flag("truncate", self.truncate)

    @property
    def is_best_fit(self) -> bool:
        return self.name == "best_fit"

    def identity(self) -> dict[str, Any]:
        """The packing as a stream identity records it."""
        return {"version": _BEST_FIT_VERSION, **asdict(self)}

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict (:meth:`from_dict` reads it back)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> PackingOptions:
        """Options from :meth:`to_dict`'s dict (validated)."""
        return cls(**values)


def as_packing(value: str | PackingOptions) -> PackingOptions:
    """``value`` as :class:`PackingOptions` (a name gets the defaults).

    Raises
    ------
    ArgumentTypeError
        ``value`` is neither a name nor options.
    ArgumentError
        An unknown name.
    """
    if isinstance(value, PackingOptions):
        return value
    if not isinstance(value, str):
        raise ArgumentTypeError(
            f"`packing` must be one of {', '.join(map(repr, PACKINGS))} or PackingOptions. "
            f"Got {type(value).__name__} instead."
        )
    return PackingOptions(value)
