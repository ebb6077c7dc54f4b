"""Command-line flags built from declared options (:mod:`mixle._options`).

:func:`add_option_flags` adds one argument group per section of a sectioned config
(``IngestOptions``, ``TrainConfig``), titled by the section, and one flag per option
field: its flag name, help, choices, metavar, how a value is parsed and its default
all come from the field. :func:`option_values` reads them back as the config's flat
keywords. So a new option field is a new flag, with no edit here or in a command.
:func:`add_section_flags` and :func:`section_values` do the same for one section
class, or some of its fields (``mixle show`` takes ``mixle train``'s stream options
and its ``--seed``, not its model or checkpoint flags).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Collection
from typing import Any

from mixle._options import Option, command_default, option_fields, section_fields

__all__ = [
    "add_option_flags",
    "add_section_flags",
    "option_values",
    "section_defaults",
    "section_values",
]


def add_option_flags(parser: argparse.ArgumentParser, config: type) -> None:
    """Add the flags of every option of sectioned config class ``config`` to ``parser``."""
    for _, section in section_fields(config):
        add_section_flags(parser.add_argument_group(section.title), section.cls)


def add_section_flags(
    group: argparse._ActionsContainer, cls: type, names: Collection[str] | None = None
) -> None:
    """Add to ``group`` the flags of section class ``cls``'s options (only those named
    in ``names``, when given)."""
    for field, spec in option_fields(cls):
        flag = spec.flag_for(field.name)
        if flag is not None and (names is None or field.name in names):
            _add_flag(group, flag, field, spec)


def _add_flag(
    group: argparse._ActionsContainer, flag: str, field: dataclasses.Field[Any], spec: Option
) -> None:
    default = command_default(field, spec)
    if spec.negation is not None:  # an optional switch: --x, --no-x or neither (None)
        pair = group.add_mutually_exclusive_group()
        pair.add_argument(flag, dest=field.name, action="store_true", default=default)
        pair.add_argument(
            spec.negation, dest=field.name, action="store_false", help=spec.help_text()
        )
    elif isinstance(default, bool):  # a switch flips the default
        action = "store_false" if default else "store_true"
        group.add_argument(
            flag, dest=field.name, action=action, default=default, help=spec.help_text()
        )
    else:
        group.add_argument(
            flag,
            dest=field.name,
            type=spec.parse or _parse_like(default),
            choices=spec.allowed(),
            default=default,
            metavar=spec.metavar,
            help=spec.help_text(),
        )


def _parse_like(default: Any) -> Callable[[str], Any]:
    """``int`` or ``float`` for such a default, else the string as given."""
    return type(default) if type(default) in (int, float) else str


def option_values(args: argparse.Namespace, config: type) -> dict[str, Any]:
    """The values of ``config``'s option flags in ``args``, by flat option name."""
    return {
        field.name: getattr(args, field.name)
        for _, section in section_fields(config)
        for field, spec in option_fields(section.cls)
        if spec.flag_for(field.name) is not None
    }


def section_values(
    args: argparse.Namespace, cls: type, names: Collection[str] | None = None
) -> dict[str, Any]:
    """The values in ``args`` of the flags :func:`add_section_flags` added for ``cls``."""
    return {
        field.name: getattr(args, field.name)
        for field, spec in option_fields(cls)
        if spec.flag_for(field.name) is not None and (names is None or field.name in names)
    }


def section_defaults(cls: type, names: Collection[str] | None = None) -> dict[str, Any]:
    """The defaults of the flags :func:`add_section_flags` adds for ``cls`` (what a
    command line that does not type them gives)."""
    return {
        field.name: command_default(field, spec)
        for field, spec in option_fields(cls)
        if spec.flag_for(field.name) is not None and (names is None or field.name in names)
    }
