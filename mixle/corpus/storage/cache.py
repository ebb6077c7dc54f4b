"""A local shard cache shared by every process on a machine.

Files are stored content-addressed by their manifest SHA-256 under
``<cache_dir>/objects/<sha256>``, so a name in the cache always means "these exact
bytes": a cached file never goes stale, and two corpora sharing a shard share the
file. Three kinds of POSIX ``flock`` on small files under ``<cache_dir>/locks/``
make the cache safe across processes (ranks, DataLoader workers):

``<sha256>.pin`` (shared while in use)
    A process holds a shared lock while a file is open in a reader or about to be
    read (a prefetch in flight). Eviction takes an exclusive non-blocking lock, so it
    skips pinned files instead of deleting them from under a reader.
``<sha256>.dl`` (exclusive while downloading)
    Only one process downloads a given file; the others wait, then find it present.
``evict.lock`` (exclusive while evicting)
    One evictor at a time, so two processes do not both delete the same files.

A download goes to ``<cache_dir>/tmp/`` under a unique name, is checked (size and
SHA-256 against the manifest) and only then renamed into ``objects/``: a file in
``objects/`` is always complete and valid, and a checksum failure is never cached.
:meth:`ShardCache.get` fetches one file; :meth:`ShardCache.fill` fetches a batch (one
asynchronous download of a prefetch hint) under the same locks and checks.

With ``limit`` set, least-recently-used files (by mtime, touched on every use) are
evicted before a download so that the cache stays within ``limit`` bytes, except
for pinned files: it never exceeds the limit by more than the files in use.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence

from mixle._io import rename_atomically
from mixle.errors import ArgumentError

__all__ = ["ShardCache", "default_cache_dir"]


def default_cache_dir() -> str:
    """``$MIXLE_CACHE_DIR``, else ``$XDG_CACHE_HOME/mixle/shards`` (``~/.cache`` by default)."""
    explicit = os.environ.get("MIXLE_CACHE_DIR")
    if explicit:
        return os.path.abspath(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mixle", "shards")


@contextlib.contextmanager
def _flock(path: str, operation: int) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, operation)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


class ShardCache:
    """Content-addressed, lock-protected, size-bounded local file cache.

    Parameters
    ----------
    directory
        Cache root (created if missing). Share it between processes to share files.
    limit
        Soft bound in bytes on ``objects/``; ``None`` for unbounded.

    Notes
    -----
    Instances are cheap and pickle as ``(directory, limit)``. Pins are per process:
    a forked child starts with none of its own (descriptors inherited from the parent
    still hold the parent's shared locks, which only makes eviction more careful).
    """

    def __init__(self, directory: str, limit: int | None = None) -> None:
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
        ):
            raise ArgumentError(
                f"`cache_limit` must be None or a nonnegative integer (bytes). Got {limit!r} instead."
            )
        self.directory = os.path.abspath(os.fspath(directory))
        self.limit = limit
        self._objects = os.path.join(self.directory, "objects")
        self._locks = os.path.join(self.directory, "locks")
        self._tmp = os.path.join(self.directory, "tmp")
        self._made = False  # directories are created on first use, not by construction
        self._guard = threading.Lock()
        self._pins: dict[str, list[int]] = {}  # digest -> [fd, count]
        self._pid = os.getpid()

    def __reduce__(self) -> tuple[object, ...]:
        return (ShardCache, (self.directory, self.limit))

    def _ensure(self) -> None:
        if not self._made:
            for path in (self._objects, self._locks, self._tmp):
                os.makedirs(path, exist_ok=True)
            self._made = True

    def path(self, digest: str) -> str:
        """Where the file with SHA-256 ``digest`` lives once cached."""
        return os.path.join(self._objects, digest)

    # -- pins -----------------------------------------------------------------------
    def _lock(self) -> threading.Lock:
        """This process's guard. After a fork the parent's pins are not ours to
        release, and its lock may have been held by a thread that does not exist
        here: start afresh (checked before taking the lock, never under it)."""
        if self._pid != os.getpid():
            self._pins = {}
            self._guard = threading.Lock()
            self._pid = os.getpid()
        return self._guard

    def _pin_table(self) -> dict[str, list[int]]:
        return self._pins

    def pin(self, digest: str) -> None:
        """Mark ``digest`` in use by this process (reference counted); eviction skips it."""
        with self._lock():
            table = self._pin_table()
            slot = table.get(digest)
            if slot is not None:
                slot[1] += 1
                return
            self._ensure()
            fd = os.open(os.path.join(self._locks, f"{digest}.pin"), os.O_RDWR | os.O_CREAT, 0o644)
            # Blocks only while an evictor holds the exclusive lock (a few unlinks).
            fcntl.flock(fd, fcntl.LOCK_SH)
            table[digest] = [fd, 1]

    def release(self, digest: str) -> None:
        """Drop one pin of ``digest``; the last one makes the file evictable again."""
        with self._lock():
            table = self._pin_table()
            slot = table.get(digest)
            if slot is None:
                return
            slot[1] -= 1
            if slot[1] <= 0:
                del table[digest]
                os.close(slot[0])

    def pinned(self) -> set[str]:
        """Digests this process currently pins."""
        with self._lock():
            return set(self._pin_table())

    # -- fetching -------------------------------------------------------------------
    def get(
        self,
        digest: str,
        size: int,
        fetch: Callable[[str], None],
        *,
        pin: bool = True,
    ) -> str:
        """Return the local path of the file with SHA-256 ``digest``, fetching it if needed.

        ``fetch(temporary_path)`` must write the complete file there (it owns
        retries and the checksum check; see :func:`download_checked`). Exactly one
        process fetches a missing file; the others wait for it. With ``pin`` the file
        stays pinned until :meth:`release`.
        """
        self._ensure()
        if pin:
            self.pin(digest)
        try:
            final = self.path(digest)
            if not self._present(final, size):
                with _flock(os.path.join(self._locks, f"{digest}.dl"), fcntl.LOCK_EX):
                    if not self._present(final, size):
                        self._make_room(size, {digest})
                        temporary = os.path.join(self._tmp, f"{digest}.{uuid.uuid4().hex}")
                        try:
                            fetch(temporary)
                            # A cache entry need not survive a crash: it is refetched.
                            rename_atomically(temporary, final)
                        finally:
                            with contextlib.suppress(FileNotFoundError):
                                os.unlink(temporary)
            with contextlib.suppress(OSError):
                os.utime(final)  # LRU clock, shared by every process
            return final
        except BaseException:
            if pin:
                self.release(digest)
            raise

    def fill(
        self,
        items: Sequence[tuple[str, int]],
        fetch_many: Callable[[list[int], list[str], Callable[[int], None]], None],
        ready: Callable[[int], None] | None = None,
    ) -> list[bool]:
        """Fetch the missing files among ``items`` (``(digest, size)`` pairs) as one batch.

        The caller pins the items first. Each missing file whose download lock is free
        is claimed (locks are taken without blocking, so two batches never wait on each
        other while holding locks); room is made for all claimed files at once; then
        ``fetch_many(indices, temporaries, publish)`` writes item ``indices[k]`` to
        ``temporaries[k]`` and calls ``publish(k)`` for each file as soon as it is
        complete and verified (size and SHA-256), from any thread. ``publish`` renames
        that file into ``objects/`` (never a file it was not told is verified),
        releases its download lock and calls ``ready(indices[k])``; ``ready(index)``
        runs at once, before any download, for each item already cached. Every
        temporary not published is removed. Returns, per item, whether it is now
        cached: ``False`` (another process holds its download lock, or it failed)
        means "fetch it with :meth:`get`", which waits, retries and reports.
        """
        self._ensure()
        present = [self._present(self.path(digest), size) for digest, size in items]
        claimed: list[int] = []
        temporaries: list[str] = []
        locks: dict[int, int] = {}  # item index -> descriptor holding its download lock
        guard = threading.Lock()

        def publish(position: int) -> None:
            index = claimed[position]
            with guard:
                if present[index]:
                    return
                rename_atomically(temporaries[position], self.path(items[index][0]))
                present[index] = True
                os.close(locks.pop(index))  # releases the download lock
            with contextlib.suppress(OSError):
                os.utime(self.path(items[index][0]))  # LRU clock
            if ready is not None:
                ready(index)

        try:
            for index, (digest, size) in enumerate(items):
                if present[index]:
                    continue
                fd = os.open(
                    os.path.join(self._locks, f"{digest}.dl"), os.O_RDWR | os.O_CREAT, 0o644
                )
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)  # being downloaded elsewhere (or twice in this batch)
                    continue
                if self._present(self.path(digest), size):  # finished while we looked
                    os.close(fd)
                    present[index] = True
                else:
                    locks[index] = fd
                    claimed.append(index)
            for index, (digest, _) in enumerate(items):
                if present[index]:
                    with contextlib.suppress(OSError):
                        os.utime(self.path(digest))  # LRU clock
                    if ready is not None:
                        ready(index)
            if claimed:
                self._make_room(sum(items[i][1] for i in claimed), {items[i][0] for i in claimed})
                temporaries = [
                    os.path.join(self._tmp, f"{items[i][0]}.{uuid.uuid4().hex}") for i in claimed
                ]
                fetch_many(list(claimed), list(temporaries), publish)
        finally:
            with guard:
                for position, temporary in enumerate(temporaries):
                    if not present[claimed[position]]:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(temporary)
                for fd in locks.values():
                    os.close(fd)  # releases the download lock
                locks.clear()
        return present

    @staticmethod
    def _present(path: str, size: int) -> bool:
        try:
            return os.stat(path).st_size == size
        except FileNotFoundError:
            return False

    # -- eviction -------------------------------------------------------------------
    def usage(self) -> int:
        """Bytes currently held in ``objects/``."""
        total = 0
        if not os.path.isdir(self._objects):
            return 0
        with os.scandir(self._objects) as entries:
            for entry in entries:
                with contextlib.suppress(FileNotFoundError):
                    total += entry.stat().st_size
        return total

    def _make_room(self, incoming: int, keep: set[str]) -> None:
        if self.limit is None:
            return
        with _flock(os.path.join(self._locks, "evict.lock"), fcntl.LOCK_EX):
            files: list[tuple[float, int, str]] = []
            with os.scandir(self._objects) as entries:
                for entry in entries:
                    with contextlib.suppress(FileNotFoundError):
                        stat = entry.stat()
                        files.append((stat.st_mtime, stat.st_size, entry.name))
            total = sum(size for _, size, _ in files)
            files.sort()
            for _, size, name in files:
                if total + incoming <= self.limit:
                    break
                if name not in keep and self._evict(name):
                    total -= size

    def _evict(self, digest: str) -> bool:
        """Delete ``digest`` unless some process pins it; return whether it was deleted."""
        fd = os.open(os.path.join(self._locks, f"{digest}.pin"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # in use or about to be read
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path(digest))
            return True
        finally:
            os.close(fd)
