"""CorpusWriter: stream documents into a sharded corpus, commit atomically.

Built from the two low-level pieces that the parallel ingest also uses:
:class:`~mixle.corpus.format.shard.ShardWriter` (one crash-safe shard) and
:func:`~mixle.corpus.format.manifest.commit_manifest` (publish, last).
"""

from __future__ import annotations

import contextlib
import fnmatch
import itertools
import operator
import os
import weakref
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any

import numpy as np

from mixle._checks import positive_int
from mixle._io import fsync_directory
from mixle.corpus.format.block_offsets import (
    BLOCK_OFFSETS_KEY,
    BLOCK_OFFSETS_NAME,
    BlockOffsetsRecorder,
)
from mixle.corpus.format.document_offsets import DOCUMENT_OFFSETS_KEY, DOCUMENT_OFFSETS_NAME
from mixle.corpus.format.encode import (
    EncodedBatch,
    as_integer_document,
    as_integer_ids,
    check_encoded,
    encode_documents,
    narrow,
    needed_dtype,
)
from mixle.corpus.format.manifest import Manifest, write_manifest
from mixle.corpus.format.scale_sidecars import (
    LocalOffsetsFiles,
    sidecar_flag,
    write_scale_sidecars,
)
from mixle.corpus.format.shard import ShardWriter, rewrite_shard_dtype
from mixle.corpus.format.shard_table import SHARD_TABLE_NAME
from mixle.corpus.format.spec import MANIFEST_NAME, dtype_limit, normalize_dtype, resolve_dtype
from mixle.errors import ArgumentError, CorpusError, CorpusExistsError, TokenIdError

__all__ = ["DEFAULT_SHARD_MAX_BYTES", "SHARD_TABLE_MIN_SHARDS", "CorpusWriter"]

#: Default cap on a shard's ``.tokens`` file (a single larger document gets its own shard).
DEFAULT_SHARD_MAX_BYTES = 256 * 1024 * 1024
#: From this many shards on, ``shard_table=None`` writes a version-2 manifest (a binary
#: shard table beside a small JSON manifest): a version-1 manifest of 1,024 shards is
#: ~360 KB of JSON, opened in ~40 ms; one of 10^5 shards is 35 MB and seconds.
SHARD_TABLE_MIN_SHARDS = 1024
# Documents are validated and written in batches of about this many ids: large enough
# to amortize per-call overhead, small enough that memory stays O(batch).
_BATCH_TOKENS = 1 << 22
# add_many takes documents from its iterable in chunks of at most this many (fewer when
# they are long) and type-checks each chunk in bulk.
_CHUNK_DOCUMENTS = 1024
_NDIM = operator.attrgetter("ndim")
_DTYPE = operator.attrgetter("dtype")


def _cleanup(directory: str, names: list[str]) -> None:
    for name in names:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(directory, name))


