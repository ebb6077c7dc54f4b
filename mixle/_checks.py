"""Eager argument validation shared by every public entry point.

All checks raise subclasses of :class:`mixle.errors.ArgumentError` (a ``ValueError``)
with a message that names the argument, the constraint and the offending value.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from mixle.errors import ArgumentError, ArgumentTypeError, TokenIdError

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "as_token_ids",
    "exact_int",
    "nonnegative_int",
    "one_of",
    "positive_int",
]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def exact_int(name: str, value: Any) -> int:
    """Return ``value`` as a Python int if it is an integer (not a bool) in int64 range.

    Raises
    ------
    ArgumentTypeError
        ``value`` is a bool, a float (even an integral one), or not a number.
    ArgumentError
        ``value`` lies outside the int64 range.
    """
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        raise ArgumentTypeError(
            f"`{name}` must be an integer. Got {value!r} ({type(value).__name__}) instead."
        )
    result = int(value)
    if not INT64_MIN <= result <= INT64_MAX:
        raise ArgumentError(f"`{name}` must fit in a signed 64-bit integer. Got {result} instead.")
    return result


def nonnegative_int(name: str, value: Any) -> int:
    """Return ``value`` as an int, requiring ``value >= 0`` (see :func:`exact_int`)."""
    result = exact_int(name, value)
    if result < 0:
        raise ArgumentError(f"`{name}` must be a nonnegative integer. Got {result} instead.")
    return result


def positive_int(name: str, value: Any) -> int:
    """Return ``value`` as an int, requiring ``value > 0`` (see :func:`exact_int`)."""
    result = exact_int(name, value)
    if result <= 0:
        raise ArgumentError(f"`{name}` must be a positive integer. Got {result} instead.")
    return result


def _first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def as_token_ids(values: Any, what: str) -> np.ndarray:
    """Validate token ids and return them as a 1-D int64 array, never a lossy cast.

    Accepts any 1-D array-like of integers, or of floats whose values are finite exact
    integers. Integer inputs of up to 32 bits (and int64) are converted without any
    per-element check; uint64 and float inputs are range-checked first. The result
    shares memory with ``values`` when it already is an int64 array.

    Parameters
    ----------
    values
        The token ids.
    what
        How the error message names the input, e.g. ``"document 3"`` or ``"`token_ids`"``.

    Raises
    ------
    TokenIdError
        An id is fractional, non-finite or outside the int64 range; the message names
        ``what``, the position and the value.
    ArgumentTypeError
        ``values`` is not one-dimensional or is not numeric (e.g. strings, booleans).
    """
    array = np.asarray(values)
    if array.ndim != 1:
        raise ArgumentTypeError(
            f"{what} must be a 1-D sequence of token ids. Got an array of shape {array.shape} instead."
        )
    kind = array.dtype.kind
    if kind == "i" or (kind == "u" and array.dtype.itemsize < 8):
        return array.astype(np.int64, copy=False)
    if kind == "u":
        too_big = array > np.uint64(INT64_MAX)
        if too_big.any():
            pos = _first_bad(too_big)
            raise TokenIdError(
                f"{what} has token id {int(array[pos])} at position {pos}, outside the int64 range."
            )
        return array.astype(np.int64)
    if kind == "f":
        finite = np.isfinite(array)
        if not finite.all():
            pos = _first_bad(~finite)
            raise TokenIdError(
                f"{what} has non-finite token id {array[pos].item()!r} at position {pos}."
            )
        fractional = array != np.floor(array)
        if fractional.any():
            pos = _first_bad(fractional)
            raise TokenIdError(
                f"{what} has fractional token id {array[pos].item()!r} at position {pos}; "
                "token ids must be exact integers."
            )
        # float(2**63) is exactly representable; anything >= it does not fit in int64.
        out_of_range = (array >= float(2**63)) | (array < float(INT64_MIN))
        if out_of_range.any():
            pos = _first_bad(out_of_range)
            raise TokenIdError(
                f"{what} has token id {array[pos].item()!r} at position {pos}, outside the int64 range."
            )
        return array.astype(np.int64)
    if kind == "O":
        out = np.empty(array.shape[0], dtype=np.int64)
        for pos, item in enumerate(array):
            if isinstance(item, bool | np.bool_) or not isinstance(item, numbers.Real):
                raise TokenIdError(f"{what} has non-integer token id {item!r} at position {pos}.")
            if not isinstance(item, numbers.Integral):
                number = float(item)
                if not (np.isfinite(number) and number.is_integer()):
                    raise TokenIdError(
                        f"{what} has token id {item!r} at position {pos}; "
                        "token ids must be finite exact integers."
                    )
                item = int(number)
            if not INT64_MIN <= int(item) <= INT64_MAX:
                raise TokenIdError(
                    f"{what} has token id {int(item)} at position {pos}, outside the int64 range."
                )
            out[pos] = int(item)
        return out
    raise ArgumentTypeError(
        f"{what} must hold integer token ids. Got an array of dtype {array.dtype} instead."
    )


def one_of(name: str, value: Any, allowed: Sequence[Any]) -> Any:
    """Return ``value`` if it is one of ``allowed``.

    Raises
    ------
    ArgumentError
        ``value`` is not in ``allowed``; the message lists the allowed values.
    """
    if value not in allowed:
        raise ArgumentError(
            f"`{name}` must be one of {', '.join(map(str, allowed))}. Got {value!r} instead."
        )
    return value
