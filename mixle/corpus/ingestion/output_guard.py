"""Guards of an ingest's output: who may write it at once, and a safe rejects path.

:func:`hold_output` takes a ``flock`` on ``OUTPUT/.mixle-ingest.lock`` (non-blocking)
for the whole local part of every ingest entry point: exclusive for a local ingest,
the coordinator of a Dask or plan-file run, an ``--overwrite`` and the commit;
shared for the tasks of a task array, which run side by side by design. So a second,
different ingest into the same output, with or without ``overwrite``, fails at once
with :class:`~mixle.errors.OutputInUseError` naming a live writer's pid, and never
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
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from mixle._file_checks import check_name_lengths
from mixle.corpus.storage.open import is_url
from mixle.errors import ArgumentError, CorpusExistsError, OutputInUseError

if TYPE_CHECKING:
    from mixle.corpus.ingestion.area import OutputArea

__all__ = ["LOCK_NAME", "check_output_names", "check_rejects_path", "claim_output", "hold_output"]

LOCK_NAME = ".mixle-ingest.lock"


# Locks this process holds: real output path -> [descriptor, shared?, depth].
_HELD: dict[str, list[Any]] = {}
_HELD_LOCK = threading.Lock()


def _holder(path: str) -> str:
    with contextlib.suppress(OSError, ValueError), open(path, encoding="ascii") as handle:
        return str(int(handle.read().strip()))
    return "unknown"


def _acquire(out: str, shared: bool) -> int:
    path = os.path.join(out, LOCK_NAME)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise OutputInUseError(
                f"{out} is in use by pid {_holder(path)} (another ingest, or a task of a task "
                "array, is writing it); wait for it to finish, or stop it and run again with "
                "--resume."
            ) from None
        if _same_file(path, fd):  # else the previous holder removed it between open and lock
            if not shared:
                os.ftruncate(fd, 0)
            # Fixed width, so tasks that hold it together overwrite each other's pid whole.
            os.pwrite(fd, f"{os.getpid():>10}\n".encode("ascii"), 0)
            return fd
        os.close(fd)


def _same_file(path: str, fd: int) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _release(out: str, fd: int, shared: bool) -> None:
    """Drop the lock; the last holder removes the lock file (while it still holds it
    exclusively, so a waiter that opened the old file sees the inode change and retries
    on a fresh one)."""
    path = os.path.join(out, LOCK_NAME)
    try:
        if shared:  # other tasks may still hold it: remove the file only if none does
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if _same_file(path, fd):
            os.unlink(path)
    except OSError:
        pass  # another task still holds it; the last one removes the file
    finally:
        os.close(fd)


@contextlib.contextmanager
def hold_output(out: str, *, shared: bool = False) -> Iterator[None]:
    """Hold the writer lock of the ingest output directory ``out``.

    Exclusive (the default) for whatever may create, replace or delete the output's
    files as a whole: a local ingest, the coordinator of ``--executor dask`` or of a
    plan file run in a local pool, an ``--overwrite``, the commit. ``shared`` for the
    tasks of a task array (``--task i/n``, :func:`~mixle.corpus.run_unit`): many
    tasks hold it at once, each converting its own units of one plan (the plan id
    recorded in the output refuses units of any other plan), and none of them can
    run while an exclusive holder does, or the other way round. Re-entrant within a
    process (the commit at the end of a dask run, units run in-process).

    Creates ``out`` if needed (and removes it again if it is left empty).

    Raises
    ------
    OutputInUseError
        Another live process holds the lock in a conflicting mode (the message names
        a pid), or this process holds it shared and asks for it exclusively.
    CorpusExistsError
        ``out`` exists and is not a directory.
    """
    if os.path.exists(out) and not os.path.isdir(out):
        raise CorpusExistsError(f"{out} exists and is not a directory.")
    created = not os.path.exists(out)
    os.makedirs(out, exist_ok=True)
    key = os.path.realpath(out)
    with _HELD_LOCK:  # threads of one process share its hold (units run side by side)
        held = _HELD.get(key)
        if held is not None:
            if held[1] and not shared:
                raise OutputInUseError(
                    f"{out} is in use by this process's own task (pid {os.getpid()}); commit "
                    "or overwrite it after the task has finished."
                )
            held[2] += 1
        else:
            _HELD[key] = [_acquire(out, shared), shared, 1]
    try:
        yield
    finally:
        with _HELD_LOCK:
            held = _HELD[key]
            held[2] -= 1
            last = held[2] == 0
            if last:  # the last user in this process drops the lock
                del _HELD[key]
                _release(out, held[0], held[1])
        if last and created:
            with contextlib.suppress(OSError):
                os.rmdir(out)


@contextlib.contextmanager
def claim_output(area: OutputArea, *, shared: bool = False) -> Iterator[None]:
    """:func:`hold_output` for a distributed ingest's output: the local directory's
    lock, or nothing for an object-store URL (which has no lock; there the plan id
    recorded in the output is the only claim, see docs/ingest.md)."""
    if area.is_url:
        yield
        return
    with hold_output(area.output, shared=shared):
        yield


def check_output_names(
    output: str,
    rejects: str | os.PathLike[str] | None = None,
    staging_dir: str | os.PathLike[str] | None = None,
) -> None:
    """Refuse, before any work, an output, rejects or staging path with a name longer
    than ``NAME_MAX`` (the file system would refuse it only when the file is made).

    Raises
    ------
    ArgumentError
        One of the names is too long (the argument is named).
    """
    if not is_url(output):
        check_name_lengths(os.path.abspath(output), "output")
    if rejects is not None and not is_url(os.fspath(rejects)):
        check_name_lengths(os.path.abspath(rejects), "rejects")
    if staging_dir is not None:
        check_name_lengths(os.path.abspath(staging_dir), "staging_dir")


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