class CorpusWriter:
    """Write a sharded corpus by appending documents; publish it on clean exit.

    Parameters
    ----------
    path
        Corpus directory (created, with parents, if missing).
    vocab_size
        Number of token ids; every id must be ``< vocab_size``. Picks the dtype when
        ``dtype`` is not given.
    dtype
        ``"uint16"``, ``"uint32"`` or ``"int64"``. When neither this nor ``vocab_size``
        is given the dtype is the smallest that holds every id seen (shards already
        written are rewritten once if a later id needs a wider type).
    shard_max_bytes
        Roll over to a new shard before a ``.tokens`` file would exceed this size. A
        document larger than this gets a shard of its own.
    overwrite
        Replace an existing corpus. Its manifest is removed when the first new shard is
        written, so readers see either the old corpus, no corpus, or the new one.
    metadata
        Free-form JSON object stored in the manifest (strings, ints, bools, null,
        lists, objects).
    durable
        fsync every shard before publishing (default). Renames are atomic either way,
        so a killed process never leaves a corrupt corpus; ``False`` only gives up
        survival of an OS crash or power loss, for scratch corpora.
    shard_table
        ``True``: list the shards in a binary shard table (a version-2 manifest,
        ``docs/format.md`` section 14); ``False``: in ``manifest.json`` (version 1,
        readable by every mixle release); ``None`` (default): a table from
        :data:`SHARD_TABLE_MIN_SHARDS` shards on.
    block_offsets
        ``True``: write the block-offsets sidecar (``docs/format.md``, "Block-offsets
        sidecar": the cumulative token offset at every 4096th document, which a
        ``"blocks"`` epoch order reads instead of the offsets files); ``False``: none;
        ``None`` (default): one from ``BLOCK_OFFSETS_MIN_DOCUMENTS`` (2^24) documents on.
        The writer owns ``metadata["block_offsets"]``: a value passed in is replaced
        (or dropped, without a sidecar).
    document_offsets
        ``True``: write the document-offsets sidecar (``docs/format.md``,
        "Document-offsets sidecar": every document's cumulative token offset in one
        file, read instead of many small offsets files); ``False``: none; ``None``
        (default): one for corpora of 1,024 shards or more that hold fewer than 4,096
        documents per shard on average. Written at commit from the offsets files (one
        lean pass); the writer owns ``metadata["document_offsets"]`` likewise.

    Raises
    ------
    CorpusExistsError
        ``path`` already holds a corpus and ``overwrite`` is false, or is a file.
    ArgumentError
        An argument is invalid (see :func:`mixle._checks.positive_int`).

    Notes
    -----
    Memory is O(one batch of ids + 8 bytes per document of the open shard); tokens go
    straight to disk. On a clean ``with`` exit (or :meth:`commit`) every shard is
    fsynced and renamed and ``manifest.json`` is written last, atomically. On an
    exception, :meth:`abort`, or garbage collection without commit, no manifest is
    written and every file this writer created is removed.

    Examples
    --------
    >>> with CorpusWriter(tmp_path / "c", vocab_size=50257) as writer:  # doctest: +SKIP
    ...     writer.add_many(documents)
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        vocab_size: int | None = None,
        dtype: Any = None,
        shard_max_bytes: int = DEFAULT_SHARD_MAX_BYTES,
        overwrite: bool = False,
        metadata: Mapping[str, Any] | None = None,
        durable: bool = True,
        shard_table: bool | None = None,
        block_offsets: bool | None = None,
        document_offsets: bool | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self._document_offsets = sidecar_flag("document_offsets", document_offsets)
        self._block_offsets = sidecar_flag("block_offsets", block_offsets)
        self._recorder = BlockOffsetsRecorder()
        if not isinstance(durable, bool):
            raise ArgumentError(f"`durable` must be a bool. Got {durable!r} instead.")
        if shard_table is not None and not isinstance(shard_table, bool):
            raise ArgumentError(
                f"`shard_table` must be True, False or None. Got {shard_table!r} instead."
            )
        self._shard_table = shard_table
        self.durable = durable
        self.vocab_size = None if vocab_size is None else positive_int("vocab_size", vocab_size)
        self._fixed_dtype = resolve_dtype(self.vocab_size, dtype)
        self._dtype = self._fixed_dtype or "uint16"
        self.shard_max_bytes = positive_int("shard_max_bytes", shard_max_bytes)
        if not isinstance(overwrite, bool):
            raise ArgumentError(f"`overwrite` must be a bool. Got {overwrite!r} instead.")
        self._metadata = dict(metadata or {})
        if os.path.exists(self.path) and not os.path.isdir(self.path):
            raise CorpusExistsError(f"{self.path} exists and is not a directory.")
        self._manifest_path = os.path.join(self.path, MANIFEST_NAME)
        if os.path.exists(self._manifest_path) and not overwrite:
            raise CorpusExistsError(
                f"{self.path} already holds a corpus; pass overwrite=True to replace it."
            )
        os.makedirs(self.path, exist_ok=True)
        self._replace_existing = os.path.exists(self._manifest_path)
        self._entries: list[dict[str, Any]] = []
        self._created: list[str] = []
        self._shard: ShardWriter | None = None
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []
        self._pending_tokens = 0
        self._num_documents = 0
        self._closed = False
        self._manifest: dict[str, Any] | None = None
        # Integer dtypes that need no per-element conversion (uint64 does).
        self._accepted_dtypes: set[np.dtype[Any]] = {
            np.dtype(name)
            for name in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32")
        }
        self._finalizer = weakref.finalize(self, _cleanup, self.path, self._created)

    # -- public API ---------------------------------------------------------------
    @property
    def dtype(self) -> np.dtype[Any]:
        """Token dtype in effect (may still widen when it was not fixed up front)."""
        return np.dtype(self._dtype)

    @property
    def num_documents(self) -> int:
        """Documents accepted so far."""
        return self._num_documents

    @property
    def manifest(self) -> dict[str, Any] | None:
        """The committed manifest, or ``None`` before :meth:`commit`."""
        return self._manifest

    def add(self, tokens: Any) -> None:
        """Append one document (any 1-D sequence of integer ids; empty is fine).

        Raises
        ------
        TokenIdError
            An id is negative, fractional, non-finite or too large for
            ``vocab_size``/``dtype``; names the document index, position and value.
            Nothing of this document is written.
        """
        self._add_batch([as_integer_document(tokens, self._num_documents)])

    def add_many(self, documents: Iterable[Any]) -> None:
        """Append every document of ``documents``, validated in batches.

        On an invalid document every document before it is kept and the error names
        its index and position (the writer stays usable). Leaving the ``with`` block
        through the exception discards everything.

        Raises
        ------
        TokenIdError, ArgumentTypeError
            As for :meth:`add`.
        """
        self._check_open()
        iterator = iter(documents)
        batch: list[np.ndarray] = []
        batch_tokens = seen_documents = seen_tokens = 0
        size = 16
        while chunk := list(itertools.islice(iterator, size)):
            if not self._plain(chunk):
                chunk = self._validated(chunk, batch)
            batch += chunk
            tokens = sum(map(len, chunk))
            batch_tokens += tokens
            seen_documents, seen_tokens = seen_documents + len(chunk), seen_tokens + tokens
            if batch_tokens >= _BATCH_TOKENS:
                self._add_batch(batch)
                batch, batch_tokens = [], 0
            # Take about as many documents as fill the batch (a generator's documents
            # are held until written, so memory stays O(batch) for long documents too).
            average = seen_tokens // seen_documents + 1
            size = max(1, min(_CHUNK_DOCUMENTS, (_BATCH_TOKENS - batch_tokens) // average))
        if batch:
            self._add_batch(batch)

    def _plain(self, chunk: list[Any]) -> bool:
        """Whether every document is a 1-D ndarray of an integer dtype seen before.

        Three C-level passes over the chunk instead of a Python loop per document: the
        common case of an ingest (arrays from a tokenizer) costs ~0.1 µs per document.
        """
        return (
            set(map(type, chunk)) == {np.ndarray}
            and set(map(_NDIM, chunk)) == {1}
            and set(map(_DTYPE, chunk)) <= self._accepted_dtypes
        )

    def _validated(self, chunk: list[Any], batch: list[np.ndarray]) -> list[np.ndarray]:
        """Convert ``chunk`` (which follows ``batch``) one document at a time.

        On an invalid document, ``batch`` and the documents of ``chunk`` before it are
        added and the error (naming the document's index) is raised.
        """
        index = self._num_documents + len(batch)
        arrays: list[np.ndarray] = []
        for document in chunk:
            try:
                array = as_integer_document(document, index + len(arrays))
            except CorpusError:
                if batch or arrays:
                    self._add_batch(batch + arrays)
                raise
            if array.dtype.kind in "iu":
                self._accepted_dtypes.add(array.dtype)
            arrays.append(array)
        return arrays

    def commit(self) -> dict[str, Any]:
        """Flush, fsync and rename the last shard, then write ``manifest.json``; return it."""
        self._check_open()
        try:
            self._flush()
            if self._shard is not None and self._shard.num_documents:
                self._finish_shard()
            elif self._shard is not None:
                self._shard.abort()
                self._shard = None
            if self._replace_existing:
                self._drop_old_manifest()
            table = (
                len(self._entries) >= SHARD_TABLE_MIN_SHARDS
                if self._shard_table is None
                else self._shard_table
            )
            shards = Manifest.build(
                self._entries, dtype=self._dtype, vocab_size=self.vocab_size
            ).shards
            # Listed before they are written: an abort removes whatever got written.
            self._created.extend((BLOCK_OFFSETS_NAME, DOCUMENT_OFFSETS_NAME))
            write_scale_sidecars(
                self.path,
                LocalOffsetsFiles(self.path, shards),
                self._metadata,
                block_offsets=self._block_offsets,
                document_offsets=self._document_offsets,
                recorded=self._recorder,
            )
            manifest = Manifest.build(
                self._entries,
                dtype=self._dtype,
                vocab_size=self.vocab_size,
                metadata=self._metadata,
                shard_table=table,
            )
            write_manifest(self.path, manifest)
        except BaseException:
            self.abort()
            raise
        self._closed = True
        self._finalizer.detach()
        self._remove_stale_shards(manifest)
        self._manifest = manifest.to_dict()
        return self._manifest

    def abort(self) -> None:
        """Discard everything written; no manifest appears. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._shard is not None:
            self._shard.abort()
            self._shard = None
        self._pending = []
        self._finalizer()

    def __enter__(self) -> CorpusWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None:
            if not self._closed:
                self.commit()
        else:
            self.abort()

    # -- internals ----------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ArgumentError(f"CorpusWriter for {self.path} is already committed or aborted.")

    def add_flat(self, tokens: Any, lengths: Any) -> None:
        """Append ``len(lengths)`` documents whose ids, concatenated, are ``tokens``.

        The bulk form of :meth:`add_many`, vectorised end to end (no Python work per
        document): document ``j`` of the call is
        ``tokens[sum(lengths[:j]) : sum(lengths[:j + 1])]``. Writes the same bytes as
        ``add_many`` of those documents whenever the dtype does not widen on the way
        (``vocab_size`` or ``dtype`` given, or every id below 65536); empty documents
        are allowed. ``tokens`` may be reused by the caller once this returns.

        Parameters
        ----------
        tokens
            1-D array of integer ids (any integer dtype; integral floats are accepted
            exactly, as by :meth:`add`).
        lengths
            1-D array of nonnegative integer document lengths adding up to
            ``len(tokens)``.

        Raises
        ------
        ArgumentError
            ``lengths`` is not a 1-D array of nonnegative integers adding up to
            ``len(tokens)``; nothing is written.
        TokenIdError, ArgumentTypeError
            As for :meth:`add`; the documents before the invalid one are kept.
        """
        self._check_open()
        ids = as_integer_ids(tokens, "`tokens`")
        sizes = np.asarray(lengths)
        if sizes.ndim != 1 or (sizes.size and sizes.dtype.kind not in "iu"):
            raise ArgumentError(
                f"`lengths` must be a 1-D array of integers. Got dtype {sizes.dtype}, "
                f"shape {sizes.shape} instead."
            )
        sizes = sizes.astype(np.int64)
        if sizes.size and int(sizes.min()) < 0:
            position = int(np.flatnonzero(sizes < 0)[0])
            raise ArgumentError(
                f"`lengths[{position}]` must be nonnegative. Got {int(sizes[position])} instead."
            )
        if int(sizes.sum()) != ids.shape[0]:
            raise ArgumentError(
                f"`lengths` add up to {int(sizes.sum())}, but `tokens` holds {ids.shape[0]} ids."
            )
        limit = self._limit()
        try:
            batch = check_encoded(ids, sizes, self._num_documents, limit)
        except TokenIdError as error:
            valid = (self._num_documents if error.document is None else error.document) - (
                self._num_documents
            )
            if valid > 0:
                kept = int(sizes[:valid].sum())
                self._add_encoded(
                    check_encoded(ids[:kept], sizes[:valid], self._num_documents, limit), ids
                )
            raise
        self._add_encoded(batch, ids)

    def _limit(self) -> int | None:
        """Exclusive bound on ids: ``vocab_size`` or the fixed dtype's, else none yet."""
        return self.vocab_size or (dtype_limit(self._fixed_dtype) if self._fixed_dtype else None)

    def _add_batch(self, arrays: list[np.ndarray]) -> None:
        self._check_open()
        try:
            batch = encode_documents(
                arrays, first_document=self._num_documents, limit=self._limit()
            )
        except TokenIdError as error:
            bad = self._num_documents if error.document is None else error.document
            valid = bad - self._num_documents
            if valid > 0:
                self._add_batch(arrays[:valid])
            raise
        self._add_encoded(batch, arrays[0] if len(arrays) == 1 else None)

    def _add_encoded(self, batch: EncodedBatch, caller: np.ndarray | None) -> None:
        """Widen if needed, narrow and write (or gather) a validated batch.

        ``caller`` is an array of the caller's that ``batch.tokens`` may share memory
        with; such tokens are never hashed in the background or held after return.
        """
        if self._fixed_dtype is None and batch.max_id >= dtype_limit(self._dtype):
            self._flush()
            self._widen(needed_dtype(batch.max_id))
        tokens = narrow(batch.tokens, self._dtype, batch.max_id)
        self._num_documents += batch.lengths.shape[0]
        shared = caller is not None and np.may_share_memory(tokens, caller)
        if tokens.shape[0] >= _BATCH_TOKENS and not self._pending:
            self._write(tokens, batch.lengths, owned=not shared)
            return
        # Small additions are gathered so the files see few large writes. The tokens
        # may still be the caller's own array: copy them, since the caller may reuse
        # it before the flush.
        if shared:
            tokens = tokens.copy()
        self._pending.append((tokens, batch.lengths))
        self._pending_tokens += tokens.shape[0] + batch.lengths.shape[0]
        if self._pending_tokens >= _BATCH_TOKENS:
            self._flush()

    def _write(self, tokens: np.ndarray, lengths: np.ndarray, *, owned: bool = True) -> None:
        """Split a validated batch at shard boundaries and stream it out.

        ``owned``: ``tokens`` is private to this writer (not the caller's array), so its
        checksum may finish in the background.
        """
        itemsize = tokens.dtype.itemsize
        ends = np.cumsum(lengths, dtype=np.int64)
        self._recorder.record(lengths, ends)
        first, token_start, count = 0, 0, lengths.shape[0]
        while first < count:
            shard = self._shard or self._open_shard()
            room = max(self.shard_max_bytes - shard.nbytes, 0) // itemsize
            # Documents first..last-1 fit in the room left (by cumulative length).
            base = int(ends[first - 1]) if first else 0
            last = max(int(np.searchsorted(ends, base + room, side="right")), first)
            if last == first:
                if shard.num_documents:
                    self._finish_shard()
                    continue
                last = first + 1  # an oversized document gets its own shard
            token_end = int(ends[last - 1])
            shard.write(tokens[token_start:token_end], lengths[first:last], owned=owned)
            first, token_start = last, token_end

    def _open_shard(self) -> ShardWriter:
        if self._replace_existing:
            self._drop_old_manifest()
        shard = ShardWriter(self.path, len(self._entries), dtype=self._dtype, durable=self.durable)
        self._shard = shard
        return shard

    def _finish_shard(self) -> None:
        assert self._shard is not None
        entry = self._shard.commit()
        self._created.extend((entry["tokens"], entry["offsets"]))
        self._entries.append(entry)
        self._shard = None

    def _flush(self) -> None:
        """Write out the documents gathered by small :meth:`add` calls."""
        if not self._pending:
            return
        pending, self._pending, self._pending_tokens = self._pending, [], 0
        if len(pending) == 1:
            tokens, lengths = pending[0]
        else:
            tokens = np.concatenate([item[0] for item in pending])
            lengths = np.concatenate([item[1] for item in pending])
        self._write(tokens, lengths)

    def _widen(self, dtype: str) -> None:
        """Switch to a wider dtype, rewriting the shards already written."""
        if self._shard is not None:
            if self._shard.num_documents:
                self._finish_shard()
            else:
                self._shard.abort()
                self._shard = None
        old = self._dtype
        self._entries = [
            rewrite_shard_dtype(
                self.path, entry, from_dtype=old, to_dtype=dtype, durable=self.durable
            )
            for entry in self._entries
        ]
        self._dtype = normalize_dtype(dtype)

    def _drop_old_manifest(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._manifest_path)
        fsync_directory(self.path)
        self._replace_existing = False

    def _remove_stale_shards(self, manifest: Manifest) -> None:
        """Delete shard files the new manifest does not list (an overwritten corpus's,
        or a crashed writer's) and temporary files left by crashed writers."""
        keep = {name for entry in manifest.shards for name in entry.files}
        for name in os.listdir(self.path):
            shard_file = fnmatch.fnmatch(name, "shard-*.tokens") or fnmatch.fnmatch(
                name, "shard-*.offsets"
            )
            temporary = any(
                fnmatch.fnmatch(name, f".{pattern}.tmp-*")
                for pattern in (
                    "shard-*",
                    MANIFEST_NAME,
                    SHARD_TABLE_NAME,
                    BLOCK_OFFSETS_NAME,
                    DOCUMENT_OFFSETS_NAME,
                )
            )
            stale_table = name == SHARD_TABLE_NAME and manifest.shard_table is None
            stale_table |= name == BLOCK_OFFSETS_NAME and BLOCK_OFFSETS_KEY not in manifest.metadata
            stale_table |= (
                name == DOCUMENT_OFFSETS_NAME and DOCUMENT_OFFSETS_KEY not in manifest.metadata
            )
            if (shard_file and name not in keep) or temporary or stale_table:
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(self.path, name))
