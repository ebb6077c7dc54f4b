"""How every ``mixle`` command reports a failure: one line on stderr, exit code 2.

Bad input (a missing or corrupt corpus, an unreadable input, a malformed
checkpoint, a wrong option) is reported as ``mixle COMMAND: error: TYPE: message``
on a single line, never as a traceback. Set ``MIXLE_DEBUG=1`` to get the traceback
of an unexpected error instead.
"""

from __future__ import annotations

import os
import sys

__all__ = ["EXIT_BAD_INPUT", "debugging", "report"]

#: Exit status of a command that failed on bad input (argparse's usage errors use 2 too).
EXIT_BAD_INPUT = 2
_MAX_MESSAGE = 2000


def debugging() -> bool:
    """Whether ``MIXLE_DEBUG`` asks for tracebacks of unexpected errors."""
    return os.environ.get("MIXLE_DEBUG", "") not in ("", "0")


def report(command: str, exc: BaseException) -> int:
    """Print ``exc`` as one line for ``mixle command`` and return :data:`EXIT_BAD_INPUT`."""
    message = " ".join(str(exc).split()) or "no detail"
    if len(message) > _MAX_MESSAGE:
        message = message[:_MAX_MESSAGE] + "..."
    print(f"mixle {command}: error: {type(exc).__name__}: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT
