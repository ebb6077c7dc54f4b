"""How every ``mixle`` command reports a failure: one line on stderr, exit code 2.

Bad input (a missing or corrupt corpus, an unreadable input, a malformed
checkpoint, a wrong option) is reported as ``mixle COMMAND: error: TYPE: message``
on a single line, never as a traceback. Set ``MIXLE_DEBUG=1`` to get the traceback
of an unexpected error instead. URL userinfo (passwords, tokens) is redacted from
every line printed here, whatever raised the error, and from the locations that
commands print on success (:func:`echo`).
"""

from __future__ import annotations

import os
import sys

from mixle.errors import redact_userinfo

__all__ = ["EXIT_BAD_INPUT", "debugging", "echo", "report"]

#: Exit status of a command that failed on bad input (argparse's usage errors use 2 too).
EXIT_BAD_INPUT = 2
_MAX_MESSAGE = 2000


def debugging() -> bool:
    """Whether ``MIXLE_DEBUG`` asks for tracebacks of unexpected errors."""
    return os.environ.get("MIXLE_DEBUG", "") not in ("", "0")


def report(command: str, exc: BaseException) -> int:
    """Print ``exc`` as one line for ``mixle command`` (``mixle`` when ``command`` is
    empty) and return :data:`EXIT_BAD_INPUT`."""
    message = redact_userinfo(" ".join(str(exc).split())) or "no detail"
    if len(message) > _MAX_MESSAGE:
        message = message[:_MAX_MESSAGE] + "..."
    prefix = f"mixle {command}" if command else "mixle"
    print(f"{prefix}: error: {type(exc).__name__}: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def echo(text: str) -> None:
    """Print a command's result on stdout, URL userinfo redacted."""
    print(redact_userinfo(text))
