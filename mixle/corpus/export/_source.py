"""The corpus being exported: shard ranges, local shard files, token copies.

This is the one module of :mod:`mixle.corpus.export` that imports the rest of
:mod:`mixle.corpus`; every other export module goes through it, so a move of the
corpus internals is repointed here and nowhere else.

A raw corpus in a local directory exposes its ``.tokens`` files, which export links
or copies in the kernel (``copy_file_range``); any other corpus (an fsspec URL, a
zarr group) is read through :meth:`ShardedDocuments.read_tokens` (its shard cache)
and written from memory. Both give the same bytes.
"""

from __future__ import annotations

import bisect
import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle._file_checks import contained_shard, open_regular
from mixle._io import naming_file
from mixle.corpus.format.documents import ShardedDocuments
from mixle.corpus.format.origins import ORIGINS_NAME
from mixle.corpus.format.spec import MANIFEST_NAME
from mixle.corpus.ingestion.flat import MEGATRON_DTYPES, MEGATRON_MAGIC
from mixle.corpus.ingestion.formats.megatron import ORIGINS_SUFFIX
from mixle.corpus.storage.open import open_corpus
from mixle.errors import ArgumentTypeError, ExportError

__all__ = [
    "MEGATRON_DTYPES",
    "MEGATRON_MAGIC",
    "ORIGINS_NAME",
    "ORIGINS_SUFFIX",
    "CorpusSource",
    "Shard",
    "ShardedDocuments",
    "new_file",
    "write_all",
]

# Token ranges are scanned and copied in blocks of this many bytes: large enough for
# full-speed sequential I/O, small enough to keep private memory flat.
_BLOCK_BYTES = 16 * 1024 * 1024
# ioctl number of Linux FICLONE (_IOW(0x94, 9, int)): share extents copy-on-write.
_FICLONE = 0x40049409


@dataclass(frozen=True, slots=True)
class Shard:
    """One shard of the corpus, in corpus coordinates.

    Attributes
    ----------
    number
        Position in the manifest.
    first_document, num_documents
        Documents ``first_document .. first_document + num_documents - 1``.
    first_token, num_tokens
        Tokens ``first_token .. first_token + num_tokens - 1`` of the concatenation.
    name
        The tokens file name in the manifest.
    path
        The local tokens file (raw layout in a local directory), else ``None``.
    """

    number: int
    first_document: int
    num_documents: int
    first_token: int
    num_tokens: int
    name: str
    path: str | None


