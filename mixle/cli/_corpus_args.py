"""Arguments shared by the commands that write a corpus (``ingest``, ``merge``).

One place for what both parse the same way: the subcommand's parser, the positional
``PATH...`` list split into inputs and the output, ``--storage-option KEY=VALUE``
(fsspec options for URLs), ``--overwrite`` and ``--quiet``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from mixle._safe_json import MAX_DEPTH, json_depth

__all__ = [
    "add_command",
    "add_common",
    "merge_storage_options",
    "parse_storage_option",
    "split_paths",
    "storage_options",
    "usage_error",
]

_STORAGE_HELP = (
    "an fsspec option for URL inputs and outputs, repeatable; the value is JSON when it "
    "parses (numbers, true, objects), else a string, and a dotted KEY nests "
    "(e.g. --storage-option client_kwargs.endpoint_url=http://127.0.0.1:9000 "
    "--storage-option anon=false); options merge deeply, and a key given two values is "
    "refused. Credentials come from the usual cloud configuration"
)


def add_command(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    *,
    help_text: str,
    usage: str,
    description: str,
    epilog: str,
    paths_help: str,
) -> argparse.ArgumentParser:
    """Add subcommand ``name`` with its help texts and the positional ``PATH...`` list."""
    parser = subparsers.add_parser(
        name,
        help=help_text,
        usage=usage,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help=paths_help)
    return parser


def add_storage_option(parser: argparse.ArgumentParser, *, help_text: str = _STORAGE_HELP) -> None:
    """Add ``--storage-option KEY=VALUE`` (repeatable; read back by :func:`storage_options`)."""
    parser.add_argument(
        "--storage-option",
        action="append",
        type=parse_storage_option,
        default=[],
        metavar="KEY=VALUE",
        dest="storage_option",
        help=help_text,
    )


def add_common(parser: argparse.ArgumentParser, *, overwrite_help: str, quiet_help: str) -> None:
    """Add ``--storage-option``, ``--overwrite`` and ``--quiet``/``-q``."""
    add_storage_option(parser)
    parser.add_argument("--overwrite", action="store_true", help=overwrite_help)
    parser.add_argument("--quiet", "-q", action="store_true", help=quiet_help)


def parse_storage_option(text: str) -> tuple[list[str], Any]:
    """Parse ``KEY=VALUE`` into ``(key path, value)`` (an argparse ``type``).

    The value is JSON when it parses (a JSON object with a repeated key is refused:
    one of the two would be lost), else the string itself. Key path and JSON value
    together nest at most :data:`~mixle._safe_json.MAX_DEPTH` levels, so nothing
    downstream recurses without bound.

    Raises
    ------
    argparse.ArgumentTypeError
        No ``=``, an empty key (or key part), nesting deeper than the bound, or a
        JSON object with a repeated key; the message names the key.
    """
    key, sep, raw = text.partition("=")
    parts = key.split(".")
    if not sep or not all(part.strip() for part in parts):
        raise argparse.ArgumentTypeError(
            f"expected KEY=VALUE (e.g. anon=true or client_kwargs.endpoint_url=http://host:9000). "
            f"Got {_shorten(text)!r} instead."
        )
    name = _shorten(key)
    depth = len(parts) + json_depth(raw.encode("utf-8", "surrogatepass"))
    if depth > MAX_DEPTH:
        raise argparse.ArgumentTypeError(
            f"{name}: key and value nest {depth} levels deep; at most {MAX_DEPTH} are accepted."
        )
    try:
        value: Any = json.loads(raw, object_pairs_hook=_unique_keys)
    except _RepeatedKey as exc:
        raise argparse.ArgumentTypeError(
            f"{name}: the JSON object gives {exc} twice; give each key once."
        ) from None
    except ValueError:  # not JSON (or a number Python will not convert): a string
        value = raw
    return [part.strip() for part in parts], value


class _RepeatedKey(Exception):
    """A JSON object in a ``--storage-option`` value repeats a key."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _RepeatedKey(repr(key))
        result[key] = value
    return result


def _shorten(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters for a one-line message."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def merge_storage_options(given: list[tuple[list[str], Any]]) -> dict[str, Any] | None:
    """The parsed ``--storage-option`` values as one nested dict; ``None`` when none given.

    Options merge deeply and without loss, whatever their order: a JSON object value
    adds its keys to the group of the same name (``client_kwargs.endpoint_url=...``
    and ``client_kwargs={"region_name": ...}`` give both), and the same value given
    twice is kept once. Anything that would drop a value is refused, in both orders:
    a key given a value and nested keys, or two different values.

    Raises
    ------
    ArgumentError
        A conflict; the message names the key and both values.
    """
    if not given:
        return None
    options: dict[str, Any] = {}
    for parts, value in given:
        _merge_option(options, parts, value, ".".join(parts))
    return options


def _merge_option(options: dict[str, Any], parts: list[str], value: Any, given: str) -> None:
    """Merge ``value`` at key path ``parts`` into ``options`` (see merge_storage_options)."""
    level = options
    for depth, part in enumerate(parts[:-1]):
        group = level.setdefault(part, {})
        if not isinstance(group, dict):
            _conflict(given, parts[: depth + 1], group, "nested keys")
        level = group
    _merge_value(level, parts[-1], value, parts, given)


def _merge_value(level: dict[str, Any], key: str, value: Any, path: list[str], given: str) -> None:
    if key not in level:
        level[key] = _copy(value)
        return
    old = level[key]
    if isinstance(old, dict) and isinstance(value, dict):
        for name, item in value.items():
            _merge_value(old, name, item, [*path, name], given)
    elif not _same(old, value):
        _conflict(given, path, old, repr(value))


def _conflict(given: str, path: list[str], old: Any, new: str) -> None:
    from mixle.errors import ArgumentError

    held = f"nested options {sorted(old)}" if isinstance(old, dict) else f"a value ({old!r})"
    raise ArgumentError(
        f"--storage-option {_shorten(given)}: {_shorten('.'.join(path))} already has {held}; "
        f"{_shorten(new)} would replace it. Give each key once."
    )


def _copy(value: Any) -> Any:
    return {key: _copy(item) for key, item in value.items()} if isinstance(value, dict) else value


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON values (``true`` is not ``1``)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def storage_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """The ``--storage-option`` values of ``args`` merged (see :func:`merge_storage_options`)."""
    return merge_storage_options(args.storage_option)


def split_paths(paths: list[str], *, inputs: int) -> tuple[list[str], str] | None:
    """``(inputs, output)`` when ``paths`` holds at least ``inputs`` inputs and the
    output, else ``None``."""
    if len(paths) < inputs + 1:
        return None
    *sources, output = paths
    return sources, output


def usage_error(command: str, problem: str) -> int:
    """Print ``problem`` as ``mixle COMMAND: error: ...`` and return exit status 2."""
    print(f"mixle {command}: error: {problem}", file=sys.stderr)
    return 2
