"""``raises``: the one assertion helper of the conformance suites (no pytest needed)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["raises"]


@contextlib.contextmanager
def raises(expected: type[BaseException] | tuple[type[BaseException], ...]) -> Iterator[None]:
    """Assert that the block raises ``expected`` (a subclass counts); other errors propagate."""
    try:
        yield
    except expected:
        return
    raise AssertionError(f"expected {expected!r} to be raised; nothing was raised.")
