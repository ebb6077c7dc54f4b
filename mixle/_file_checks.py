"""Checks made on a file before any byte of it is read: kind, size, name, location.

A corpus or an ingest input may come from an untrusted archive, so a path that
should name a regular file can name a FIFO (``open`` blocks forever), a device
(``/dev/zero`` reads forever), a directory, or a symlink out of the corpus. Every
reader opens files through :func:`open_regular` (non-blocking open, then ``fstat``
on the open descriptor, so the check and the read concern the same file), learns
sizes through :func:`regular_size`, and resolves shard names through
:func:`contained_path` (:func:`contained_shard` adds the kind and size check a
command makes before it links or copies a shard). Before anything is deleted or
replaced, :func:`check_replaceable` compares real paths: a target that is, holds or
lies inside a location that must be kept is refused. Shard names are restricted to :data:`SAFE_NAME`, which
also keeps them free of ``%``-escapes, so a name means the same file locally and
as a URL path segment.
"""

from __future__ import annotations

import io
import os
import re
import stat
from collections.abc import Iterable

from mixle.errors import ArgumentError, UnsafePathError

__all__ = [
    "NAME_MAX",
    "SAFE_NAME",
    "check_name_lengths",
    "check_replaceable",
    "contained_path",
    "contained_shard",
    "is_safe_name",
    "open_regular",
    "read_regular",
    "read_regular_files",
    "regular_size",
    "regular_stat",
]

#: A shard file name: ASCII letters, digits, ``.``, ``_`` and ``-``, starting with a
#: letter or digit, at most 255 characters, and no ``..``. Nothing here is special
#: in a path, a shell or a URL (no ``/``, ``\\``, ``%``, ``:``, ``~``, NUL).
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")

#: Longest file name, in bytes, of the file systems mixle writes to (Linux, macOS).
NAME_MAX = 255

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def is_safe_name(name: object) -> bool:
    """Whether ``name`` is a string matching :data:`SAFE_NAME` without ``..``."""
    return isinstance(name, str) and SAFE_NAME.fullmatch(name) is not None and ".." not in name


def _kind(mode: int) -> str:
    return next((text for test, text in _KINDS if test(mode)), "not a regular file")


def _check_mode(mode: int, path: str, error: type[Exception]) -> None:
    if not stat.S_ISREG(mode):
        raise error(f"{path}: is {_kind(mode)}, expected a regular file.")


def regular_stat(path: str, error: type[Exception]) -> os.stat_result:
    """Return ``os.stat(path)`` (symlinks followed) of a regular file, without opening it.

    Raises
    ------
    error
        The file is missing or unreadable, or is not a regular file.
    """
    try:
        info = os.stat(path)
    except OSError as exc:
        raise error(f"{path}: cannot read ({exc.strerror or exc}).") from exc
    _check_mode(info.st_mode, path, error)
    return info


def regular_size(path: str, error: type[Exception]) -> int:
    """Return the size of the regular file at ``path`` (see :func:`regular_stat`)."""
    return regular_stat(path, error).st_size


