"""Options declared once: each field carries its flag, help, choices and check.

A *section* is a frozen dataclass whose fields are declared with :func:`option`: the
default, the command-line flag (derived from the name unless given), its help text,
the accepted values, the check that validates (and normalizes) a value, and how a
command line spells one. Its ``__post_init__`` calls :func:`check_options`, which runs
those checks in declaration order. ``mixle.cli._flags`` builds the argparse flags from
the same declarations, so adding an option is adding one field.

A *sectioned config* (:class:`~mixle.corpus.IngestOptions`,
:class:`~mixle.train.TrainConfig`) subclasses :class:`Sectioned`: a frozen dataclass
whose fields are sections, declared with :func:`section`. It also takes the flat
keywords of every section's options (``TrainConfig(corpus, d_model=64)``) and answers
flat attribute access (``config.d_model`` is ``config.model.d_model``), so code written
against the flat classes keeps working.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from mixle._checks import one_of

__all__ = [
    "Check",
    "Choices",
    "Option",
    "Section",
    "Sectioned",
    "byte_size",
    "check_options",
    "command_default",
    "option",
    "option_fields",
    "section",
    "section_fields",
]

#: ``(name, value) -> normalized value``, raising ``ArgumentError`` naming ``name``.
Check = Callable[[str, Any], Any]
#: The accepted values, or a function returning them (asked when they are needed).
Choices = tuple[str, ...] | Callable[[], tuple[str, ...]]

_OPTION = "mixle.option"
_SECTION = "mixle.section"
_SAME = object()  # command_default: the field's own default

SectionedT = TypeVar("SectionedT", bound="Sectioned")


@dataclass(frozen=True, slots=True)
class Option:
    """What a field declared with :func:`option` says about itself (its metadata)."""

    help: str | Callable[[], str]
    flag: str | bool
    choices: Choices | None
    check: Check | None
    parse: Callable[[str], Any] | None
    metavar: str | None
    command_default: Any
    negation: str | None
    checks_choices: bool

    def flag_for(self, name: str) -> str | None:
        """The flag of field ``name`` (``--name-with-dashes`` unless declared), or ``None``."""
        if self.flag is True:
            return "--" + name.replace("_", "-")
        return self.flag or None

    def allowed(self) -> tuple[str, ...] | None:
        """The accepted values, or ``None`` when any value of the type is."""
        return self.choices() if callable(self.choices) else self.choices

    def help_text(self) -> str:
        """The ``--help`` text (a callable help is asked when the parser is built)."""
        return self.help() if callable(self.help) else self.help


def option(
    default: Any = dataclasses.MISSING,
    *,
    help: str | Callable[[], str],
    flag: str | bool = True,
    choices: Choices | None = None,
    check: Check | None = None,
    parse: Callable[[str], Any] | None = None,
    metavar: str | None = None,
    command_default: Any = _SAME,
    negation: str | None = None,
    checks_choices: bool = True,
) -> Any:
    """Declare an option field of a section.

    Parameters
    ----------
    default
        The library default (none: the option is required).
    help
        The ``--help`` text of its flag, or a callable returning it when the parser is
        built (for a text listing what is registered, like the input formats).
    flag
        ``True``: ``--`` and the field name with dashes; a string: that flag; ``False``:
        not a flag of its own (the command sets it another way).
    choices
        The accepted values: the flag's argparse choices and, unless
        ``checks_choices=False`` (the values are checked later, where they are used),
        checked by :func:`check_options`.
    check
        Validates and normalizes a value (``None`` skips it when the default is ``None``).
    parse
        How a command line spells a value (an argparse ``type``); default: ``int`` or
        ``float`` for such defaults, else the string itself. ``True``/``False``
        defaults are switches that flip the default.
    metavar
        The value's name in ``--help``.
    command_default
        The flag's default when it differs from the library's, or a function giving it
        when the parser is built (e.g. the CPUs for workers).
    negation
        For an optional switch (default ``None``): the flag that sets ``False``; the
        two flags exclude each other and ``help`` goes with the negation.
    """
    spec = Option(
        help=help,
        flag=flag,
        choices=choices,
        check=check,
        parse=parse,
        metavar=metavar,
        command_default=command_default,
        negation=negation,
        checks_choices=checks_choices,
    )
    return dataclasses.field(default=default, metadata={_OPTION: spec})


def option_fields(cls: type) -> Iterator[tuple[dataclasses.Field[Any], Option]]:
    """The fields of section ``cls`` declared with :func:`option`, in order, with their spec."""
    for field in dataclasses.fields(cls):
        spec = field.metadata.get(_OPTION)
        if isinstance(spec, Option):
            yield field, spec


def command_default(field: dataclasses.Field[Any], spec: Option) -> Any:
    """The default of ``field``'s flag: ``spec.command_default`` (called, if a function)
    or the field's own."""
    if spec.command_default is _SAME:
        return field.default
    given = spec.command_default
    return given() if callable(given) else given


def check_options(section: object) -> None:
    """Check every option of ``section`` in declaration order; store normalized values.

    A value equal to a ``None`` default is not checked. Call from ``__post_init__``.

    Raises
    ------
    ArgumentError, ArgumentTypeError
        A value is not one of its choices or fails its check (the message names it).
    """
    for field, spec in option_fields(type(section)):
        value = getattr(section, field.name)
        if value is None and field.default is None:
            continue
        allowed = spec.allowed()
        if allowed is not None and spec.checks_choices:
            one_of(field.name, value, allowed)
        if spec.check is not None:
            object.__setattr__(section, field.name, spec.check(field.name, value))


