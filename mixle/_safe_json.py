"""Parse JSON from untrusted files with bounded nesting depth and number size.

The standard library's parser recurses once per nesting level (a 100k-deep
``[[[[...`` raises a raw ``RecursionError``) and converts integer literals of any
length (Python refuses those over 4300 digits with a raw ``ValueError``, and
anything shorter still costs quadratic time). Every JSON document mixle reads from
disk or the network (``manifest.json``, zarr metadata, checkpoint ``meta.json``)
goes through :func:`loads_bounded`, which rejects such input up front and reports
every failure as the caller's own error class, naming the file.

Guarantees: depth at most :data:`MAX_DEPTH`, integer literals at most
:data:`MAX_INT_DIGITS` digits, float literals at most :data:`MAX_FLOAT_CHARS`
characters and finite; duplicate keys and the non-JSON constants ``NaN`` /
``Infinity`` are rejected. Cost: one vectorised pass over the bytes plus the parse.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np

__all__ = ["MAX_DEPTH", "MAX_FLOAT_CHARS", "MAX_INT_DIGITS", "json_depth", "loads_bounded"]

#: Deepest nesting of arrays/objects accepted (mixle's own files nest < 10 deep).
MAX_DEPTH = 64
#: Longest integer literal accepted: 2**64 has 20 digits; leave room for a sign.
MAX_INT_DIGITS = 40
#: Longest float literal accepted.
MAX_FLOAT_CHARS = 64
# A JSON string literal (escapes included); removed before counting brackets.
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


class _Reject(Exception):
    """Raised inside the parser hooks; converted to the caller's error class."""


def json_depth(data: bytes) -> int:
    """Maximum bracket nesting of ``data`` outside string literals (O(n), vectorised).

    Safe on any bytes (it parses nothing), so a caller can refuse a deep document
    before handing it to a recursive parser."""
    stripped = np.frombuffer(_STRING.sub(b'""', data), dtype=np.uint8)
    if stripped.size == 0:
        return 0
    step = np.zeros(stripped.shape[0], dtype=np.int64)
    step[(stripped == ord("[")) | (stripped == ord("{"))] = 1
    step[(stripped == ord("]")) | (stripped == ord("}"))] = -1
    return int(np.cumsum(step).max(initial=0))


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Reject(f"an integer of {len(text)} digits (at most {MAX_INT_DIGITS} are accepted)")
    return int(text)


def _parse_float(text: str) -> float:
    if len(text) > MAX_FLOAT_CHARS:
        raise _Reject(f"a number literal of {len(text)} characters")
    value = float(text)
    if not math.isfinite(value):
        raise _Reject(f"the number {text[:20]} overflows a float")
    return value


def _reject_constant(name: str) -> Any:
    raise _Reject(f"the non-JSON constant {name}")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _Reject(f"the repeated key {key!r}")
        result[key] = value
    return result


def loads_bounded(data: bytes | str, where: str, error: type[Exception]) -> Any:
    """Parse ``data`` (UTF-8 bytes or text) read from ``where``; return the value.

    Parameters
    ----------
    data
        The JSON document.
    where
        File or URL named in error messages.
    error
        Exception class raised on any failure (e.g. ``CorpusFormatError``,
        ``CheckpointError``); it is called with one message argument.

    Raises
    ------
    error
        Not UTF-8, not JSON, nested deeper than :data:`MAX_DEPTH`, a number literal
        over the size bounds, a non-finite number, a repeated key or ``NaN``.
        Never ``RecursionError`` or the interpreter's integer-size ``ValueError``.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    depth = json_depth(raw)
    if depth > MAX_DEPTH:
        raise error(f"{where}: JSON nested {depth} levels deep (at most {MAX_DEPTH} accepted).")
    try:
        return json.loads(
            raw.decode("utf-8"),
            object_pairs_hook=_no_duplicates,
            parse_constant=_reject_constant,
            parse_int=_parse_int,
            parse_float=_parse_float,
        )
    except _Reject as exc:
        raise error(f"{where}: not accepted as JSON: it contains {exc}.") from None
    except UnicodeDecodeError as exc:
        raise error(f"{where}: not valid UTF-8 JSON (byte {exc.start}: {exc.reason}).") from None
    except json.JSONDecodeError as exc:
        raise error(
            f"{where}: not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}."
        ) from None
    except (RecursionError, ValueError, OverflowError) as exc:  # belt and braces
        raise error(f"{where}: not valid JSON ({type(exc).__name__}: {exc}).") from None