def open_regular(path: str, error: type[Exception], size: int | None = None) -> io.BufferedReader:
    """Open the regular file at ``path`` for binary reading, never blocking.

    The open is non-blocking (a FIFO does not wait for a writer) and the kind and
    size are checked with ``fstat`` on the open descriptor. ``size``, when given,
    must equal the file's size.

    Raises
    ------
    error
        The file is missing or unreadable, not a regular file, or of another size.
    """
    fd = regular_descriptor(path, error, size)
    try:
        return open(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def regular_descriptor(path: str, error: type[Exception], size: int | None = None) -> int:
    """:func:`open_regular` as a raw descriptor (the caller closes it): no Python file
    object, for the thousands of small files of a corpus of many shards."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise error(f"{path}: cannot open ({exc.strerror or exc}).") from exc
    try:
        info = os.fstat(fd)
        _check_mode(info.st_mode, path, error)
        if size is not None and info.st_size != size:
            raise error(f"{path}: {info.st_size} bytes on disk, expected {size}.")
        # O_NONBLOCK has no effect on reads of a regular file.
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str, error: type[Exception], limit: int | None = None) -> bytes:
    """Return the bytes of the regular file at ``path``; at most ``limit`` bytes.

    Raises
    ------
    error
        See :func:`open_regular`; also when the file is longer than ``limit``.
    """
    with open_regular(path, error) as handle:
        data = handle.read() if limit is None else handle.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise error(f"{path}: larger than the {limit} bytes accepted.")
    return data


def contained_path(directory: str, name: str) -> str:
    """Return ``directory/name`` if it stays inside ``directory`` once symlinks resolve.

    ``name`` must be a safe name (so ``directory/name`` is a direct child); only a
    symlink needs resolving, so a plain file costs one ``lstat``.

    Raises
    ------
    UnsafePathError
        ``name`` is not a safe name, or is a symlink resolving outside ``directory``.
    """
    if not is_safe_name(name):
        raise UnsafePathError(f"{name!r} is not a plain shard file name.")
    path = os.path.join(directory, name)
    try:
        is_link = stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return path  # missing: the read that follows names the file
    if is_link:
        root = os.path.realpath(directory)
        real = os.path.realpath(path)
        if real == root or os.path.commonpath([root, real]) != root:
            raise UnsafePathError(
                f"{path} is a symlink to {real}, outside the corpus directory {root} "
                "(shard names resolve relative to the corpus directory only)."
            )
    return path


def contained_shard(directory: str, name: str, size: int, error: type[Exception]) -> str:
    """Return ``directory/name`` once it is known to be a regular file of ``size`` bytes
    inside ``directory`` (see :func:`contained_path`); nothing is opened.

    Commands that link or copy shard files (``merge``, ``export``) check every one
    this way before they remove or write anything, so a shard that is a symlink out
    of its corpus, a FIFO, a device or a file of another size stops them first.

    Raises
    ------
    UnsafePathError
        ``name`` is not a plain name, or a symlink resolving outside ``directory``.
    error
        The file is missing, not a regular file, or not ``size`` bytes long.
    """
    path = contained_path(directory, name)
    actual = regular_size(path, error)
    if actual != size:
        raise error(f"{path}: {actual} bytes on disk, its manifest entry says {size}.")
    return path


def _location(path: str) -> tuple[str, str]:
    """``(store, key)`` comparing equal for two spellings of one location: the real
    path of a local one (``file://`` allowed), the scheme and ``/``-trimmed rest of a URL."""
    if path.startswith("file://"):
        path = path[len("file://") :]
    if "://" in path:
        scheme, rest = path.split("://", 1)
        return scheme.lower(), "/" + rest.strip("/")
    return "file", os.path.realpath(path)


def _relation(target: tuple[str, str], other: tuple[str, str]) -> str | None:
    """How location ``target`` overlaps ``other``: ``"is"``, ``"contains"``, ``"is inside"``."""
    if target[0] != other[0]:
        return None
    if target[1] == other[1]:
        return "is"
    separator = "/" if target[0] != "file" else os.sep
    if other[1].startswith(target[1].rstrip(separator) + separator):
        return "contains"
    if target[1].startswith(other[1].rstrip(separator) + separator):
        return "is inside"
    return None


def check_replaceable(
    target: str,
    keep: Iterable[str],
    *,
    what: str,
    kept: str = "the input",
    allow_inside: bool = False,
) -> None:
    """Refuse to delete or replace ``target`` when that could touch a location in ``keep``.

    Real paths are compared (symlinks resolved, ``..`` and ``file://`` removed; URLs
    by scheme and path), so a link to an input is that input. ``target`` must not be
    a kept location nor contain one; unless ``allow_inside``, it must not lie inside
    one either. Called by every command before it removes anything (``merge`` and
    ``export`` outputs, ``ingest --overwrite``), so the refusal comes first.

    Parameters
    ----------
    target
        The file or directory about to be removed or rewritten.
    keep
        Locations the command promised to leave alone (its inputs).
    what, kept
        How the message names ``target`` (e.g. ``"the output"``) and a kept location.
    allow_inside
        Accept a ``target`` inside a kept location (it replaces nothing of it).

    Raises
    ------
    ArgumentError
        ``target`` is, contains, or (unless ``allow_inside``) is inside a kept location;
        the message names both and the relation.
    """
    where = _location(target)
    for item in keep:
        relation = _relation(where, _location(item))
        if relation is None or (relation == "is inside" and allow_inside):
            continue
        real = f" (both resolve to {where[1]})" if relation == "is" else ""
        raise ArgumentError(
            f"{what} {target} {relation} {kept} {item}{real}; writing it could change "
            f"or delete {kept}. Choose another location."
        )


def check_name_lengths(path: str, what: str) -> None:
    """Refuse ``path`` up front if one of its names is longer than :data:`NAME_MAX` bytes.

    The file system would refuse it only when the file is created, possibly after all
    the work of a command (``ENAMETOOLONG``); ``what`` names the argument.

    Raises
    ------
    ArgumentError
        A component of ``path`` (UTF-8 / file-system encoded) exceeds ``NAME_MAX``.
    """
    for name in os.fsencode(path).split(b"/"):
        if len(name) > NAME_MAX:
            shown = os.fsdecode(name[:40])
            raise ArgumentError(
                f"`{what}`: the name {shown}... in {path[:80]}... is {len(name)} bytes long; "
                f"file names may have at most {NAME_MAX} bytes."
            )


def read_regular_files(
    directory: str, names: list[str], sizes: list[int], error: type[Exception]
) -> list[bytes]:
    """The whole regular files ``directory/names[k]``, each exactly ``sizes[k]`` bytes.

    The bulk form of :func:`open_regular` plus a read, for thousands of small files
    (the offsets files of a corpus of many shards): per file one non-blocking open
    that does not follow a symlink, one ``fstat`` on the descriptor (kind and size),
    one read and a close, with no Python file object. A name that is a symlink goes
    through :func:`contained_path` (it must resolve inside ``directory``) and
    :func:`open_regular`. ``names`` must be safe names (:func:`is_safe_name`).

    Raises
    ------
    error
        A file is missing or unreadable, not a regular file, or of another size.
    UnsafePathError
        A name is unsafe, or a symlink resolving outside ``directory``.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    no_follow = getattr(os, "O_NOFOLLOW", 0)
    datas: list[bytes] = []
    append, join, fstat, read, close = datas.append, os.path.join, os.fstat, os.read, os.close
    for name, size in zip(names, sizes, strict=True):
        if not is_safe_name(name):
            raise UnsafePathError(f"{name!r} is not a plain shard file name.")
        path = join(directory, name)
        try:
            fd = os.open(path, flags | no_follow)
        except OSError:  # a symlink (ELOOP), or missing: the checked path says which
            with open_regular(contained_path(directory, name), error, size) as handle:
                append(handle.read(size))
            continue
        try:
            info = fstat(fd)
            _check_mode(info.st_mode, path, error)
            if info.st_size != size:
                raise error(f"{path}: {info.st_size} bytes on disk, expected {size}.")
            data = read(fd, size)
            while len(data) < size:  # a short read of a regular file: keep reading
                more = read(fd, size - len(data))
                if not more:
                    raise error(f"{path}: ended after {len(data)} of {size} bytes.")
                data += more
        finally:
            close(fd)
        append(data)
    return datas
