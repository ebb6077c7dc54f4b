"""``WhereOptions``: the options of ``mixle where`` itself, declared once.

The stream options of a corpus given on the command line are ``mixle train``'s own
(:class:`~mixle.train.DataConfig` and ``--seed``), and ``--world-size`` is ``mixle
show``'s (:class:`~mixle.provenance.ShowOptions`), so both commands read a corpus the
same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from mixle._checks import positive_int
from mixle._options import check_options, option
from mixle.train._config import _flag, _optional_str

__all__ = ["WhereOptions"]


@dataclass(frozen=True, slots=True, kw_only=True)
class WhereOptions:
    """What ``mixle where`` searches and how it prints.

    ``epochs`` searches epochs ``0 .. epochs - 1`` (``None``: those a run's steps
    reached; 1 for a corpus); ``source`` is the mixture source of a document index (and
    limits an origin or id lookup to it); ``json`` prints
    :meth:`~mixle.provenance.WhereReport.to_dict`.
    """

    epochs: int | None = option(
        None,
        check=positive_int,
        parse=int,
        metavar="E",
        help="search epochs 0..E-1 (default: those a run reached; 1 for a CORPUS)",
    )
    source: str | None = option(
        None,
        check=_optional_str,
        metavar="NAME",
        help="the mixture source of a document index (limits an origin/id lookup to it)",
    )
    json: bool = option(False, check=_flag, help="print the report as JSON (stable for tools)")

    def __post_init__(self) -> None:
        check_options(self)
