"""OutputArea: the output of a distributed ingest, a local directory or an fsspec URL.

Units and the commit step write and read the same few things wherever the output
lives: small JSON records, whole directories of unit files, a listing of file sizes
(one listing per commit, however many units), server-side copies. Every access goes
through the output's one store (:func:`~mixle.corpus.storage.open.writable_store`)
and so through its retry policy; only the checks of a local file (a regular file,
of bounded size, created at most once) read and write the directory directly.
Local writes are atomic renames; object-store writes are whole-object puts, which
are atomic by themselves.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from mixle._file_checks import read_regular
from mixle._io import atomic_write_bytes, fsync_directory, link_or_copy, temporary_name
from mixle._safe_json import loads_bounded
from mixle.corpus.format.store import ShardStore
from mixle.corpus.storage.open import is_url, writable_store
from mixle.corpus.storage.publish import upload_files
from mixle.errors import IngestError

__all__ = ["MAX_RECORD_BYTES", "OutputArea", "link_or_copy"]

#: Largest ingest record read from an output (a plan, a unit's record or manifest,
#: a rejects list): far above what mixle writes, far below what exhausts memory.
MAX_RECORD_BYTES = 1 << 30


class OutputArea:
    """Read and write files under an output location (local directory or URL).

    Parameters
    ----------
    output
        A local directory (``file://`` allowed) or an fsspec URL (``s3://bucket/prefix``).
    storage_options
        fsspec options for a URL.
    """

    def __init__(self, output: str, storage_options: Mapping[str, Any] | None = None) -> None:
        location = output[len("file://") :] if output.startswith("file://") else output
        self.is_url = is_url(location)
        self.output = location.rstrip("/") if self.is_url else os.path.abspath(location)
        self.storage_options = dict(storage_options or {})
        #: The store this output is read and written through (retried, size-checked).
        self.store: ShardStore = writable_store(self.output, self.storage_options)

    def path(self, relative: str) -> str:
        """The local path of ``relative`` (``/``-separated) under a local output."""
        if self.is_url:
            raise IngestError(f"{self.output}: an object-store output has no local paths.")
        return os.path.join(self.output, *relative.split("/")) if relative else self.output

    def describe(self, relative: str) -> str:
        """``relative`` as the user named the output (for messages)."""
        if self.is_url:
            return f"{self.output}/{relative}"
        return os.path.join(self.output, *relative.split("/"))

    def read_bytes(self, relative: str, limit: int = MAX_RECORD_BYTES) -> bytes | None:
        """The bytes stored at ``relative`` (at most ``limit``), or ``None`` when missing.

        A local file must be a regular file (a FIFO or a device there is an error, so
        a read never blocks or runs forever).

        Raises
        ------
        IngestError
            The file is not a regular file, is unreadable, or is larger than ``limit``
            (the message names it).
        """
        if not self.is_url:
            return _read_local(self.path(relative), limit)
        return self.read_many([relative], limit).get(relative)

    def read_json(self, relative: str, limit: int = MAX_RECORD_BYTES) -> Any:
        """The JSON value stored at ``relative``, or ``None`` when the file is missing.

        Raises
        ------
        IngestError
            See :meth:`read_bytes`; also when the file is not bounded, valid JSON
            (:func:`~mixle._safe_json.loads_bounded`; the message names the file).
        """
        data = self.read_bytes(relative, limit)
        return None if data is None else loads_bounded(data, self.describe(relative), IngestError)

    def read_many(self, relatives: list[str], limit: int = MAX_RECORD_BYTES) -> dict[str, bytes]:
        """``{relative: bytes}`` of the files that exist among ``relatives``.

        On an object store the reads go out together (the store's concurrent
        :meth:`~mixle.corpus.ShardStore.read_files`, retried): the records of a
        thousand units cost a few round trips, not a thousand.
        Locally each must be a regular file of at most ``limit`` bytes.

        Raises
        ------
        IngestError
            A local file is not a regular file or is too large; an object is too large.
        """
        if not self.is_url:
            found = {}
            for relative in relatives:
                data = _read_local(self.path(relative), limit)
                if data is not None:
                    found[relative] = data
            return found
        result = self.store.read_files(relatives)
        for relative, value in result.items():
            if len(value) > limit:
                raise IngestError(
                    f"{self.describe(relative)}: larger than the {limit} bytes accepted."
                )
        return result

    def write_bytes(self, relative: str, data: bytes) -> None:
        """Store ``data`` at ``relative`` whole or not at all (creating directories; on
        local disk under a unique temporary name, as several machines may write the same
        file at once)."""
        self.store.write_bytes(relative, data)

    def create_bytes(self, relative: str, data: bytes) -> bool:
        """Store ``data`` at ``relative`` unless a file is there already; whether it did.

        On local disk the file appears whole, and of two machines creating it at once
        exactly one succeeds (a hard link of a complete temporary file, which fails if
        the name exists). An object store has no create-if-absent: there the last
        writer wins, and the caller compares what it reads back.
        """
        if self.is_url:
            if self.exists(relative):
                return False
            self.store.write_bytes(relative, data)
            return True
        target = self.path(relative)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        temporary = temporary_name(target, unique=True)
        atomic_write_bytes(temporary, data, temporary=temporary_name(temporary, unique=True))
        try:
            os.link(temporary, target)
        except FileExistsError:
            return False
        finally:
            os.unlink(temporary)
        fsync_directory(os.path.dirname(target))
        return True

    def exists(self, relative: str) -> bool:
        """Whether a file or directory exists at ``relative``."""
        return self.store.exists(relative)

    def sizes(self, relative: str) -> dict[str, int]:
        """``{path relative to relative: size}`` of every file under ``relative``.

        One listing (one ``find``), so a commit of a thousand units costs one
        round trip of metadata on an object store, and no file is opened.
        """
        return self.store.list_sizes(relative)

    def upload_directory(self, local: str, relative: str, last: str) -> None:
        """Upload every file of the local directory ``local`` to ``relative``; ``last`` last.

        Object puts are atomic, and every unit file is a pure function of the plan, so
        two uploads of the same unit racing each other store the same bytes.
        """
        upload_files(self.store, local, last, relative)

    def copy(self, source: str, target: str) -> None:
        """Copy ``source`` to ``target`` without moving token bytes through this machine.

        Object stores copy server-side; a local output hard-links (falling back to a
        copy where links are not allowed), replacing ``target`` atomically.
        """
        self.store.copy(source, target)

    def remove(self, relative: str) -> None:
        """Remove the file or tree at ``relative`` if it exists."""
        self.store.remove(relative)


def _read_local(path: str, limit: int) -> bytes | None:
    """The bytes of the local regular file ``path`` (at most ``limit``), ``None`` if missing."""
    try:
        return read_regular(path, IngestError, limit)
    except IngestError as exc:
        if isinstance(exc.__cause__, FileNotFoundError | NotADirectoryError):
            return None
        raise
