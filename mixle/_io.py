"""Durable file I/O shared by the whole package: atomic writes, renames, file digests.

Every file mixle publishes (manifests, shard files, ingest progress records, metrics,
checkpoints) goes through these helpers so they agree on durability: the data is
fsynced before the rename that makes it visible, and the directory is fsynced after
it, so a crash leaves either the old file or the complete new one, never a torn one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from typing import IO, Any, Literal, overload

from mixle._file_checks import NAME_MAX, open_regular
from mixle.errors import CorpusError, CorpusFormatError

__all__ = [
    "atomic_write",
    "atomic_write_bytes",
    "bounded_name",
    "file_sha256",
    "fsync_directory",
    "fsync_file",
    "link_or_copy",
    "naming_file",
    "rename_durably",
    "temporary_name",
    "write_json_atomic",
]

# Bytes per read when a file is copied through Python (a link was impossible).
_COPY_BLOCK = 16 << 20


def fsync_directory(directory: str) -> None:
    """Flush a directory's entries (renames, creations) to disk.

    A no-op where the platform or file system refuses to open or fsync a directory.
    """
    with contextlib.suppress(OSError):
        fd = os.open(directory or ".", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def fsync_file(handle: IO[Any]) -> None:
    """Flush ``handle``'s Python buffer and fsync its file descriptor."""
    handle.flush()
    os.fsync(handle.fileno())


def bounded_name(name: str, room: int) -> str:
    """``name``, or a shorter name derived from it, leaving ``room`` bytes of ``NAME_MAX``.

    A name too long for ``room`` more bytes is cut and followed by ``-`` and 16 hex
    digits of the SHA-256 of the whole name, so two long names stay different.
    """
    encoded = os.fsencode(name)
    if len(encoded) + room <= NAME_MAX:
        return name
    digest = "-" + hashlib.sha256(encoded).hexdigest()[:16]
    return os.fsdecode(encoded[: NAME_MAX - room - len(digest)]) + digest


def temporary_name(path: str, *, unique: bool = False) -> str:
    """The hidden sibling ``<dir>/.<name>.tmp-<pid>`` under which ``path`` is written.

    ``unique`` puts a random tag in place of the pid (several machines may write the
    same file at once). The name always fits ``NAME_MAX`` (255 bytes): a ``name`` too
    long for the prefix and tag is shortened by :func:`bounded_name`.
    """
    directory, name = os.path.split(path)
    tag = f".tmp-{uuid.uuid4().hex}" if unique else f".tmp-{os.getpid()}"
    return os.path.join(directory, f".{bounded_name(name, 1 + len(tag))}{tag}")


def rename_atomically(source: str, target: str) -> None:
    """Rename ``source`` over ``target`` atomically, *without* fsyncing the directory.

    For callers that fsync the directory once after many renames (a shard's two
    files, a publish's moves), or whose rename need not survive a crash (a cache
    entry, a tree renamed away to be deleted, a unit that a crash only reruns). Use
    :func:`rename_durably` otherwise.
    """
    os.replace(source, target)


def swap_directory(staging: str, target: str) -> None:
    """Put the complete directory ``staging`` in place of ``target``, durably.

    The one staging-and-swap of mixle (publishing a local corpus, an export): a
    previous ``target`` is renamed aside (``<staging>-old``), ``staging`` renamed to
    ``target``, the parent fsynced, then the old tree deleted. A reader sees the old
    directory or the new one, never neither for longer than between two renames and
    never a partial one. ``staging`` must be a sibling of ``target`` (one filesystem).
    """
    if os.path.lexists(target):
        retired = f"{staging}-old"
        rename_atomically(target, retired)
        rename_atomically(staging, target)
        fsync_directory(os.path.dirname(target))
        shutil.rmtree(retired)
        return
    rename_durably(staging, target)


def rename_durably(source: str, target: str) -> None:
    """Rename ``source`` over ``target`` atomically, then fsync ``target``'s directory."""
    rename_atomically(source, target)
    fsync_directory(os.path.dirname(target))


@overload
def atomic_write(
    path: str, mode: Literal["w"], *, temporary: str | None = ...
) -> contextlib.AbstractContextManager[IO[str]]: ...


@overload
def atomic_write(
    path: str, mode: Literal["wb"] = ..., *, temporary: str | None = ...
) -> contextlib.AbstractContextManager[IO[bytes]]: ...


def atomic_write(
    path: str, mode: str = "wb", *, temporary: str | None = None
) -> contextlib.AbstractContextManager[IO[Any]]:
    """Context manager: write ``path`` whole or not at all.

    Yields a handle on a temporary sibling (``temporary``, default
    :func:`temporary_name`). On a clean exit the file is fsynced, renamed over ``path``
    and the directory fsynced; on an exception the temporary file is removed and
    ``path`` is untouched. Text mode writes UTF-8.
    """
    return _atomic_write(path, mode, temporary or temporary_name(path))


