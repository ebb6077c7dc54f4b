"""Whole-file downloads that hash the body as it arrives, on an fsspec event loop.

:func:`download_files` streams each URL of a batch into a local file in the chunks the
connection delivers, updating a SHA-256 with every chunk on the way to the file: the
digest is ready when the last byte lands, with no second pass over the file. Files
run at most ``concurrency`` at a time, started in the batch's order, and each one's
outcome is handed to a callback the moment it finishes, so the first files of a
prefetch hint are verified and readable while the rest are still downloading.
The arrived chunks are hashed in batches of :data:`HASH_BATCH` bytes on a worker
thread (``hashlib`` releases the GIL), in order, from the bytes already in memory:
the event loop, which drives every download, keeps receiving meanwhile.

A body is read at most one byte past the size the caller expects, so a forged,
larger object is never downloaded whole. Nothing here retries or decides what is
valid: the outcome (:class:`Landed`, or the exception) goes to the caller, which
compares it with the manifest (:meth:`mixle.corpus.storage.remote.RemoteStore`).

Backends without ``open_async`` (or whose ``open_async`` does not cover what their
``_get_file`` does, such as s3fs with requester-pays options) are downloaded with
their own ``_get_file`` and the finished file is hashed in a worker thread.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mixle._io import file_sha256

__all__ = [
    "DOWNLOAD_CHUNK",
    "DOWNLOAD_CONCURRENCY",
    "HASH_BATCH",
    "Landed",
    "download_file",
    "download_files",
    "verified_download_options",
]

#: Most bytes asked of a response body per read: a read returns what has arrived
#: (up to this), so each chunk is written and hashed once, as the socket gave it.
DOWNLOAD_CHUNK = 2**20
#: Files of one batch in flight at once, started in the batch's order. On loopback
#: and on a LAN four connections keep the link busy; fewer than the whole batch
#: means the first files finish first instead of all finishing together at the end.
DOWNLOAD_CONCURRENCY = 4
#: Bytes of arrived chunks handed to the hashing thread at once.
HASH_BATCH = 2**21


@dataclass(frozen=True, slots=True)
class Landed:
    """A downloaded file: bytes written and their hex SHA-256 (computed in flight).

    ``size`` stops one past the expected size: a larger object is cut short there.
    """

    size: int
    sha256: str


def verified_download_options(protocol: str, options: dict[str, Any]) -> dict[str, Any] | None:
    """Storage options for downloads whose bodies are checked against a manifest SHA-256.

    For S3, botocore validates each ``GetObject`` body with the object's CRC32 when
    the server sends one (``response_checksum_validation="when_supported"``, the
    default since botocore 1.36): a pure-Python-driven ``zlib.crc32`` over every
    chunk, which costs about as much CPU as the SHA-256 that mixle checks anyway and
    that is strictly stronger. These downloads turn that redundant check off
    (``"when_required"``) unless the caller chose a setting. Returns ``None`` where
    nothing changes (other protocols, or an explicit setting): use the store's
    filesystem as it is.
    """
    if protocol not in ("s3", "s3a"):
        return None
    config = options.get("config_kwargs")
    if config is not None and not isinstance(config, dict):
        return None
    if config is not None and "response_checksum_validation" in config:
        return None
    return {
        **options,
        "config_kwargs": {**(config or {}), "response_checksum_validation": "when_required"},
    }


def _streams(fs: Any) -> bool:
    """Whether ``fs.open_async`` streams the same object ``fs._get_file`` would fetch."""
    if type(fs).open_async is getattr(_base_async(), "open_async", None):
        return False  # the base class's: not implemented
    # s3fs's streamed file sends no extra request arguments (requester pays, SSE-C).
    return not getattr(fs, "req_kw", None)


def _base_async() -> type:
    from fsspec.asyn import AsyncFileSystem

    return AsyncFileSystem


def _open_kwargs(fs: Any, size: int) -> dict[str, Any]:
    from fsspec.implementations.http import HTTPFileSystem

    # HTTP asks the size with a HEAD first unless it is given: the manifest knows it.
    return {"size": size} if isinstance(fs, HTTPFileSystem) else {}


def _update(digest: Any, chunks: list[bytes]) -> None:
    for data in chunks:
        digest.update(data)  # releases the GIL: runs beside the event loop


async def _stream(fs: Any, url: str, path: str, size: int, chunk: int) -> Landed:
    digest = hashlib.sha256()
    written = 0
    loop = asyncio.get_running_loop()
    # Arrived chunks are hashed in batches on a worker thread while the loop keeps
    # receiving: in order (one batch per file at a time), from the bytes already in
    # memory (no second pass over the file), off the thread that drives every download.
    batch: list[bytes] = []
    batched = 0
    hashing: asyncio.Future[None] | None = None
    source = await fs.open_async(url, "rb", **_open_kwargs(fs, size))
    try:
        with open(path, "wb") as sink:
            while written <= size:
                data = await source.read(min(chunk, size + 1 - written))
                if not data:
                    break
                sink.write(data)
                written += len(data)
                batch.append(data)
                batched += len(data)
                if batched >= HASH_BATCH:
                    if hashing is not None:
                        await hashing
                    hashing = loop.run_in_executor(None, _update, digest, batch)
                    batch, batched = [], 0
    finally:
        if hashing is not None:
            await hashing
        body = getattr(source, "r", None)
        if body is not None and hasattr(body, "close"):
            body.close()  # s3fs's streamed file never closes its body itself
        await source.close()
    _update(digest, batch)
    return Landed(written, digest.hexdigest())


async def _fetch(fs: Any, url: str, path: str, size: int, chunk: int) -> Landed:
    if _streams(fs):
        return await _stream(fs, url, path, size, chunk)
    await fs._get_file(url, path)
    written = os.stat(path).st_size
    return Landed(written, await asyncio.to_thread(file_sha256, path))


def download_files(
    fs: Any,
    urls: Sequence[str],
    paths: Sequence[str],
    sizes: Sequence[int],
    landed: Callable[[int, Landed | BaseException], None],
    *,
    concurrency: int = DOWNLOAD_CONCURRENCY,
    chunk: int = DOWNLOAD_CHUNK,
) -> None:
    """Download ``urls[k]`` (expected ``sizes[k]`` bytes) to ``paths[k]`` on ``fs``'s loop.

    ``fs`` must be asynchronous (:func:`mixle.corpus.storage.fs.is_async`). At most
    ``concurrency`` files are in flight, started in order. As each file finishes,
    ``landed(k, outcome)`` runs on the event loop thread with a :class:`Landed` or
    the exception its download raised (no retries here). Returns when every file has
    been handed over.

    Raises
    ------
    BaseException
        The first exception raised by ``landed`` itself (after every download ended).
    """
    from fsspec.asyn import sync

    if concurrency < 1:
        raise ValueError(f"`concurrency` must be >= 1. Got {concurrency} instead.")
    failures: list[BaseException] = []

    async def one(index: int, gate: asyncio.Semaphore) -> None:
        async with gate:
            try:
                outcome: Landed | BaseException = await _fetch(
                    fs, urls[index], paths[index], sizes[index], chunk
                )
            except Exception as exc:  # handed to the caller, which retries or reports
                outcome = exc
        try:
            landed(index, outcome)
        except BaseException as exc:
            failures.append(exc)

    async def run() -> None:
        gate = asyncio.Semaphore(concurrency)  # FIFO: files start in the batch's order
        await asyncio.gather(*(one(index, gate) for index in range(len(urls))))

    sync(fs.loop, run)
    if failures:
        raise failures[0]


def download_file(fs: Any, url: str, path: str, size: int) -> Landed:
    """One file through :func:`download_files`; its download's exception is raised."""
    outcomes: list[Landed | BaseException] = []
    download_files(fs, [url], [path], [size], lambda _, outcome: outcomes.append(outcome))
    if isinstance(outcomes[0], BaseException):
        raise outcomes[0]
    return outcomes[0]
