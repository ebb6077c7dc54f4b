"""fsspec plumbing shared by the remote backends: per-process filesystems and retries.

Fork safety: fsspec's async filesystems (s3fs, HTTP) own an event loop and
connections that must not cross a ``fork``. :func:`filesystem` builds one on first
use in each process (keyed by process id, reset in a forked child) and reuses it.

Faults: :func:`call_with_retries` retries transient errors (:func:`is_transient`:
connection resets, timeouts, HTTP 5xx, 408, 429/throttling) and bad bodies (a
``validate`` callback) with bounded exponential backoff and jitter, and raises
:class:`~mixle.errors.RemoteError` naming URL, shard and attempts.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from mixle._optional import PROTOCOL_EXTRAS, install_hint
from mixle.corpus.format.descriptors import exhaustion_error, is_descriptor_exhaustion
from mixle.errors import CorpusError, MissingBackendError, RemoteError

__all__ = [
    "DEFAULT_BACKOFF",
    "DEFAULT_RETRIES",
    "MAX_BACKOFF",
    "REMOTE_SCHEMES",
    "call_with_retries",
    "filesystem",
    "is_async",
    "is_transient",
]

T = TypeVar("T")

#: Attempts per remote operation (first try included).
DEFAULT_RETRIES = 5
#: First backoff delay in seconds; doubles per attempt up to :data:`MAX_BACKOFF`.
DEFAULT_BACKOFF = 0.2
MAX_BACKOFF = 10.0

REMOTE_SCHEMES = (*PROTOCOL_EXTRAS, "memory")

_FILESYSTEMS: dict[tuple[int, str, str], Any] = {}
_FS_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    # The parent's filesystems own an event loop and sockets that did not survive the
    # fork, and _FS_LOCK may have been held by a parent thread: start afresh.
    global _FS_LOCK
    _FILESYSTEMS.clear()
    _FS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _options_key(options: Mapping[str, Any]) -> str:
    try:
        return json.dumps(options, sort_keys=True, default=repr)
    except TypeError:
        return repr(sorted(options.items()))


def filesystem(protocol: str, storage_options: Mapping[str, Any] | None = None) -> Any:
    """Return this process's fsspec filesystem for ``protocol`` and ``storage_options``.

    Created on first use in each process (never inherited across ``fork``) and
    reused afterwards. Credentials come from ``storage_options`` or the backend's own
    configuration (environment, config files, instance metadata), never from a
    manifest.

    Raises
    ------
    MissingBackendError
        The optional package for ``protocol`` is not installed (says what to install).
    """
    options = dict(storage_options or {})
    key = (os.getpid(), protocol, _options_key(options))
    fs = _FILESYSTEMS.get(key)
    if fs is not None:
        return fs
    with _FS_LOCK:
        fs = _FILESYSTEMS.get(key)
        if fs is None:
            import fsspec

            hint = (
                install_hint(PROTOCOL_EXTRAS[protocol])
                if protocol in PROTOCOL_EXTRAS
                else f"install the fsspec backend for {protocol}://"
            )
            if protocol not in fsspec.registry and protocol not in fsspec.available_protocols():
                raise MissingBackendError(
                    f"no fsspec backend for {protocol}:// URLs: {hint} "
                    f"(Protocol not known: {protocol})."
                )
            try:
                fs = fsspec.filesystem(protocol, skip_instance_cache=True, **options)
            except ImportError as exc:
                raise MissingBackendError(
                    f"reading {protocol}:// URLs needs an optional package: {hint} ({exc})."
                ) from exc
            _FILESYSTEMS[key] = fs
    return fs


def is_async(fs: Any) -> bool:
    """Whether ``fs`` runs its requests on fsspec's event loop (s3fs, gcsfs, HTTP...)."""
    from fsspec.asyn import AsyncFileSystem

    return isinstance(fs, AsyncFileSystem) and bool(fs.async_impl)


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is worth retrying: network trouble, timeouts, 5xx, 408, 429.

    Missing files, permission errors, bad arguments and mixle's own errors are not.
    """
    if isinstance(exc, FileNotFoundError | PermissionError | IsADirectoryError | CorpusError):
        return False
    for attribute in ("status", "status_code", "code"):
        status = getattr(exc, attribute, None)
        if isinstance(status, int) and 100 <= status < 600:
            return status >= 500 or status in (408, 429)
    response = getattr(exc, "response", None)
    if isinstance(response, dict):  # botocore ClientError
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if isinstance(status, int):
            return status >= 500 or status in (408, 429)
    if isinstance(exc, OSError | TimeoutError | EOFError):
        return True
    module = type(exc).__module__.split(".", 1)[0]
    return module in ("aiohttp", "botocore", "urllib3", "requests", "aiobotocore")


@dataclass(frozen=True, slots=True)
class BadResult:
    """What a ``validate`` callback found wrong with a fetched result.

    ``reason`` is a sentence for the error message; ``error`` is the corpus error a
    result that is still wrong after every attempt means (``None``: a flaky store,
    reported as a plain :class:`RemoteError`).
    """

    reason: str
    error: type[CorpusError] | None = None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently a store retries a transient failure.

    ``attempts`` per operation (>= 1) and the first delay ``backoff`` in seconds;
    :meth:`call` is the one retry loop every store operation goes through (reads,
    downloads, uploads of publishing and ingest output).
    """

    attempts: int = DEFAULT_RETRIES
    backoff: float = DEFAULT_BACKOFF

    def call(
        self,
        operation: Callable[[], T],
        *,
        url: str,
        what: str,
        validate: Callable[[T], BadResult | None] | None = None,
    ) -> T:
        """:func:`call_with_retries` under this policy."""
        return call_with_retries(
            operation,
            url=url,
            what=what,
            attempts=self.attempts,
            backoff=self.backoff,
            validate=validate,
        )