@contextlib.contextmanager
def _atomic_write(path: str, mode: str, temporary: str) -> Iterator[IO[Any]]:
    encoding = None if "b" in mode else "utf-8"
    try:
        with naming_file(path), open(temporary, mode, encoding=encoding) as handle:
            yield handle
            fsync_file(handle)
        rename_durably(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def atomic_write_bytes(path: str, data: bytes, *, temporary: str | None = None) -> None:
    """Write ``data`` to ``path`` atomically and durably (see :func:`atomic_write`)."""
    with atomic_write(path, "wb", temporary=temporary) as handle:
        handle.write(data)


def write_json_atomic(path: str, value: Any) -> None:
    """Write ``value`` as JSON (sorted keys) to ``path`` atomically and durably."""
    # dumps, not dump: json.dump encodes in pure Python, chunk by chunk (0.4 s for the
    # publish plan of a 1,000-unit commit); dumps uses the C encoder in one call.
    data = json.dumps(value, sort_keys=True)
    with atomic_write(path, "w") as handle:
        handle.write(data)


def file_sha256(path: str, error: type[Exception] = OSError) -> str:
    """Return the hex SHA-256 of the regular file at ``path`` (streamed, constant memory).

    Raises
    ------
    error
        The file is missing or unreadable, or is not a regular file (a FIFO or a
        device is refused before any read, so hashing never blocks or runs forever).
    """
    with open_regular(path, error) as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


@contextlib.contextmanager
def naming_file(path: str | Callable[[], str]) -> Iterator[None]:
    """Give an ``OSError`` raised in the block without a file name (``write``, ``fsync``:
    a full disk, a quota, an I/O error) the name ``path`` (or ``path()``, asked when the
    error happens), so "No space left on device" says which file. Same class and
    ``errno``; errors of mixle's own family and those that already name a file pass
    unchanged.
    """
    try:
        yield
    except OSError as exc:
        if isinstance(exc, CorpusError) or exc.filename is not None or exc.errno is None:
            raise
        name = path if isinstance(path, str) else path()
        raise OSError(exc.errno, exc.strerror or str(exc), name) from exc


def link_or_copy(
    source: str,
    target: str,
    *,
    size: int | None = None,
    error: type[Exception] = CorpusFormatError,
) -> str:
    """Make ``target`` a hard link to the regular file ``source``, or a copy of it.

    ``source`` is opened first (:func:`~mixle._file_checks.open_regular`: a FIFO, a
    device or, with ``size``, a file of another size is refused before anything is
    written). The link is made under a hidden temporary name and checked to be the
    opened file (same device and inode), else the opened file is copied (at most its
    size in bytes, fsynced); then the temporary is renamed over ``target``, so an
    existing ``target`` is replaced atomically and a rerun after a crash works. On any
    failure the temporary file is removed and ``target`` is untouched. Returns
    ``"link"`` or ``"copy"``.

    Raises
    ------
    error
        ``source`` is missing, not a regular file, of another size, or changed while
        being copied.
    OSError
        The copy or rename failed (a full disk): the message names ``target``.
    """
    directory = os.path.dirname(target)
    temporary = temporary_name(target, unique=True)
    with open_regular(source, error, size) as handle:
        opened = os.fstat(handle.fileno())
        try:
            with naming_file(target):
                how = _link_or_copy_open(handle, opened, source, temporary, error)
                os.replace(temporary, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
    fsync_directory(directory)
    return how


def _link_or_copy_open(
    handle: IO[bytes],
    opened: os.stat_result,
    source: str,
    temporary: str,
    error: type[Exception],
) -> str:
    """Link ``source`` (the file open as ``handle``) to ``temporary``, else copy it there."""
    try:
        os.link(source, temporary)
    except OSError:  # another file system, or links not supported: copy the bytes
        pass
    else:
        linked = os.stat(temporary)
        if (linked.st_dev, linked.st_ino) == (opened.st_dev, opened.st_ino):
            return "link"
        raise error(f"{source} was replaced while it was being linked; nothing was written.")
    remaining = opened.st_size
    with open(temporary, "xb") as out:
        while remaining:
            block = handle.read(min(remaining, _COPY_BLOCK))
            if not block:
                raise error(
                    f"{source}: ended {remaining} bytes before its size {opened.st_size}; "
                    "was it truncated while being copied?"
                )
            out.write(block)
            remaining -= len(block)
        fsync_file(out)
    return "copy"
