"""Mixture files: a TOML (read with :mod:`tomllib`) or JSON description of a mixture.

::

    block_schedule = "2048:0.9,8192"  # optional, before the first table: context
                                      # length per phase (BlockSchedule.parse syntax)

    [[source]]
    name = "code"
    path = "code"          # a corpus directory (relative to this file) or a URL
    weight = 0.3
    max_epochs = 4         # optional

    [[source]]
    name = "text"
    path = "text"
    weight = 0.7

    [[phase]]              # optional: from global row 2000 on, these weights
    start_row = 2000
    weights = { code = 0.5, text = 0.5 }

    [schedule]             # optional: the mixing rule (default: "exact")
    rule = "temperature"   # weights x size ** alpha
    alpha = 0.3

The block schedule may also be a list of tables, one per phase (``[[block_schedule]]``
with ``block``, ``until`` (absent on the last) and optional ``batch_size``): see
:class:`~mixle.data.BlockSchedule`; errors name the file and the phase. JSON holds the
same structure (``{"source": [...], "phase": [...], "schedule": {...},
"block_schedule": ...}``). Every key is checked: an unknown one is an error naming it, where it is and the keys allowed.
The file is read through :func:`mixle._file_checks.read_regular` (a regular file of at
most :data:`MAX_BYTES`: a FIFO or a link to a device is refused, never waited on or
read without end), JSON through :func:`mixle._safe_json.loads_bounded`, and nesting
too deep for the TOML parser is reported like any other syntax error.
Opening the corpora is the caller's business (the data layer knows no files).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mixle._checks import nonnegative_int
from mixle._file_checks import read_regular
from mixle._safe_json import loads_bounded
from mixle.data._block_schedule import BlockPhase, BlockSchedule
from mixle.data._mixing_rule import ExactSchedule, MixingRule, rule_from_table
from mixle.data._mixture import MixturePhase
from mixle.data._mixture_source import (
    check_max_epochs,
    check_unique_names,
    check_weight,
    check_weight_sum,
)
from mixle.data._temperature_schedule import TemperatureSchedule
from mixle.errors import ArgumentError, ArgumentTypeError, CorpusNotFoundError

__all__ = ["MAX_BYTES", "MixtureSpec", "SourceSpec", "read_mixture_file"]

#: Largest mixture file read (a mixture of thousands of sources is a few hundred KiB).
MAX_BYTES = 16 << 20

_TOP_KEYS = ("source", "phase", "schedule", "block_schedule")
# The mixing rules a file may name in [schedule] (rule = name, then the rule's keywords).
RULES = {rule.name: rule for rule in (ExactSchedule, TemperatureSchedule)}
_SOURCE_KEYS = ("name", "path", "weight", "max_epochs")
_PHASE_KEYS = ("start_row", "weights")
_BLOCK_PHASE_KEYS = ("block", "until", "batch_size")


@dataclass(frozen=True, slots=True)
class SourceSpec:
    """One ``[[source]]`` entry: ``location`` is a URL or an absolute path."""

    name: str
    location: str
    weight: float
    max_epochs: float | None


@dataclass(frozen=True, slots=True)
class MixtureSpec:
    """A parsed mixture file (``schedule``: the ``[schedule]`` rule, ``block_schedule``
    the context length per phase; each ``None`` if absent)."""

    path: str
    sources: tuple[SourceSpec, ...]
    phases: tuple[MixturePhase, ...]
    schedule: MixingRule | None = None
    block_schedule: BlockSchedule | None = None


def _check_keys(table: Any, allowed: tuple[str, ...], where: str) -> Mapping[str, Any]:
    if not isinstance(table, Mapping):
        raise ArgumentTypeError(f"{where} must be a table. Got {type(table).__name__} instead.")
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise ArgumentError(
            f"{where} has unknown key(s) {', '.join(map(repr, unknown))}; the keys allowed "
            f"are {', '.join(allowed)}."
        )
    return table


def _location(value: Any, base: str, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ArgumentTypeError(f"{where} needs `path`: a corpus directory or URL. Got {value!r}.")
    if "://" in value or os.path.isabs(value):
        return value
    return os.path.normpath(os.path.join(base, value))


def read_mixture_file(path: str) -> MixtureSpec:
    """Parse and validate a mixture file (``.json`` as JSON, anything else as TOML).

    Raises
    ------
    CorpusNotFoundError
        No such file (a ``FileNotFoundError``).
    ArgumentError, ArgumentTypeError
        Not a regular file of at most :data:`MAX_BYTES`, not valid TOML/JSON (nesting
        too deep included), an unknown key, a missing name/path/weight, a bad weight or
        weights whose sum overflows, two names equal once NFC-normalised, an unknown
        mixing rule or a bad parameter of it (each naming the file and the source,
        phase or ``[schedule]``).
    """
    if not os.path.exists(path):
        raise CorpusNotFoundError(f"mixture file {path} does not exist.")
    raw = read_regular(path, ArgumentError, limit=MAX_BYTES)
    if path.endswith(".json"):
        data = loads_bounded(raw, f"mixture file {path}", ArgumentError)
    else:
        try:
            data = tomllib.loads(raw.decode())
        except (ValueError, UnicodeDecodeError) as exc:
            raise ArgumentError(f"{path}: not a valid mixture file: {exc}") from None
        except RecursionError:
            raise ArgumentError(
                f"{path}: not a valid mixture file: arrays or tables nested too deeply."
            ) from None
    top = _check_keys(data, _TOP_KEYS, f"{path}")
    base = os.path.dirname(os.path.abspath(path))
    entries = top.get("source", [])
    if not isinstance(entries, list) or not entries:
        raise ArgumentError(f"{path}: a mixture needs at least one [[source]] entry.")
    sources = []
    for index, entry in enumerate(entries, 1):
        table = _check_keys(entry, _SOURCE_KEYS, f"{path}: source {index}")
        name = table.get("name")
        if not isinstance(name, str) or not name:
            raise ArgumentError(f"{path}: source {index} needs a `name` (a non-empty string).")
        where = f"{path}: source {name!r}"
        if "weight" not in table:
            raise ArgumentError(f"{where} needs a `weight` (its share of trained tokens).")
        weight = check_weight(table["weight"], where)
        check_max_epochs(table.get("max_epochs"), where)
        sources.append(
            SourceSpec(
                name, _location(table.get("path"), base, where), weight, table.get("max_epochs")
            )
        )
    check_unique_names((s.name for s in sources), path)
    check_weight_sum([s.weight for s in sources], f"{path}: the sources")
    names = [s.name for s in sources]
    entries = top.get("phase", [])
    if not isinstance(entries, list):
        raise ArgumentTypeError(f"{path}: `phase` must be a list of [[phase]] tables.")
    phases = []
    for index, entry in enumerate(entries, 1):
        table = _check_keys(entry, _PHASE_KEYS, f"{path}: phase {index}")
        if "start_row" not in table or "weights" not in table:
            raise ArgumentError(f"{path}: phase {index} needs `start_row` and `weights`.")
        start = nonnegative_int(f"{path}: start_row of phase {index}", table["start_row"])
        weights = table["weights"]
        if not isinstance(weights, Mapping):
            raise ArgumentTypeError(
                f"{path}: `weights` of phase {index} must map source names to weights."
            )
        for name, weight in weights.items():
            if name not in names:
                raise ArgumentError(
                    f"{path}: phase {index} names unknown source {name!a}; the sources are "
                    f"{', '.join(map(ascii, names))}."
                )
            check_weight(weight, f"{path}: source {name!r} in phase {index}")
        check_weight_sum(list(map(float, weights.values())), f"{path}: phase {index}")
        phases.append(MixturePhase(start, dict(weights)))
    schedule = None
    if "schedule" in top:
        table = top["schedule"]
        if not isinstance(table, Mapping):
            raise ArgumentTypeError(f"{path}: [schedule] must be a table (rule = ..., ...).")
        schedule = rule_from_table(table, RULES, f"{path}: [schedule]")
    block_schedule = (
        _block_schedule(top["block_schedule"], path) if "block_schedule" in top else None
    )
    return MixtureSpec(path, tuple(sources), tuple(phases), schedule, block_schedule)


def _block_schedule(value: Any, path: str) -> BlockSchedule:
    """The file's ``block_schedule``: a string to parse, or a list of phase tables."""
    try:
        if isinstance(value, str):
            return BlockSchedule.parse(value)
        if not isinstance(value, list):
            raise ArgumentTypeError(
                '`block_schedule` must be a string (e.g. "2048:0.9,8192") or a list of '
                f"[[block_schedule]] tables. Got {type(value).__name__} instead."
            )
        phases = []
        for index, entry in enumerate(value):
            table = _check_keys(entry, _BLOCK_PHASE_KEYS, f"block schedule phase {index}")
            if "block" not in table:
                raise ArgumentError(f"block schedule phase {index} needs a `block`.")
            phases.append(BlockPhase(table["block"], table.get("until"), table.get("batch_size")))
        return BlockSchedule(phases)
    except ArgumentError as exc:  # ArgumentTypeError included
        raise type(exc)(f"{path}: {exc}") from None
