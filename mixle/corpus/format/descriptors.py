"""The file-descriptor budget of a corpus reader.

Every mapped shard holds descriptors: CPython's ``mmap`` keeps a duplicate of the
descriptor it maps (Python 3.11 and 3.12 cannot be told not to), so a shard's
``.tokens`` and ``.offsets`` mappings hold two; a shard read through the shared
cache also holds one pin lock per file, two more. The soft ``RLIMIT_NOFILE`` (256
by default on macOS, often 1024 on Linux) bounds them all, and the program needs
descriptors of its own (sockets, DataLoader pipes, log files).

The budget: a reader keeps at most
``(soft_limit - reserve) // descriptors_per_shard`` shards open, with
``reserve = max(RESERVE_MIN, soft_limit // 2)`` left to the rest of the process:
that half also covers documents the caller still holds, since a returned view keeps
its shard's mappings (and their descriptors) alive after the shard leaves the
LRU, e.g. the documents of one ``take`` from many shards. ``max_open_shards`` is
an upper bound under that. Under ``ulimit -n 256`` a local corpus keeps 64 shards
mapped (2 descriptors each, 128 in all), a cached remote one 32; under 1024 the
default of 256 local shards fits. When even one shard does not fit, or the process
runs out of descriptors anyway (other code holds them), the reader raises
:class:`~mixle.errors.DescriptorLimitError` naming the limit and how to raise it,
never a bare ``EMFILE``.
"""

from __future__ import annotations

import errno
import resource

from mixle.errors import DescriptorLimitError

__all__ = [
    "RESERVE_MIN",
    "descriptor_limit",
    "exhaustion_error",
    "is_descriptor_exhaustion",
    "shard_budget",
]

#: Descriptors always left to the rest of the program.
RESERVE_MIN = 64
_UNLIMITED = 1 << 20


def descriptor_limit() -> int:
    """The soft ``RLIMIT_NOFILE`` of this process (a large number when unlimited)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return _UNLIMITED if soft == resource.RLIM_INFINITY or soft <= 0 else int(soft)


def _advice(limit: int) -> str:
    return (
        f"the open-file limit (RLIMIT_NOFILE, `ulimit -n`) is {limit}; raise it "
        f"(e.g. `ulimit -n {max(4 * limit, 1024)}`) or close other files"
    )


def shard_budget(max_open_shards: int, descriptors_per_shard: int) -> int:
    """Return how many shards a reader may keep open: ``max_open_shards`` or fewer.

    Raises
    ------
    DescriptorLimitError
        Not even one shard fits in the budget (names the limit).
    """
    if descriptors_per_shard == 0:
        return max_open_shards
    limit = descriptor_limit()
    reserve = max(RESERVE_MIN, limit // 2)
    fit = (limit - reserve) // descriptors_per_shard
    if fit < 1:
        raise DescriptorLimitError(
            errno.EMFILE,
            f"cannot open a corpus shard: it needs {descriptors_per_shard} file "
            f"descriptors and {reserve} are kept for the rest of the program, but "
            + _advice(limit)
            + ".",
        )
    return min(max_open_shards, fit)


def is_descriptor_exhaustion(exc: BaseException) -> bool:
    """Whether ``exc`` (or its cause) is ``EMFILE``/``ENFILE``: out of descriptors."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return False


def exhaustion_error(path: str, detail: str = "") -> DescriptorLimitError:
    """The error for running out of descriptors while opening ``path`` (``detail``
    says what the reader held)."""
    return DescriptorLimitError(
        errno.EMFILE,
        f"{path}: out of file descriptors{detail}; "
        + _advice(descriptor_limit())
        + ", or pass a smaller `max_open_shards`.",
    )
