"""Corpora behind fsspec URLs: lazy per-process filesystems, retries, the remote store.

:class:`RemoteStore` implements :class:`~mixle.corpus.format.store.ShardStore` for any
fsspec URL (``s3://``, ``gs://``, ``az://``, ``https://``, ``memory://`` ...);
:func:`mixle.corpus.storage.open.open_store` builds it for those schemes. Files reach the reader through a
:class:`~mixle.corpus.storage.cache.ShardCache` (``mode="cache"``, the default) or, in
``mode="range"``, documents are fetched by byte ranges (:mod:`mixle.corpus.storage.range_documents`).

Fork safety: a store holds no filesystem when it is created or unpickled;
:func:`mixle.corpus.storage.fs.filesystem` builds one on first use, per process id.

Faults: every remote call, read or write, goes through the store's
:class:`~mixle.corpus.storage.fs.RetryPolicy` (bounded
exponential backoff with jitter on transient errors: connection resets, timeouts,
HTTP 5xx, 408, 429, throttling). Bodies are checked: range reads by length, whole
files by size and SHA-256 against the manifest, and a bad body is refetched. What
still fails raises :class:`~mixle.errors.RemoteError` (or
:class:`~mixle.errors.ChecksumError` for content that is consistently wrong) naming
the URL, the shard and the number of attempts.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from mixle._io import file_sha256
from mixle.corpus.format.manifest import parse_manifest
from mixle.corpus.format.shard_entry import SHARD_FILES, ShardEntry, ShardFile
from mixle.corpus.format.shard_loader import ShardLoader
from mixle.corpus.format.shard_table import ShardTable
from mixle.corpus.format.spec import HEADER_SIZE, MANIFEST_NAME, MAX_MANIFEST_BYTES, OffsetsHeader
from mixle.corpus.format.store import ShardStore
from mixle.corpus.storage.cache import ShardCache, default_cache_dir
from mixle.corpus.storage.cached_documents import CachedShards
from mixle.corpus.storage.download import (
    Landed,
    download_file,
    download_files,
    verified_download_options,
)
from mixle.corpus.storage.fs import (
    DEFAULT_BACKOFF,
    DEFAULT_RETRIES,
    BadResult,
    RetryPolicy,
    filesystem,
    is_async,
)
from mixle.corpus.storage.range_documents import RangeShards
from mixle.errors import (
    ArgumentError,
    ChecksumError,
    CorpusError,
    CorpusFormatError,
    CorpusNotFoundError,
    RemoteError,
)

__all__ = ["MODES", "PREFETCH_SHARDS", "RemoteStore", "check_mode"]

T = TypeVar("T")

MODES = ("cache", "range")
#: Shards a prefetch hint may start downloading ahead of the reader.
PREFETCH_SHARDS = 8


def check_mode(mode: Any) -> str:
    if mode is None:
        return "cache"
    if mode not in MODES:
        raise ArgumentError(f"`mode` must be one of {MODES}. Got {mode!r} instead.")
    return str(mode)


def _retries(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ArgumentError(f"`retries` must be a positive integer. Got {value!r} instead.")
    return value


def _backoff(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 3600:
        raise ArgumentError(f"`backoff` must be a number of seconds >= 0. Got {value!r} instead.")
    return float(value)


class RemoteStore(ShardStore):
    """A corpus under an fsspec URL, read through the shared cache or by ranges.

    Parameters
    ----------
    url
        ``scheme://...`` prefix of the corpus (``manifest.json`` directly under it).
    storage_options
        Passed to the fsspec filesystem (endpoint, anonymous access, ...).
    cache_dir, cache_limit
        The :class:`ShardCache` root (default :func:`default_cache_dir`) and its
        bound in bytes (default unbounded).
    mode
        ``"cache"`` (download shards on first touch, then mmap) or ``"range"``
        (byte-range reads, no local copy of token data).
    retries, backoff
        Attempts per remote operation and the first backoff delay in seconds.
    """

    supports_prefetch = True
    supports_ranges = True
    supports_writes = True
    supports_listing = True
    supports_server_side_copy = True

    def __init__(
        self,
        url: str,
        *,
        storage_options: Mapping[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | None = None,
        mode: str | None = None,
        retries: int = DEFAULT_RETRIES,
        backoff: float = DEFAULT_BACKOFF,
    ) -> None:
        if "://" not in url:
            raise ArgumentError(f"`url` must be a URL with a scheme. Got {url!r} instead.")
        if storage_options is not None and not isinstance(storage_options, Mapping):
            raise ArgumentError(
                f"`storage_options` must be a mapping. Got {type(storage_options).__name__}."
            )
        self.url = url.rstrip("/")
        self.protocol = url.split("://", 1)[0].lower()
        self.storage_options = dict(storage_options or {})
        self.mode = check_mode(mode)
        self.retries = _retries(retries)
        self.backoff = _backoff(backoff)
        self.retry_policy = RetryPolicy(self.retries, self.backoff)
        self.cache = ShardCache(
            os.fspath(cache_dir) if cache_dir is not None else default_cache_dir(), cache_limit
        )
        self.bytes_fetched = 0  # token/offsets bytes fetched by this process (benchmarks)
        self._manifest_bytes: bytes | None = None
        self._entries: dict[
            str, tuple[int, ShardFile, ShardEntry]
        ] = {}  # name -> (shard, kind, entry)
        self._dtype = ""  # the manifest's, once read
        # A version-2 manifest's shards, indexed by file name only when a name is
        # first looked up (the table itself holds no per-shard objects).
        self._table: ShardTable | None = None
        self._files: dict[str, bytes] = {}  # whole files read by read_file (the table)
        self._sizes: dict[str, int] | None = None
        self._prefixes: dict[str, bytes] = {}
        self._prefetching: dict[str, concurrent.futures.Future[str]] = {}
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._pid = os.getpid()
        self._guard = threading.Lock()

    # -- identity and pickling --------------------------------------------------------
    @property
    def location(self) -> str:
        return self.url

    @property
    def options(self) -> Mapping[str, Any]:
        """Keyword arguments of ``open_corpus`` that recreate this store."""
        return {
            "storage_options": dict(self.storage_options),
            "cache_dir": self.cache.directory,
            "cache_limit": self.cache.limit,
            "mode": self.mode,
            "retries": self.retries,
            "backoff": self.backoff,
        }

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.url, dict(self.options)))

    def shard_loader(self) -> ShardLoader:
        """Range reads in ``mode="range"``, else the pinned shared cache."""
        return RangeShards(self) if self.mode == "range" else CachedShards(self)

    @property
    def fs(self) -> Any:
        """This process's filesystem (created lazily, never shared across fork)."""
        return filesystem(self.protocol, self.storage_options)

    def url_of(self, name: str) -> str:
        return f"{self.url}/{name}"

    def describe(self, name: str) -> str:
        """``"shard 3 (shard-00003.tokens)"`` for a shard file, else the name."""
        found = self._entries.get(name)
        return name if found is None else f"shard {found[0]} ({name})"

    def _retry(self, operation: Callable[[], T], name: str, **kwargs: Any) -> T:
        return self.retry_policy.call(
            operation, url=self.url_of(name), what=self.describe(name), **kwargs
        )

    # -- ShardStore -------------------------------------------------------------------
    def read_manifest(self) -> bytes:
        if self._manifest_bytes is not None:
            return self._manifest_bytes
        where = self.url_of(MANIFEST_NAME)

        def invalid(data: bytes) -> BadResult | None:
            try:
                parse_manifest(data, where, self.read_file)
            except CorpusFormatError as exc:
                return BadResult(f"manifest body invalid ({exc})", CorpusFormatError)
            return None

        def fetch() -> bytes:
            data = bytes(self.fs.cat_file(where))
            if len(data) > MAX_MANIFEST_BYTES:  # the bound of every manifest read; final
                raise CorpusFormatError(
                    f"{where}: larger than the {MAX_MANIFEST_BYTES} bytes accepted."
                )
            return data

        try:
            data = self._retry(fetch, MANIFEST_NAME, validate=invalid)
        except FileNotFoundError as exc:
            raise CorpusNotFoundError(
                f"no corpus at {self.url}: {MANIFEST_NAME} is missing "
                "(an interrupted upload leaves no manifest)."
            ) from exc
        except RemoteError as exc:
            if exc.result_error is None:
                raise
            data = fetch()  # consistently bad: let the reader say why
        self._remember(data)
        return data

    def _remember(self, data: bytes) -> None:
        self._manifest_bytes = data
        try:
            manifest = parse_manifest(data, self.url_of(MANIFEST_NAME), self.read_file)
        except CorpusError:
            return
        self._dtype = manifest.dtype
        if isinstance(manifest.shards, ShardTable):
            self._table = manifest.shards  # looked up by name as files are asked for
            return
        for number, entry in enumerate(manifest.shards):
            for kind in SHARD_FILES:
                self._entries[entry.file_name(kind)] = (number, kind, entry)

    def read_file(self, name: str, size: int) -> bytes:
        """The whole file ``name`` (a shard table, the origins sidecar), which must be
        exactly ``size`` bytes; kept for this store.

        The object's size is asked first (one ``HEAD``) and the body is fetched only when
        it matches, so a forged, larger object is never downloaded. (A ranged read past
        the end, ``size + 1`` bytes, is refused by some S3 servers, moto's among them.)
        """
        data = self._files.get(name)
        if data is None:
            url = self.url_of(name)
            try:
                stored = int(self._retry(lambda: self.fs.size(url), name))
                if stored != size:
                    raise CorpusFormatError(f"{url}: {stored} bytes, the manifest says {size}.")
                data = self._retry(lambda: bytes(self.fs.cat_file(url)), name)
            except FileNotFoundError as exc:
                raise CorpusFormatError(f"{url}: missing (the manifest names it).") from exc
            if len(data) != size:
                raise CorpusFormatError(f"{url}: {len(data)} bytes, the manifest says {size}.")
            self._files[name] = data
        return data

    def _entry(self, name: str) -> tuple[int, ShardFile, ShardEntry]:
        found = self._entries.get(name)
        if found is None:
            self.read_manifest()
            found = self._entries.get(name) if self._table is None else self._in_table(name)
        if found is None:
            raise CorpusFormatError(f"{self.url_of(name)}: not a file of this corpus's manifest.")
        return found

    def _in_table(self, name: str) -> tuple[int, ShardFile, ShardEntry] | None:
        """``name``'s shard, kind and entry from the shard table (kept once found)."""
        assert self._table is not None
        located = self._table.locate(name)
        if located is None:
            return None
        number, kind = located
        found = (number, kind, self._table[number])
        self._entries[name] = found
        return found

    def _manifest_header(self, name: str) -> bytes:
        """The header a shard's offsets file must have, from its manifest entry."""
        _, key, entry = self._entry(name)
        if key != "offsets":
            raise CorpusFormatError(f"{self.url_of(name)}: only offsets files have a header.")
        return OffsetsHeader(self._dtype, entry.num_documents, entry.num_tokens).pack()

    def read_prefix(self, name: str, size: int) -> bytes:
        if self.mode == "cache":
            # Opening reads only the manifest: every file's size and SHA-256 (which
            # covers the header) are checked when it is downloaded, before any use.
            return self._manifest_header(name)[:size]
        cached = self._prefixes.pop(name, None)
        if cached is not None and len(cached) >= size:
            return cached[:size]
        if size == HEADER_SIZE and self._entries and not self._prefixes and self._table is None:
            # First header read of an open: fetch every offsets header concurrently.
            names = [
                n for n, (_, key, _) in self._entries.items() if key == "offsets" and n != name
            ]
            if names:
                try:
                    self._prefixes.update(
                        zip(
                            names,
                            self.read_ranges(names, [0] * len(names), [size] * len(names)),
                            strict=True,
                        )
                    )
                except (CorpusError, FileNotFoundError):
                    self._prefixes.clear()  # fall back to one read per file: precise errors
        try:
            return self.read_range(name, 0, size, exact=False)
        except FileNotFoundError as exc:
            raise CorpusFormatError(f"{self.url_of(name)}: shard file missing.") from exc

    def file_size(self, name: str) -> int:
        if self.mode == "cache":  # checked on download (see read_prefix)
            _, key, entry = self._entry(name)
            return entry.file_bytes(key)
        if self._sizes is None:
            # A table's shards are checked one by one as touched: no listing of all.
            self._sizes = self._list_sizes() if self._table is None else {}
        if name in self._sizes:
            return self._sizes[name]
        try:
            size = int(self._retry(lambda: self.fs.size(self.url_of(name)), name))
        except FileNotFoundError as exc:
            raise CorpusFormatError(f"{self.url_of(name)}: shard file missing.") from exc
        self._sizes[name] = size
        return size

    def _list_sizes(self) -> dict[str, int]:
        """Sizes of every manifest file: one listing where the store offers sizes
        (S3, GCS, Azure: one LIST request), else concurrent HEADs (HTTP)."""
        names = sorted(self._entries)
        if not names:
            return {}
        found: dict[str, int] = {}
        if self.protocol not in ("http", "https"):
            try:
                listing = self._retry(
                    lambda: self.fs.ls(self.url, detail=True, refresh=True), "listing"
                )
            except (FileNotFoundError, CorpusError):
                listing = []
            for item in listing:
                base = str(item.get("name", "")).rstrip("/").rsplit("/", 1)[-1]
                if base in self._entries and item.get("size") is not None:
                    found[base] = int(item["size"])
        missing = [n for n in names if n not in found]
        if missing:
            urls = [self.url_of(n) for n in missing]
            try:
                sizes = self._retry(lambda: list(self.fs.sizes(urls)), "file sizes")
                found.update(zip(missing, (int(s) for s in sizes), strict=True))
            except FileNotFoundError:
                pass  # file_size asks one by one and names the missing file
        return found

    def local_path(self, name: str) -> str:
        """Path of ``name`` in the shared cache, downloading it first if needed; pins it."""
        with self._lock():
            future = self._prefetching.pop(name, None)
        if future is not None:
            try:
                return future.result()  # its pin passes to the caller
            except BaseException:
                pass  # fetch again below, for this caller's own error
        return self._fetch(name)

    def release(self, name: str) -> None:
        """Drop the pin that :meth:`local_path` took on ``name``."""
        _, key, entry = self._entry(name)
        self.cache.release(entry.file_sha256(key))

    def _fetch(self, name: str) -> str:
        _number, key, entry = self._entry(name)
        digest, size = entry.file_sha256(key), entry.file_bytes(key)
        return self.cache.get(digest, size, self._downloader(name, size, digest))

    def _downloader(self, name: str, size: int, digest: str) -> Callable[[str], None]:
        """The ``fetch`` callback of :meth:`ShardCache.get` for ``name``."""
        return lambda temporary: self._download(name, temporary, size, digest)

    def _download(self, name: str, temporary: str, size: int, digest: str) -> None:
        """Copy ``name`` to ``temporary``; refetch on a transient error or a bad body.

        On an asynchronous filesystem the body streams to the file and is hashed on
        the way (:func:`~mixle.corpus.storage.download.download_file`); on a
        synchronous one the backend's ``get_file`` (never ``fs.open()``) writes it and
        the file is hashed after. Either way size and SHA-256 are checked against
        the manifest before the cache may publish the file.
        """
        url = self.url_of(name)

        def fetch() -> Landed:
            if is_async(self.fs):
                return download_file(self._download_fs, url, temporary, size)
            self.fs.get_file(url, temporary)
            return Landed(os.stat(temporary).st_size, file_sha256(temporary))

        self._fetch_checked(
            fetch,
            name,
            lambda landed: self._bad_body(landed, size, digest),
            lambda exc: f"{url}: shard file missing.",
        )
        self.bytes_fetched += size

    @property
    def _download_fs(self) -> Any:
        """The filesystem of whole-file downloads: this store's, except that on S3
        botocore's per-response CRC32 is off (every body is checked against the
        manifest's SHA-256 instead: :func:`verified_download_options`)."""
        options = verified_download_options(self.protocol, self.storage_options)
        return self.fs if options is None else filesystem(self.protocol, options)

    @staticmethod
    def _bad_body(landed: Landed, size: int, digest: str) -> BadResult | None:
        """What is wrong with a downloaded body (``None``: it is the manifest's file,
        by size and SHA-256)."""
        if landed.size != size:  # consistently the wrong size: the file changed
            found = (
                f"{landed.size} bytes, the manifest says {size} (truncated)"
                if landed.size < size
                else f"longer than the manifest's {size} bytes"
            )
            return BadResult(f"body is {found}", CorpusFormatError)
        if landed.sha256 != digest:
            return BadResult(
                f"body SHA-256 differs from the manifest's {digest} (corrupted)", ChecksumError
            )
        return None

    def _fetch_batch(
        self, names: Sequence[str], futures: Sequence[concurrent.futures.Future[str]]
    ) -> None:
        """Fetch ``names`` into the cache as one asynchronous batch and resolve ``futures``.

        Each file is pinned, then every missing file this process can claim is
        downloaded by :func:`download_files` on the filesystem's event loop (one
        thread, a few files at a time in hint order, each hashed as it arrives). A
        file is published (:meth:`ShardCache.fill`) and its future resolved the moment
        its size and SHA-256 match the manifest, so the reader starts on the first
        shards while the rest download. A file already cached resolves at once. A
        file that failed or was being downloaded by another process goes through
        :meth:`ShardCache.get` with the usual retries, so its error names the shard. A
        resolved future holds a pin that passes to :meth:`local_path`'s caller; a
        failed one holds none.
        """
        items = [
            (entry.file_sha256(key), entry.file_bytes(key))
            for _, key, entry in (self._entry(name) for name in names)
        ]
        resolved = [False] * len(names)

        def ready(index: int) -> None:
            resolved[index] = True
            futures[index].set_result(self.cache.path(items[index][0]))

        def fetch_many(
            indices: list[int], temporaries: list[str], publish: Callable[[int], None]
        ) -> None:
            def landed(position: int, outcome: Landed | BaseException) -> None:
                digest, size = items[indices[position]]
                if isinstance(outcome, Landed) and self._bad_body(outcome, size, digest) is None:
                    self.bytes_fetched += size
                    publish(position)

            download_files(
                self._download_fs,
                [self.url_of(names[i]) for i in indices],
                temporaries,
                [items[i][1] for i in indices],
                landed,
            )

        pinned: list[str] = []
        try:
            for digest, _ in items:
                self.cache.pin(digest)
                pinned.append(digest)
            self.cache.fill(items, fetch_many, ready)
        except BaseException as exc:
            for index, digest in enumerate(pinned):
                if not resolved[index]:  # a resolved file's pin is its reader's now
                    self.cache.release(digest)
            for index, future in enumerate(futures):
                if not resolved[index]:
                    future.set_exception(exc)
            return
        for name, (digest, size), future, here in zip(names, items, futures, resolved, strict=True):
            if here:
                continue
            try:
                future.set_result(
                    self.cache.get(digest, size, self._downloader(name, size, digest), pin=False)
                )
            except BaseException as exc:
                self.cache.release(digest)
                future.set_exception(exc)

    def _fetch_checked(
        self,
        fetch: Callable[[], T],
        name: str,
        validate: Callable[[T], BadResult | None],
        missing: Callable[[FileNotFoundError], str],
    ) -> T:
        """Retry ``fetch`` until ``validate`` passes; a result still bad after every
        attempt raises its :attr:`BadResult.error` (checksum, format) rather than a
        plain :class:`RemoteError`, and an absent file a :class:`CorpusFormatError`."""
        try:
            return self._retry(fetch, name, validate=validate)
        except FileNotFoundError as exc:
            raise CorpusFormatError(missing(exc)) from exc
        except RemoteError as exc:
            if exc.result_error is not None:
                raise exc.result_error(str(exc)) from exc
            raise

    # -- ranges -----------------------------------------------------------------------
    def read_range(self, name: str, start: int, end: int, *, exact: bool = True) -> bytes:
        """Bytes ``[start, end)`` of ``name`` (one request; never a default-block ``open``)."""
        if end <= start:
            return b""
        url = self.url_of(name)

        def invalid(data: bytes) -> BadResult | None:
            if len(data) == end - start or (not exact and len(data) < end - start):
                return None
            return BadResult(
                f"range [{start}, {end}) returned {len(data)} bytes (truncated or ignored)"
            )

        data = self._retry(
            lambda: bytes(self.fs.cat_file(url, start=start, end=end)), name, validate=invalid
        )
        self.bytes_fetched += len(data)
        return data

    def read_ranges(
        self, names: Sequence[str], starts: Sequence[int], ends: Sequence[int]
    ) -> list[bytes]:
        """Several ranges in one concurrent batch (``cat_ranges``); each length is checked."""
        if not names:
            return []
        urls = [self.url_of(name) for name in names]

        def fetch() -> list[Any]:
            return list(self.fs.cat_ranges(urls, list(starts), list(ends), on_error="return"))

        def invalid(results: list[Any]) -> BadResult | None:
            for position, item in enumerate(results):
                if isinstance(item, FileNotFoundError):
                    raise item
                if isinstance(item, BaseException):
                    return BadResult(
                        f"range {position} of {names[position]} failed: "
                        f"{type(item).__name__}: {item}"
                    )
                if len(item) != ends[position] - starts[position]:
                    return BadResult(
                        f"range [{starts[position]}, {ends[position]}) of {names[position]} "
                        f"returned {len(item)} bytes (truncated)"
                    )
            return None

        results = self._retry(
            fetch, names[0] if len(set(names)) == 1 else f"{len(names)} ranges", validate=invalid
        )
        out = [bytes(item) for item in results]
        self.bytes_fetched += sum(map(len, out))
        return out

    # -- writes and listing (publishing, ingest output, merge) --------------------------
    def write_bytes(self, name: str, data: bytes) -> None:
        """Store ``data`` as ``name`` (one whole-object put, retried; size checked)."""
        target = self.url_of(name)

        def put() -> int:
            self.fs.pipe_file(target, data)
            return int(self.fs.size(target))

        self._retry(put, name, validate=_stored(len(data)))

    def put_file(self, local: str, name: str) -> None:
        """Upload the local file ``local`` as ``name`` (retried; the stored size checked)."""
        target = self.url_of(name)
        size = os.path.getsize(local)

        def put() -> int:
            self.fs.put_file(local, target)
            return int(self.fs.size(target))

        self._retry(put, name, validate=_stored(size))

    def exists(self, name: str) -> bool:
        return bool(self._retry(lambda: self.fs.exists(self.url_of(name)), name))

    def remove(self, name: str) -> None:
        """Remove the object or the tree under ``name`` if it exists."""
        target = self.url_of(name)

        def remove() -> None:
            if self.fs.exists(target):
                self.fs.rm(target, recursive=True)

        self._retry(remove, name)

    def list_sizes(self, prefix: str = "") -> dict[str, int]:
        """One listing (``find``): ``{name relative to prefix: size}`` of every object."""
        base = self.fs._strip_protocol(self.url_of(prefix) if prefix else self.url).rstrip("/")
        try:
            found = self._retry(lambda: self.fs.find(base, detail=True), prefix or "listing")
        except FileNotFoundError:
            return {}
        start = base + "/"
        return {
            name[len(start) :]: int(info["size"])
            for name, info in found.items()
            if name.startswith(start) and info.get("type", "file") == "file"
        }

    def copy(self, source: str, target: str, *, origin: ShardStore | None = None) -> None:
        """Server-side copy of ``source`` (of ``origin``, default this store) to
        ``target`` (retried).

        Raises
        ------
        ArgumentError
            ``origin`` is not a store on this one's fsspec protocol.
        """
        where = self if origin is None else origin
        if not isinstance(where, RemoteStore) or where.protocol != self.protocol:
            raise ArgumentError(
                f"{where.location} is not on the store of {self.url}: a server-side copy "
                "cannot cross stores."
            )
        url = where.url_of(source)
        self._retry(lambda: self.fs.copy(url, self.url_of(target)), source)

    def read_files(self, names: Sequence[str]) -> dict[str, bytes]:
        """The files among ``names`` that exist, fetched concurrently (one ``cat`` of
        them all: the records of a thousand units cost a few round trips); retried."""
        if not names:
            return {}
        strip = self.fs._strip_protocol
        paths = {strip(self.url_of(name)): name for name in names}

        def fetch() -> dict[str, bytes]:
            found: dict[str, bytes] = {}
            for path, value in self.fs.cat(list(paths), on_error="return").items():
                if isinstance(value, FileNotFoundError):
                    continue  # left out: the caller asked for what may exist
                if isinstance(value, BaseException):
                    raise value  # retried when transient
                found[paths[strip(path)]] = bytes(value)
            return found

        return self._retry(fetch, names[0] if len(names) == 1 else f"{len(names)} files")

    # -- prefetch ---------------------------------------------------------------------
    def prefetch_files(self, names: Sequence[str]) -> None:
        """Start downloading ``names`` in the background; pins them until read.

        Never blocks on the network and never raises for a remote problem (the read
        itself will). At most ``2 * PREFETCH_SHARDS`` files are outstanding, taken
        in hint order; finished prefetches that are no longer hinted make room. On an
        asynchronous filesystem the hint's new files are downloaded as one batch
        (:meth:`_fetch_batch`); on a synchronous one, by one pool thread each.
        """
        with self._lock():
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=PREFETCH_SHARDS, thread_name_prefix="mixle-prefetch"
                )
            hinted = set(names)
            batch: list[str] = []
            for name in names:
                if name in self._prefetching or name in batch or name not in self._entries:
                    continue
                if len(self._prefetching) + len(batch) >= 2 * PREFETCH_SHARDS:
                    # Full: make room only by dropping finished prefetches that are no
                    # longer hinted; the hint's order is its priority.
                    stale = next(
                        (n for n, f in self._prefetching.items() if n not in hinted and f.done()),
                        None,
                    )
                    if stale is None:
                        break
                    self._prefetching.pop(stale).add_done_callback(self._unpin_after(stale))
                batch.append(name)
            if not batch:
                return
            if is_async(self.fs):
                # One task drives the whole hint as one asynchronous batch.
                futures = [concurrent.futures.Future[str]() for _ in batch]
                task = self._executor.submit(self._fetch_batch, batch, futures)
                task.add_done_callback(_cancel_if_cancelled(futures))
                self._prefetching.update(zip(batch, futures, strict=True))
            else:  # a synchronous backend: one thread per file
                for name in batch:
                    self._prefetching[name] = self._executor.submit(self._fetch, name)

    def _lock(self) -> threading.Lock:
        """This process's guard; after a fork, drop the parent's prefetches and pool
        (their threads do not exist here) before taking it."""
        if self._pid != os.getpid():
            self._prefetching, self._executor = {}, None
            self._guard = threading.Lock()
            self._pid = os.getpid()
        return self._guard

    def _unpin_after(self, name: str) -> Callable[[concurrent.futures.Future[str]], None]:
        def done(future: concurrent.futures.Future[str]) -> None:
            if not future.cancelled() and future.exception() is None:
                self.release(name)

        return done

    def close(self) -> None:
        """Stop background prefetching and drop its pins (the reader's pins are kept)."""
        with self._lock():
            pending, self._prefetching = self._prefetching, {}
            executor, self._executor = self._executor, None
        for name, future in pending.items():
            future.add_done_callback(self._unpin_after(name))
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)


def _cancel_if_cancelled(
    futures: Sequence[concurrent.futures.Future[str]],
) -> Callable[[concurrent.futures.Future[None]], None]:
    """A batch task cancelled before it ran (``close``) cancels its files' futures."""

    def done(task: concurrent.futures.Future[None]) -> None:
        if task.cancelled():
            for future in futures:
                future.cancel()

    return done


def _stored(size: int) -> Callable[[int], BadResult | None]:
    """``validate`` for an upload: the stored object must have ``size`` bytes."""
    return lambda stored: None if stored == size else BadResult(f"stored {stored} bytes of {size}")


def _rebuild(cls: type, url: str, options: dict[str, Any]) -> Any:
    return cls(url, **options)
