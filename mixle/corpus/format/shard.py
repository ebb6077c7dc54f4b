"""Write one shard (a ``.tokens`` / ``.offsets`` pair) crash-safely.

:class:`ShardWriter` is the low-level building block: it streams validated token
arrays into a temporary file while hashing them, and :meth:`ShardWriter.commit`
writes the offsets file, fsyncs both, renames them to their final names and returns
the shard's manifest entry as a plain ``dict``. It holds only the shard's document
lengths in memory (8 bytes per document), never its tokens, and it is safe to use
in a worker process: nothing is shared but the directory.

A corpus is published by passing the entries, in order, to
:func:`mixle.corpus.commit_manifest`. :class:`mixle.corpus.CorpusWriter` and the
parallel ingest are both built this way.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import uuid
import weakref
from collections import deque
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Any

import numpy as np

from mixle._checks import nonnegative_int
from mixle._file_checks import open_regular
from mixle._io import fsync_directory, fsync_file, rename_atomically
from mixle.corpus.format.encode import as_integer_document, encode_documents, narrow
from mixle.corpus.format.spec import (
    HEADER_SIZE,
    OffsetsHeader,
    check_file_name,
    dtype_limit,
    normalize_dtype,
    shard_file_names,
)
from mixle.errors import ArgumentError, CorpusFormatError

__all__ = ["ShardWriter", "rewrite_shard_dtype", "write_shard"]

_COPY_CHUNK = 1 << 24
# Chunks smaller than this are hashed inline (thread hand-off would cost more).
_THREAD_MIN_BYTES = 1 << 20
# Chunks handed to the hashing thread and not yet hashed, at most: enough slack that a
# briefly descheduled hasher does not stall the writing thread, and memory stays bounded.
_HASH_IN_FLIGHT = 4
# A durable shard asks the kernel to write its data to disk every this many bytes, on a
# helper thread, so the disk works while the next chunks are encoded, hashed and written,
# and the fsync before the rename finds at most this much left to write.
_FLUSH_BYTES = 1 << 26


def _discard(handle: Any, paths: tuple[str, ...]) -> None:
    with contextlib.suppress(OSError):
        handle.close()
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _temporary_name(name: str) -> str:
    return f".{name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:12]}"


class ShardWriter:
    """Stream documents into one shard under temporary names; commit renames them.

    Parameters
    ----------
    directory
        Existing corpus directory.
    index
        Shard number; the files become ``shard-{index:05d}.tokens`` / ``.offsets``.
    dtype
        Token dtype of the corpus (``uint16``, ``uint32`` or ``int64``).
    durable
        fsync both files (and the directory) before returning from :meth:`commit`.
        The rename is atomic either way, so a killed *process* never leaves a partial
        shard; ``durable=False`` only gives up survival of an OS crash or power loss
        (for scratch corpora and benchmarks).

    Notes
    -----
    Use as a context manager: leaving the block by an exception calls :meth:`abort`.
    :meth:`write` takes ids that are already validated and already of ``dtype``;
    :meth:`add_documents` validates arbitrary documents first.

    Two helper threads overlap the work with the writing: one computes the SHA-256 of
    large chunks (in order) while they are written, and, for a durable shard, one
    fsyncs the data written so far every 64 MiB so the disk writes while more is
    appended. Neither changes a byte of the output, and nothing is visible under the
    final names before :meth:`commit` has fsynced and renamed the files.
    """

    def __init__(
        self, directory: str | os.PathLike[str], index: int, *, dtype: Any, durable: bool = True
    ) -> None:
        self.directory = os.fspath(directory)
        self.durable = bool(durable)
        self.index = nonnegative_int("index", index)
        self.dtype = normalize_dtype(dtype)
        self._np_dtype = np.dtype(self.dtype).newbyteorder("<")
        self.tokens_name, self.offsets_name = shard_file_names(self.index)
        self._tokens_tmp = os.path.join(self.directory, _temporary_name(self.tokens_name))
        self._offsets_tmp = os.path.join(self.directory, _temporary_name(self.offsets_name))
        self._file = open(self._tokens_tmp, "xb", buffering=0)  # noqa: SIM115 - closed in commit/abort
        # Dropped without commit or abort (e.g. a killed generator): still clean up.
        self._finalizer = weakref.finalize(
            self, _discard, self._file, (self._tokens_tmp, self._offsets_tmp)
        )
        self._hash = hashlib.sha256()
        self._hasher: ThreadPoolExecutor | None = None
        self._pending_hashes: deque[Future[None]] = deque()
        self._flusher: ThreadPoolExecutor | None = None
        self._flushing: Future[None] | None = None
        self._unflushed = 0
        self._lengths: list[np.ndarray] = []
        self.num_documents = 0
        self.num_tokens = 0
        self._done = False

    @property
    def nbytes(self) -> int:
        """Bytes of token data written so far."""
        return self.num_tokens * self._np_dtype.itemsize

    def write(
        self, tokens: np.ndarray, lengths: np.ndarray | Sequence[int], *, owned: bool = False
    ) -> None:
        """Append documents whose ids, concatenated, are ``tokens`` (already of ``dtype``).

        Parameters
        ----------
        tokens
            1-D array of this shard's dtype; its bytes are written as they are.
        lengths
            Document lengths, adding up to ``len(tokens)``.
        owned
            ``True`` promises that the caller will not modify ``tokens`` afterwards, so
            its checksum may still be computed in the background after this returns.
            With ``False`` (default) the caller may reuse the buffer at once.

        Raises
        ------
        ArgumentError
            ``tokens`` has another dtype, or ``lengths`` are negative or do not add up
            to ``len(tokens)``.
        """
        if self._done:
            raise ArgumentError("this ShardWriter is already committed or aborted.")
        if tokens.dtype != self._np_dtype or tokens.ndim != 1:
            raise ArgumentError(
                f"`tokens` must be a 1-D {self.dtype} array. Got {tokens.dtype} "
                f"with shape {tokens.shape} instead."
            )
        lengths_array = np.asarray(lengths, dtype=np.int64)
        if lengths_array.ndim != 1 or (lengths_array.size and int(lengths_array.min()) < 0):
            raise ArgumentError("`lengths` must be a 1-D array of nonnegative integers.")
        if int(lengths_array.sum()) != tokens.shape[0]:
            raise ArgumentError(
                f"`lengths` add up to {int(lengths_array.sum())}, but `tokens` has "
                f"{tokens.shape[0]} ids."
            )
        self._write_bytes(tokens)
        if not owned:
            self._wait_hashes(0)
        self._lengths.append(lengths_array)
        self.num_documents += lengths_array.shape[0]
        self.num_tokens += tokens.shape[0]

    def _write_bytes(self, tokens: np.ndarray) -> None:
        """Write and hash ``tokens``; large chunks are hashed on a helper thread.

        SHA-256 costs about as much CPU as the write itself. Both release the GIL, so
        the helper thread hashes a chunk while this thread writes it (and the caller
        prepares the next one). Chunks are hashed strictly in order; at most
        ``_HASH_IN_FLIGHT`` are pending, so memory stays bounded.
        """
        if not tokens.shape[0]:
            return
        view = np.ascontiguousarray(tokens).data.cast("B")
        if view.nbytes < _THREAD_MIN_BYTES:
            self._wait_hashes(0)
            self._hash.update(view)
        else:
            if self._hasher is None:
                self._hasher = ThreadPoolExecutor(1, thread_name_prefix="mixle-sha256")
            self._wait_hashes(_HASH_IN_FLIGHT - 1)
            # The future keeps ``view`` (and so its buffer) alive until hashed.
            self._pending_hashes.append(self._hasher.submit(self._hash.update, view))
        nbytes = view.nbytes
        while view:
            written = self._file.write(view)
            view = view[written or 0 :]
        if self.durable:
            self._unflushed += nbytes
            self._flush_behind()

    def _flush_behind(self) -> None:
        """Start writing the data so far to disk on a helper thread (durable shards).

        ``fsync`` of the bytes written until now, while this thread goes on
        appending: the final fsync in :meth:`commit` then waits only for the tail. One
        flush at a time; an error surfaces at the next call or at :meth:`commit`.
        """
        if self._unflushed < _FLUSH_BYTES:
            return
        if self._flushing is not None:
            if not self._flushing.done():
                return
            self._flushing.result()
        if self._flusher is None:
            self._flusher = ThreadPoolExecutor(1, thread_name_prefix="mixle-flush")
        self._flushing = self._flusher.submit(os.fsync, self._file.fileno())
        self._unflushed = 0

    def _wait_hashes(self, keep: int) -> None:
        while len(self._pending_hashes) > keep:
            self._pending_hashes.popleft().result()

    def _stop_helpers(self) -> None:
        """Wait for pending hashes and the flush in flight, then end both threads."""
        try:
            self._wait_hashes(0)
            if self._flushing is not None:
                self._flushing.result()
        finally:
            self._flushing = None
            for pool in (self._hasher, self._flusher):
                if pool is not None:
                    pool.shutdown(wait=True)
            self._hasher = self._flusher = None

    def add_documents(
        self,
        documents: Iterable[Any],
        *,
        first_document: int = 0,
        vocab_size: int | None = None,
    ) -> None:
        """Validate ``documents`` (any 1-D integer sequences) and append them.

        Raises
        ------
        TokenIdError
            An id is negative, not an exact integer, or does not fit ``dtype`` /
            ``vocab_size``; names the corpus document index (counting from
            ``first_document``) and position.
        """
        arrays = [
            as_integer_document(doc, first_document + position)
            for position, doc in enumerate(documents)
        ]
        limit = dtype_limit(self.dtype) if vocab_size is None else vocab_size
        batch = encode_documents(arrays, first_document=first_document, limit=limit)
        self.write(narrow(batch.tokens, self.dtype, batch.max_id), batch.lengths)

    def commit(self) -> dict[str, Any]:
        """Write the offsets file, fsync, rename both files and return the shard entry.

        Returns
        -------
        dict
            ``{"tokens", "offsets", "num_documents", "num_tokens", "tokens_bytes",
            "offsets_bytes", "tokens_sha256", "offsets_sha256"}`` — a manifest shard
            entry, JSON-able.
        """
        if self._done:
            raise ArgumentError("this ShardWriter is already committed or aborted.")
        try:
            self._stop_helpers()
            if self.durable:
                fsync_file(self._file)
            self._file.close()
            lengths = (
                np.concatenate(self._lengths) if self._lengths else np.empty(0, dtype=np.int64)
            )
            offsets = np.zeros(lengths.shape[0] + 1, dtype="<i8")
            np.cumsum(lengths, out=offsets[1:])
            header = OffsetsHeader(self.dtype, self.num_documents, self.num_tokens).pack()
            body = offsets.tobytes()
            with open(self._offsets_tmp, "xb") as handle:
                handle.write(header)
                handle.write(body)
                if self.durable:
                    fsync_file(handle)
            offsets_hash = hashlib.sha256(header)
            offsets_hash.update(body)
            rename_atomically(self._tokens_tmp, os.path.join(self.directory, self.tokens_name))
            rename_atomically(self._offsets_tmp, os.path.join(self.directory, self.offsets_name))
            if self.durable:
                fsync_directory(self.directory)
        except BaseException:
            self.abort()
            raise
        self._done = True
        self._finalizer.detach()
        return {
            "tokens": self.tokens_name,
            "offsets": self.offsets_name,
            "num_documents": self.num_documents,
            "num_tokens": self.num_tokens,
            "tokens_bytes": self.nbytes,
            "offsets_bytes": HEADER_SIZE + len(body),
            "tokens_sha256": self._hash.hexdigest(),
            "offsets_sha256": offsets_hash.hexdigest(),
        }

    def abort(self) -> None:
        """Close and delete the temporary files; idempotent. Committed files are kept."""
        if self._done:
            return
        self._done = True
        with contextlib.suppress(Exception):
            self._stop_helpers()
        self._finalizer()

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.abort()


def write_shard(
    directory: str | os.PathLike[str],
    index: int,
    documents: Iterable[Any],
    *,
    dtype: Any,
    vocab_size: int | None = None,
    first_document: int = 0,
    durable: bool = True,
) -> dict[str, Any]:
    """Validate ``documents``, write them as shard ``index`` and return its manifest entry.

    The one-call form of :class:`ShardWriter` for workers that hold a shard's documents;
    the files appear under their final names only once complete (and fsynced, unless
    ``durable=False``).
    """
    with ShardWriter(directory, index, dtype=dtype, durable=durable) as writer:
        writer.add_documents(documents, first_document=first_document, vocab_size=vocab_size)
        return writer.commit()


def rewrite_shard_dtype(
    directory: str | os.PathLike[str],
    entry: dict[str, Any],
    *,
    from_dtype: Any,
    to_dtype: Any,
    durable: bool = True,
) -> dict[str, Any]:
    """Rewrite a committed shard from ``from_dtype`` to the wider ``to_dtype``.

    Streams the tokens in 16 Mi-id chunks (memory O(chunk)); the offsets are unchanged
    but their header records the new dtype. The new files replace the old ones by
    rename, so the shard is never half-converted on disk. Returns the new entry.
    """
    path = os.fspath(directory)
    old = np.dtype(normalize_dtype(from_dtype)).newbyteorder("<")
    new = normalize_dtype(to_dtype)
    if np.dtype(new).itemsize < old.itemsize:
        raise ArgumentError(f"cannot narrow shard {entry['tokens']} from {old.name} to {new}.")
    check_file_name(entry["tokens"], "`entry['tokens']`")
    check_file_name(entry["offsets"], "`entry['offsets']`")
    # Both files must be regular files of their recorded sizes (a FIFO would block, a
    # device read forever), so the reads below are bounded by the entry.
    with open_regular(
        os.path.join(path, entry["offsets"]), CorpusFormatError, entry["offsets_bytes"]
    ) as handle:
        handle.seek(HEADER_SIZE)
        offsets = np.frombuffer(handle.read(), dtype="<i8")
    if offsets.shape[0] != entry["num_documents"] + 1:
        raise CorpusFormatError(f"{entry['offsets']}: offsets count disagrees with its entry.")
    writer = ShardWriter(path, 0, dtype=new, durable=durable)
    writer.tokens_name, writer.offsets_name = entry["tokens"], entry["offsets"]
    try:
        with open_regular(
            os.path.join(path, entry["tokens"]), CorpusFormatError, entry["tokens_bytes"]
        ) as source:
            while True:
                data = source.read(_COPY_CHUNK * old.itemsize)
                if not data:
                    break
                chunk = np.frombuffer(data, dtype=old).astype(writer._np_dtype)
                writer._write_bytes(chunk)
        writer._lengths = [np.diff(offsets)]
        writer.num_documents = entry["num_documents"]
        writer.num_tokens = entry["num_tokens"]
        return writer.commit()
    except BaseException:
        writer.abort()
        raise
