"""The arguments ``mixle show`` and ``mixle where`` share: RUN_OR_CORPUS and, for a
corpus or mixture given on the command line, ``mixle train``'s stream flags (the data
section of :class:`~mixle.train.TrainConfig` and ``--seed``, built from their
declarations), turned into one :class:`~mixle.provenance.RunSpec`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from mixle.cli._flags import add_section_flags, section_defaults, section_values
from mixle.errors import ArgumentError

if TYPE_CHECKING:
    from mixle.provenance import RunSpec

__all__ = ["add_run_arguments", "add_stream_flags", "run_spec"]

_SEED = ("seed",)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the RUN_OR_CORPUS positional (optional: ``--mixture`` may name the stream)."""
    parser.add_argument(
        "location",
        nargs="?",
        default=None,
        metavar="RUN_OR_CORPUS",
        help="a mixle train --checkpoint-dir (or one checkpoint in it), or a corpus",
    )


def add_stream_flags(parser: argparse.ArgumentParser) -> None:
    """Add ``mixle train``'s stream flags and ``--seed`` in their own group."""
    from mixle.train import DataConfig, RuntimeConfig

    stream = parser.add_argument_group(
        "stream of a CORPUS (mixle train's flags and defaults; a run records its own)"
    )
    add_section_flags(stream, DataConfig)
    add_section_flags(stream, RuntimeConfig, _SEED)


def _given(values: dict[str, Any], defaults: dict[str, Any]) -> list[str]:
    """The options whose value is not their flag's default (typed by the user)."""
    return [name for name, value in values.items() if value != defaults[name]]


def run_spec(args: argparse.Namespace, *, world_size: int | None) -> RunSpec:
    """The :class:`~mixle.provenance.RunSpec` the parsed arguments name: a run (which
    takes no stream flags: :func:`~mixle.provenance.resolve_run` refuses them), or a
    corpus or ``--mixture`` with the stream flags typed and ``world_size`` ranks.

    Raises
    ------
    ArgumentError
        Both or neither of RUN_OR_CORPUS and ``--mixture`` were given, or what
        :func:`~mixle.provenance.resolve_run` refuses.
    """
    from mixle.provenance import resolve_run
    from mixle.train import DataConfig, RuntimeConfig

    if (args.location is None) == (args.mixture is None):
        raise ArgumentError("give either RUN_OR_CORPUS or --mixture MIX.toml (exactly one).")
    stream = section_values(args, DataConfig)
    seed = section_values(args, RuntimeConfig, _SEED)
    given = _given(stream, section_defaults(DataConfig))
    given += _given(seed, section_defaults(RuntimeConfig, _SEED))
    data = None
    if given and given != ["seed"]:
        data = DataConfig(**{**stream, "corpus": args.location or args.mixture})
    return resolve_run(
        args.location,
        data=data,
        seed=seed["seed"] if "seed" in given else None,
        world_size=world_size,
    )
