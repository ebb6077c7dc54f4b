"""Guards of an ingest's output: one writer at a time, and a safe rejects path.

:func:`hold_output` takes an exclusive ``flock`` on ``OUTPUT/.mixle-ingest.lock``
(non-blocking) for the whole local part of an ingest, so a second ingest into the
same output, with or without ``overwrite``, fails at once with
:class:`~mixle.errors.OutputInUseError` naming the live writer's pid, and never
deletes or resumes that writer's work. The kernel drops the lock when its holder
dies, so a killed ingest leaves nothing that blocks ``--resume``.

:func:`check_rejects_path` validates ``--rejects`` before any work: it must be a
writable file location that is none of the inputs and none of the corpus files.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator, Sequence

from mixle.errors import ArgumentError, CorpusExistsError, OutputInUseError

__all__ = ["LOCK_NAME", "check_rejects_path", "hold_output"]

LOCK_NAME = ".mixle-ingest.lock"


def _holder(path: str) -> str:
    with contextlib.suppress(OSError, ValueError), open(path, encoding="ascii") as handle:
        return str(int(handle.read().strip()))
    return "unknown"


def _acquire(out: str) -> int:
    path = os.path.join(out, LOCK_NAME)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise OutputInUseError(
                f"{out} is in use by pid {_holder(path)} (another ingest is writing it); "
                "wait for it to finish, or stop it and run again with --resume."
            ) from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:  # else the previous holder removed the file between our open and lock
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode("ascii"))
            return fd
        os.close(fd)


@contextlib.contextmanager
def hold_output(out: str) -> Iterator[None]:
    """Hold the exclusive writer lock of the ingest output directory ``out``.

    Creates ``out`` if needed (and removes it again if it is left empty).

    Raises
    ------
    OutputInUseError
        Another live process holds the lock; the message names its pid.
    CorpusExistsError
        ``out`` exists and is not a directory.
    """
    if os.path.exists(out) and not os.path.isdir(out):
        raise CorpusExistsError(f"{out} exists and is not a directory.")
    created = not os.path.exists(out)
    os.makedirs(out, exist_ok=True)
    fd = _acquire(out)
    try:
        yield
    finally:
        # Unlink while still holding the lock: a waiter that opened the old file
        # sees the inode change and retries on a fresh one.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(out, LOCK_NAME))
        os.close(fd)
        if created:
            with contextlib.suppress(OSError):
                os.rmdir(out)


def check_rejects_path(rejects: str, inputs: Sequence[str], out: str) -> str:
    """Return the absolute ``rejects`` path after checking it can safely be written.

    Raises
    ------
    ArgumentError
        ``rejects`` is a directory, its directory does not exist or is not writable,
        an existing file there is not writable, or it names an input file or a file
        the ingest itself writes (manifest, shards, work directory).
    """
    path = os.path.abspath(rejects)
    real = os.path.realpath(path)
    if os.path.isdir(path):
        raise ArgumentError(f"`rejects` must be a file path. {path} is a directory.")
    for item in inputs:
        if item and "://" not in item and os.path.realpath(item) == real:
            raise ArgumentError(f"`rejects` must not be an input file; {path} is the input {item}.")
    out_real = os.path.realpath(out)
    if (
        os.path.dirname(real) == out_real
        and (
            os.path.basename(real) in ("manifest.json", LOCK_NAME)
            or os.path.basename(real).startswith("shard-")
        )
    ) or real.startswith(os.path.join(out_real, ".mixle-ingest") + os.sep):
        raise ArgumentError(f"`rejects` must not be a file the ingest writes. Got {path}.")
    parent = os.path.dirname(real)
    if parent != out_real or os.path.exists(out):
        if not os.path.isdir(parent):
            raise ArgumentError(f"`rejects`: the directory {parent} does not exist.")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise ArgumentError(f"`rejects`: the directory {parent} is not writable.")
    if os.path.exists(real) and not os.access(real, os.W_OK):
        raise ArgumentError(f"`rejects`: {path} exists and is not writable.")
    return path
