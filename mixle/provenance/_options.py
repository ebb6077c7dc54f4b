"""``ShowOptions``: the options of ``mixle show`` itself, declared once.

The stream options of a corpus given on the command line are not declared here: they
are ``mixle train``'s own (:class:`~mixle.train.DataConfig` and the ``seed`` of
:class:`~mixle.train.RuntimeConfig`), so ``mixle show CORPUS --block 128`` means what
``mixle train CORPUS --block 128`` means.
"""

from __future__ import annotations

from dataclasses import dataclass

from mixle._checks import nonnegative_int, positive_int
from mixle._options import check_options, option
from mixle.train._config import _flag, _optional_str

__all__ = ["ShowOptions"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ShowOptions:
    """What ``mixle show`` prints: which step and rank, how text is decoded, the format.

    ``step`` counts as ``mixle train`` does (step 1 is the first batch); ``rank``
    ``None`` shows every rank; ``world_size`` is the number of ranks of a corpus given
    with stream options (``None``: 1; a run records its own); ``tokenizer`` is ``"bytes"`` or a
    ``tokenizer.json`` (``None``: no text); ``max_chars`` cuts each printed text
    (``0``: whole); ``json`` prints :meth:`~mixle.provenance.StepReport.to_dict`.
    """

    step: int | None = option(
        None, check=positive_int, parse=int, metavar="N", help="the step to show (1: the first)"
    )
    rank: int | None = option(
        None, check=nonnegative_int, parse=int, metavar="R", help="only this rank (default: all)"
    )
    world_size: int | None = option(
        None,
        check=positive_int,
        parse=int,
        help="ranks of the run, with a CORPUS (default 1; a run records its own)",
    )
    tokenizer: str | None = option(
        None,
        check=_optional_str,
        metavar="bytes|PATH",
        help="decode the documents' tokens: 'bytes' (one id per byte) or a tokenizer.json",
    )
    max_chars: int = option(
        160, check=nonnegative_int, help="cut each text to this many characters (0: whole; 160)"
    )
    json: bool = option(False, check=_flag, help="print the report as JSON (stable for tools)")

    def __post_init__(self) -> None:
        check_options(self)
