"""The one exception family of mixle.

Every error mixle raises on purpose derives from :class:`MixleError`. Corpus errors
(and argument errors, as before) derive from :class:`CorpusError`, so
``except CorpusError`` keeps catching every error of reading, writing, ingesting and
publishing corpora; checkpoint and model errors (:class:`CheckpointError`,
:class:`RevisionMismatchError`) derive from :class:`MixleError` directly. Each class
also subclasses the built-in exception it refines, so callers that already write
``except ValueError`` or ``except FileNotFoundError`` keep working.

Messages name the argument, file, shard, document and position involved and say
what was expected, e.g. "`block` must be a positive integer. Got 0 instead."
A URL in a message never shows its userinfo (``https://user:password@host`` reads
``https://***@host``): every error of the family passes its message through
:func:`redact_userinfo`, as does every other place mixle prints a location.
"""

from __future__ import annotations

import re

__all__ = [
    "ArgumentError",
    "ArgumentTypeError",
    "CheckpointError",
    "ChecksumError",
    "CorpusError",
    "CorpusExistsError",
    "CorpusFormatError",
    "CorpusNotFoundError",
    "DescriptorLimitError",
    "ExportError",
    "IngestError",
    "MissingBackendError",
    "MixleError",
    "OutputInUseError",
    "RemoteError",
    "RevisionMismatchError",
    "StateMismatchError",
    "TokenIdError",
    "UnsafePathError",
    "UnsupportedStoreOperation",
    "redact_userinfo",
]

# ``scheme://userinfo@``: userinfo runs up to the first ``@`` before any ``/``, ``?``,
# ``#`` or white space (RFC 3986: it cannot contain those unescaped).
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/?#@\s]+@")


def redact_userinfo(text: str) -> str:
    """``text`` with the userinfo (user name, password, token) of every URL in it
    replaced by ``***``: ``s3://key:secret@host/b`` becomes ``s3://***@host/b``.

    Idempotent; text without URLs is returned unchanged.
    """
    return _USERINFO.sub(r"\g<scheme>***@", text) if "://" in text else text


class MixleError(Exception):
    """Root of every error mixle raises deliberately.

    String arguments are stored with URL userinfo redacted (:func:`redact_userinfo`),
    so no message, ``repr`` or pickled copy of an error carries a password.
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*(redact_userinfo(arg) if isinstance(arg, str) else arg for arg in args))


class CorpusError(MixleError):
    """Root of the corpus errors (and of the argument errors): reading, writing,
    ingesting, publishing, exporting corpora."""


class ArgumentError(CorpusError, ValueError):
    """An argument has a value outside its documented domain."""


class ArgumentTypeError(ArgumentError, TypeError):
    """An argument has the wrong type (a bool or float where an integer is required).

    Subclasses both ``ValueError`` and ``TypeError`` so either ``except`` clause catches it.
    """


class TokenIdError(ArgumentError):
    """A token id is not an exact integer in the allowed range (names document and position).

    Attributes
    ----------
    document
        The index of the offending document when the raiser knows it, else ``None``.
    """

    def __init__(self, message: str, *, document: int | None = None) -> None:
        super().__init__(message)
        self.document = document


class StateMismatchError(ArgumentError):
    """A saved iterator state belongs to a different stream; the message lists each field."""


class CorpusNotFoundError(CorpusError, FileNotFoundError):
    """No corpus (no manifest) exists at the given location."""


class CorpusExistsError(CorpusError, FileExistsError):
    """A corpus already exists where a new one would be written (pass ``overwrite=True``)."""


class OutputInUseError(CorpusExistsError):
    """Another live process (named by pid) is writing the same ingest output."""


class DescriptorLimitError(CorpusError, OSError):
    """The open-file limit (``ulimit -n``) is too low; the message names it and the fix."""


class CorpusFormatError(CorpusError, ValueError):
    """A corpus file is malformed, truncated or inconsistent with its manifest."""


class UnsafePathError(CorpusFormatError):
    """A manifest names a shard file outside the corpus directory."""


class UnsupportedStoreOperation(CorpusError, NotImplementedError):
    """A store was asked for an operation its capability flags do not declare."""


class ChecksumError(CorpusFormatError):
    """A shard's content checksum does not match the manifest."""


class IngestError(CorpusError, ValueError):
    """An input record cannot be converted; names file, line or record and position."""


class ExportError(CorpusError, ValueError):
    """A corpus cannot be written in an export format (an id, a count or a length the
    target cannot hold); names the file, document and position, and what fits."""


class RemoteError(CorpusError, OSError):
    """An object-store read failed after every retry; names URL, shard and attempts.

    Attributes
    ----------
    result_error
        When every attempt returned a result that failed validation (rather than
        raising), the corpus error that result means (:class:`ChecksumError` for a
        checksum mismatch, :class:`CorpusFormatError` for a wrong size); else ``None``.
        Callers re-raise it instead of parsing the message.
    """

    def __init__(self, message: str, *, result_error: type[CorpusError] | None = None) -> None:
        super().__init__(message)
        self.result_error = result_error


class CheckpointError(MixleError, ValueError):
    """A training checkpoint is missing, corrupt or belongs to a different run."""


class RevisionMismatchError(MixleError, ValueError):
    """Gradient states computed at different model revisions cannot be combined."""


class MissingBackendError(CorpusError, ImportError):
    """An optional package needed for a storage backend is not installed (says what to install)."""