@dataclass(frozen=True, slots=True)
class Section:
    """What a field declared with :func:`section` says: its class and ``--help`` title."""

    cls: type
    title: str


def section(cls: type, title: str) -> Any:
    """Declare a section field of a :class:`Sectioned` config (its options' ``--help`` group)."""
    return dataclasses.field(metadata={_SECTION: Section(cls, title)})


def section_fields(cls: type) -> Iterator[tuple[str, Section]]:
    """The sections of sectioned config ``cls``, in order: ``(attribute, Section)``."""
    for field in dataclasses.fields(cls):
        spec = field.metadata.get(_SECTION)
        if isinstance(spec, Section):
            yield field.name, spec


@dataclass(frozen=True, slots=True)
class _Layout:
    """Where the flat names of a sectioned config live: ``{name: section attribute}``."""

    options: Mapping[str, str]  # the sections' fields, in flat order
    members: Mapping[str, str]  # those and the sections' public properties


_LAYOUTS: dict[type, _Layout] = {}


def _layout(cls: type) -> _Layout:
    """The (memoized) layout of sectioned config ``cls``.

    Raises
    ------
    TypeError
        A section does not check its options, or a name is declared twice.
    """
    layout = _LAYOUTS.get(cls)
    if layout is not None:
        return layout
    options: dict[str, str] = {}
    members: dict[str, str] = {}
    for attribute, spec in section_fields(cls):
        if not hasattr(spec.cls, "__post_init__"):
            raise TypeError(f"{spec.cls.__name__} must check its options in __post_init__.")
        names = _names_of(spec.cls)
        options.update(dict.fromkeys(names, attribute))
        for name in [*names, *(n for n, v in vars(spec.cls).items() if isinstance(v, property))]:
            if name in members or hasattr(cls, name):
                raise TypeError(f"{cls.__name__}: {name!r} is declared twice.")
            members[name] = attribute
    layout = _LAYOUTS[cls] = _Layout(options, members)
    return layout


class Sectioned:
    """Base of a frozen dataclass whose fields are sections (see module doc).

    Not slotted: a slotted frozen dataclass's ``__setattr__`` fails with a
    ``TypeError`` instead of ``FrozenInstanceError`` for a name that is not a field,
    and the flat option names are not fields.

    ``Config(*values, section=Section(...), name=value, ...)``: positional values and
    flat keywords fill the options in flat order (the sections' fields, in order);
    a section given whole may not also get its options as keywords. Every section
    validates itself, then ``__post_init__`` (when defined) checks across sections.
    """

    __slots__ = ()

    def __init__(self, *values: Any, **keywords: Any) -> None:
        cls = type(self)
        flat = list(_layout(cls).options)
        if len(values) > len(flat):
            raise TypeError(f"{cls.__name__}() takes at most {len(flat)} positional options.")
        given = dict(zip(flat, values, strict=False))
        for name, value in keywords.items():
            if name in given:
                raise TypeError(f"{cls.__name__}() got multiple values for {name!r}.")
            given[name] = value
        for attribute, spec in section_fields(cls):
            own = {name: given.pop(name) for name in _names_of(spec.cls) if name in given}
            if attribute not in given:
                object.__setattr__(self, attribute, spec.cls(**own))
                continue
            whole = given.pop(attribute)
            if own:
                raise TypeError(
                    f"{cls.__name__}() got `{attribute}` and its option(s) {', '.join(own)}: "
                    f"give them in the {spec.cls.__name__} or as keywords, not both."
                )
            if not isinstance(whole, spec.cls):
                raise TypeError(
                    f"`{attribute}` must be a {spec.cls.__name__}. Got {type(whole).__name__}."
                )
            object.__setattr__(self, attribute, whole)
        if given:
            raise TypeError(
                f"{cls.__name__}() got an unexpected keyword argument {next(iter(given))!r}"
            )
        post_init = getattr(self, "__post_init__", None)
        if post_init is not None:
            post_init()

    def __getattr__(self, name: str) -> Any:
        # Reached only for names that are not attributes: the flat options.
        owner = _layout(type(self)).members.get(name)
        if owner is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(object.__getattribute__(self, owner), name)

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """The flat option names, in flat order (the sections' fields, in order)."""
        return tuple(_layout(cls).options)

    def flat(self) -> dict[str, Any]:
        """Every option by its flat name, in flat order (values are not copied)."""
        return {
            name: getattr(getattr(self, attribute), name)
            for name, attribute in _layout(type(self)).options.items()
        }

    def replace(self: SectionedT, **changes: Any) -> SectionedT:
        """A copy with ``changes`` (flat options or whole sections) applied, validated again."""
        values = self.flat()
        for attribute, spec in section_fields(type(self)):
            if attribute in changes:
                for name in _names_of(spec.cls):
                    values.pop(name)
        return type(self)(**{**values, **changes})


def _names_of(cls: type) -> tuple[str, ...]:
    return tuple(field.name for field in dataclasses.fields(cls))


_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
}


def byte_size(text: str) -> int:
    """Parse ``256MiB``, ``1GB``, ``4096`` into bytes (an argparse ``type``).

    Raises
    ------
    argparse.ArgumentTypeError
        Not a positive whole number of bytes, KB, MB, GB, KiB, MiB or GiB.
    """
    lowered = text.strip().lower()
    number = lowered.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = lowered[len(number) :]
    if unit not in _SIZE_UNITS or not number.isdigit() or int(number) <= 0:
        raise argparse.ArgumentTypeError(
            f"expected a positive size like 268435456, 256MiB or 1GB. Got {text!r} instead."
        )
    return int(number) * _SIZE_UNITS[unit]