def call_with_retries(
    operation: Callable[[], T],
    *,
    url: str,
    what: str,
    attempts: int = DEFAULT_RETRIES,
    backoff: float = DEFAULT_BACKOFF,
    validate: Callable[[T], BadResult | None] | None = None,
) -> T:
    """Run ``operation`` until it succeeds and ``validate`` finds nothing wrong.

    ``validate(result)`` returns ``None`` for a good result or a :class:`BadResult`
    saying what is wrong (short body, checksum mismatch); a bad result is retried like a
    transient error. Delays are ``backoff * 2**k`` (capped at :data:`MAX_BACKOFF`)
    with +-50 % jitter, so many workers do not retry in lockstep.

    Raises
    ------
    FileNotFoundError
        Immediately, unchanged (callers turn it into the right corpus error).
    RemoteError
        Every attempt failed, or the error is not transient; names ``url``, ``what``
        (the shard) and the number of attempts. Its ``result_error`` is the last bad
        result's ``error`` when the last attempt returned a bad result.
    """
    problem = ""
    result_error: type[CorpusError] | None = None
    for attempt in range(1, attempts + 1):
        try:
            result = operation()
        except (FileNotFoundError, CorpusError):
            raise  # callers map a missing file; mixle's own errors are final
        except Exception as exc:
            if is_descriptor_exhaustion(exc):  # not the network: retrying cannot help
                raise exhaustion_error(url, f" while reading {what}") from exc
            problem = f"{type(exc).__name__}: {exc}"
            result_error = None
            if not is_transient(exc):
                raise RemoteError(
                    f"{url} ({what}): {problem} (not retried; attempt {attempt} of {attempts})."
                ) from exc
        else:
            complaint = None if validate is None else validate(result)
            if complaint is None:
                return result
            problem, result_error = complaint.reason, complaint.error
        if attempt < attempts:
            delay = min(backoff * 2 ** (attempt - 1), MAX_BACKOFF)
            time.sleep(delay * random.uniform(0.5, 1.5))
    raise RemoteError(
        f"{url} ({what}): failed after {attempts} attempts; last: {problem}",
        result_error=result_error,
    )