class CorpusSource:
    """A corpus opened for export: its shards, document lengths and token bytes.

    Parameters
    ----------
    corpus
        A corpus path or URL (opened with :func:`mixle.corpus.open_corpus` and
        ``open_options``), or an open :class:`ShardedDocuments`.
    """

    def __init__(self, corpus: Any, **open_options: Any) -> None:
        if isinstance(corpus, ShardedDocuments):
            documents = corpus
        elif isinstance(corpus, str | os.PathLike):
            documents = open_corpus(corpus, **open_options)
        else:
            raise ArgumentTypeError(
                "`corpus` must be a corpus path, URL or ShardedDocuments. "
                f"Got {type(corpus).__name__} instead."
            )
        self.documents = documents
        manifest = documents.manifest
        self.dtype = np.dtype(str(manifest["dtype"])).newbyteorder("<")
        self.itemsize = self.dtype.itemsize
        self.vocab_size: int | None = documents.vocab_size
        self.fingerprint = documents.fingerprint
        self.location = documents.location
        self.num_documents = len(documents)
        self.num_tokens = documents.num_tokens
        directory = _local_directory(documents.location)
        shards: list[Shard] = []
        first_document = first_token = 0
        for number, entry in enumerate(manifest["shards"]):
            path = None if directory is None else _local_tokens(directory, entry)
            shards.append(
                Shard(
                    number,
                    first_document,
                    entry["num_documents"],
                    first_token,
                    entry["num_tokens"],
                    entry["tokens"],
                    path,
                )
            )
            first_document += entry["num_documents"]
            first_token += entry["num_tokens"]
        self.shards: tuple[Shard, ...] = tuple(shards)
        self._token_starts = [shard.first_token for shard in shards]

    def origins(self, first_document: int, stop_document: int) -> bytes | None:
        """The origins sidecar of documents ``first_document .. stop_document - 1``
        (``docs/format.md`` section 15), or ``None`` for a corpus without one.

        Raises
        ------
        CorpusFormatError
            The corpus's sidecar is missing, truncated or forged (names the file).
        """
        table = self.documents.origins_table()
        return None if table is None else table.section_bytes(first_document, stop_document)

    def lengths(self, first_document: int, stop_document: int) -> np.ndarray:
        """Int64 lengths of documents ``first_document .. stop_document - 1``."""
        return self.documents.lengths[first_document:stop_document]

    def copy_tokens(self, fd: int, start: int, stop: int) -> None:
        """Append the bytes of corpus tokens ``start .. stop - 1`` to the file ``fd``.

        Local shard files are copied by the kernel (``os.copy_file_range``, falling back
        to ``os.sendfile``); other shards are written from their mapped tokens.
        """
        for shard, begin, end in self._pieces(start, stop):
            if shard.path is None:
                write_all(fd, self.documents.read_tokens(begin, end))
                continue
            offset = (begin - shard.first_token) * self.itemsize
            _copy_range(shard.path, fd, offset, (end - begin) * self.itemsize)

    def place_shard(self, shard: Shard, destination: str) -> str:
        """Make ``destination`` a file holding exactly the tokens file of ``shard``.

        Tries, in order, a hard link (no bytes written; the export then shares the
        corpus file's inode, which is safe because mixle replaces corpus files by
        rename, never in place), a reflink (``FICLONE``: copy-on-write, btrfs/XFS),
        then a copy. Returns ``"link"``, ``"reflink"`` or ``"copy"``.
        """
        if shard.path is not None:
            try:
                os.link(shard.path, destination)
                return "link"
            except OSError:  # another filesystem, no hard links (FAT, some FUSE), ...
                pass
            if _reflink(shard.path, destination):
                return "reflink"
        with new_file(destination) as fd:
            self.copy_tokens(fd, shard.first_token, shard.first_token + shard.num_tokens)
        return "copy"

    def find_id_at_least(self, limit: int) -> tuple[Shard, int, int, int] | None:
        """The first token id ``>= limit``, as ``(shard, document, position, id)``.

        ``document`` counts from the start of the corpus and ``position`` from the start
        of that document. Reads every token once, in blocks; ``None`` when all fit.
        """
        step = max(_BLOCK_BYTES // self.itemsize, 1)
        for block_start in range(0, self.num_tokens, step):
            block = self.documents.read_tokens(
                block_start, min(block_start + step, self.num_tokens)
            )
            if int(block.max()) < limit:
                continue
            where = block_start + int(np.flatnonzero(block >= limit)[0])
            shard, _, _ = next(self._pieces(where, where + 1))
            ends = np.cumsum(self.lengths(0, self.num_documents), dtype=np.int64)
            document = int(np.searchsorted(ends, where, side="right"))
            start = int(ends[document - 1]) if document else 0
            return shard, document, where - start, int(block[where - block_start])
        return None

    def _pieces(self, start: int, stop: int) -> Iterator[tuple[Shard, int, int]]:
        """``(shard, begin, end)`` for each shard that tokens ``start .. stop - 1`` touch."""
        number = bisect.bisect_right(self._token_starts, start) - 1
        for shard in self.shards[max(number, 0) :]:
            if shard.first_token >= stop:
                break
            begin = max(start, shard.first_token)
            end = min(stop, shard.first_token + shard.num_tokens)
            if begin < end:
                yield shard, begin, end


def _local_directory(location: str) -> str | None:
    """The corpus directory when ``location`` is a local raw corpus, else ``None``."""
    path = location[len("file://") :] if location.startswith("file://") else location
    if "://" in path or not os.path.isfile(os.path.join(path, MANIFEST_NAME)):
        return None
    return path


def _local_tokens(directory: str, entry: dict[str, Any]) -> str | None:
    """The tokens file of ``entry`` in the local corpus ``directory`` when it is a
    regular file of its recorded size; ``None`` when the corpus is read through the
    reader instead (not the raw layout, e.g. a zarr group).

    Raises
    ------
    UnsafePathError
        The file is a symlink out of the corpus directory (never linked or copied).
    """
    try:  # an UnsafePathError (a CorpusFormatError, not an ExportError) propagates
        return contained_shard(directory, entry["tokens"], entry["tokens_bytes"], ExportError)
    except ExportError:
        return None


def _reflink(source: str, destination: str) -> bool:
    """Clone ``source`` into a new ``destination`` with ``FICLONE``; ``False`` if unsupported."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return False
    with open_regular(source, ExportError) as src, open(destination, "wb") as dst:
        try:
            fcntl.ioctl(dst.fileno(), _FICLONE, src.fileno())
            return True
        except OSError:
            pass
    os.unlink(destination)
    return False


@contextlib.contextmanager
def new_file(path: str) -> Iterator[int]:
    """Create ``path`` (it must not exist), yield its descriptor, fsync and close it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with naming_file(path):  # "No space left on device" names the file
            yield fd
            os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | np.ndarray) -> None:
    """Write all of ``data`` (bytes or a contiguous array's buffer) to ``fd``."""
    raw: Any = np.ascontiguousarray(data) if isinstance(data, np.ndarray) else data
    view = memoryview(raw).cast("B")
    while view:
        view = view[os.write(fd, view) :]


def _copy_range(path: str, fd: int, offset: int, count: int) -> None:
    """Append ``count`` bytes of ``path`` from ``offset`` to ``fd``, in the kernel."""
    with open_regular(path, ExportError) as source:
        src = source.fileno()
        if os.fstat(src).st_size < offset + count:
            raise ExportError(
                f"{path}: shard file is shorter than its manifest entry "
                f"(needed bytes {offset}..{offset + count}); was it truncated after opening?"
            )
        while count:
            try:
                done = os.copy_file_range(src, fd, min(count, 1 << 30), offset)
            except OSError:  # e.g. EXDEV on older kernels, or a filesystem without it
                done = os.sendfile(fd, src, offset, min(count, 1 << 30))
            if done <= 0:
                raise ExportError(f"{path}: unexpected end of file at byte {offset}.")
            offset += done
            count -= done
