"""The zarr v3 layout: the same shards, compressed, for storage and transfer.

A zarr corpus is a zarr v3 group::

    zarr.json                      group metadata; attributes["mixle"] holds the manifest
    shard-00000.tokens/            1-D array of the corpus dtype (the .tokens file's ids)
    shard-00000.offsets/           1-D int64 array: the offsets (without the 32-byte header)
    ...
    origins.bin/                   1-D uint8 array: the origins sidecar's bytes, when the
                                   manifest names one (checked against its SHA-256)

Each array uses the sharding codec (inner chunks of :data:`CHUNK_ELEMENTS` ids,
:data:`SHARD_CHUNKS` chunks per stored object) with zstd. The manifest is the raw
layout's manifest, unchanged: checksums and fingerprint are those of the raw files,
so a shard decoded from zarr is checked byte for byte against it, and a corpus has
one fingerprint whatever its layout. The group attributes are written last.

Reading (:class:`ZarrStore`) never decodes per document: random per-document reads
through zarr cost ~0.8 ms each against ~2 µs for mmap (DESIGN.md, known traps).
The first touch of a shard fetches its stored objects (through the same retrying
fsspec layer as raw remote corpora), decodes the whole arrays in memory, writes
the raw ``.tokens`` / ``.offsets`` bytes into the shared shard cache (checked
against the manifest SHA-256) and memory-maps them from there.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from mixle._safe_json import loads_bounded
from mixle.corpus.format.block_offsets import BLOCK_OFFSETS_KEY
from mixle.corpus.format.document_offsets import DOCUMENT_OFFSETS_KEY
from mixle.corpus.format.manifest import Manifest
from mixle.corpus.format.origins import ORIGINS_NAME, sidecar_reference
from mixle.corpus.format.spec import HEADER_SIZE, OffsetsHeader
from mixle.corpus.storage.fs import BadResult
from mixle.corpus.storage.remote import RemoteStore
from mixle.corpus.storage.zarr_checks import check_array_metadata
from mixle.errors import (
    ArgumentError,
    ChecksumError,
    CorpusFormatError,
    CorpusNotFoundError,
)

__all__ = ["CHUNK_ELEMENTS", "SHARD_CHUNKS", "ZarrStore", "looks_like_zarr", "write_zarr_group"]

#: Ids per zarr chunk (the unit of compression). 256 Ki ids = 512 KiB of uint16.
CHUNK_ELEMENTS = 256 * 1024
#: Chunks per stored object (the unit of transfer): 64 x 512 KiB = 32 MiB of uint16.
SHARD_CHUNKS = 64
ZSTD_LEVEL = 3
LAYOUT_NAME = "mixle-zarr"
LAYOUT_VERSION = 1
GROUP_META = "zarr.json"


def _array_geometry(length: int) -> tuple[int, int]:
    chunk = max(1, min(CHUNK_ELEMENTS, length))
    shard = chunk * max(1, min(SHARD_CHUNKS, math.ceil(length / chunk) if length else 1))
    return chunk, shard


def write_zarr_group(
    documents: Any, directory: str, *, zstd_level: int = ZSTD_LEVEL
) -> dict[str, Any]:
    """Write the zarr layout of an opened corpus ``documents`` into local ``directory``.

    Reads each shard through its store's ``local_path`` (one shard at a time, so
    memory is O(one shard)); the group attributes with the manifest go last.
    Returns the manifest.
    """
    import zarr
    from zarr.codecs import ZstdCodec
    from zarr.storage import LocalStore

    parsed: Manifest = documents.parsed_manifest
    store = documents.store
    group = zarr.open_group(LocalStore(directory), mode="w", zarr_format=3)
    dtype = np.dtype(parsed.dtype).newbyteorder("<")
    arrays: list[tuple[str, np.ndarray]] = []
    reference = sidecar_reference(parsed.metadata)
    if reference is not None:  # checked as read_origins checks it: never copy a forged one
        data = bytes(store.read_file(ORIGINS_NAME, reference["bytes"]))
        if hashlib.sha256(data).hexdigest() != reference["sha256"]:
            raise CorpusFormatError(
                f"{store.location}/{ORIGINS_NAME}: its SHA-256 is not the manifest's."
            )
        arrays.append((ORIGINS_NAME, np.frombuffer(data, dtype=np.uint8)))
    for entry in parsed.shards:
        tokens_path = store.local_path(entry.tokens)
        offsets_path = store.local_path(entry.offsets)
        try:
            tokens = (
                np.fromfile(tokens_path, dtype=dtype) if entry.tokens_bytes else np.empty(0, dtype)
            )
            offsets = np.fromfile(offsets_path, dtype="<i8", offset=HEADER_SIZE)
        finally:
            store.release(entry.tokens)
            store.release(entry.offsets)
        arrays += [(entry.tokens, tokens), (entry.offsets, offsets)]
        for name, values in arrays:
            chunk, shard = _array_geometry(values.shape[0])
            array = group.create_array(
                name,
                shape=values.shape,
                dtype=values.dtype,
                chunks=(chunk,),
                shards=(shard,),
                compressors=ZstdCodec(level=zstd_level),
                fill_value=0,
                # Every stored object exists, so a missing one is an error, not zeros.
                config={"write_empty_chunks": True},
            )
            if values.shape[0]:
                array[:] = values
        arrays = []
    if parsed.shard_table is not None:
        # The group attributes carry the manifest itself: as the version-1 list of the
        # same shards (same fingerprint), since there is no file beside it for a table.
        parsed = parsed.with_shard_table(False)
    derived = (BLOCK_OFFSETS_KEY, DOCUMENT_OFFSETS_KEY)
    if any(key in parsed.metadata for key in derived):
        # No file beside the group for the block- or document-offsets sidecars either:
        # the zarr corpus reads its offsets from its offsets arrays.
        metadata = {k: v for k, v in parsed.metadata.items() if k not in derived}
        parsed = Manifest.build(
            parsed.shards, dtype=parsed.dtype, vocab_size=parsed.vocab_size, metadata=metadata
        )
    manifest = parsed.to_dict()
    group.attrs["mixle"] = {
        "layout": LAYOUT_NAME,
        "layout_version": LAYOUT_VERSION,
        "manifest": manifest,
    }
    return manifest


def looks_like_zarr(store: RemoteStore) -> bool:
    """Whether ``store``'s URL holds a zarr group (a ``zarr.json`` at its root)."""
    try:
        return bool(store.fs.exists(store.url_of(GROUP_META)))
    except Exception:  # a probe for a better error message must not raise its own
        return False


class ZarrStore(RemoteStore):
    """A :class:`ShardStore` over a zarr corpus (local ``file://`` or any fsspec URL).

    Headers and file sizes come from the manifest; :meth:`local_path` decodes a shard
    into the shared cache (see the module docstring). Only ``mode="cache"``.
    """

    def __init__(self, url: str, **options: Any) -> None:
        if options.get("mode") == "range":
            raise ArgumentError(
                "`mode='range'` reads the raw layout by byte ranges; a zarr corpus is read "
                "through the cache (convert it with layout='raw' for range reads)."
            )
        super().__init__(url, **options)

    @property
    def location(self) -> str:
        return self.url[len("file://") :] if self.protocol == "file" else self.url

    def read_manifest(self) -> bytes:
        if self._manifest_bytes is not None:
            return self._manifest_bytes
        where = self.url_of(GROUP_META)
        try:
            raw = self._retry(lambda: bytes(self.fs.cat_file(where)), GROUP_META)
        except FileNotFoundError as exc:
            raise CorpusNotFoundError(f"no corpus at {self.url}: {GROUP_META} is missing.") from exc
        group = loads_bounded(raw, where, CorpusFormatError)
        if not isinstance(group, dict):
            raise CorpusFormatError(f"{where}: not valid zarr group metadata (not an object).")
        attributes = group.get("attributes", {})
        info = attributes.get("mixle") if isinstance(attributes, dict) else None
        if not isinstance(info, dict) or "manifest" not in info:
            raise CorpusNotFoundError(
                f"no corpus at {self.url}: a zarr group without a mixle manifest "
                "(not a mixle corpus, or its conversion was interrupted)."
            )
        if info.get("layout") != LAYOUT_NAME or info.get("layout_version") != LAYOUT_VERSION:
            raise CorpusFormatError(
                f"{where}: unsupported layout {info.get('layout')!r} version "
                f"{info.get('layout_version')!r} (this reader knows {LAYOUT_NAME} {LAYOUT_VERSION})."
            )
        data = json.dumps(info["manifest"]).encode("utf-8")
        self._remember(data)
        return data

    def read_prefix(self, name: str, size: int) -> bytes:
        # The zarr layout stores offsets without their header; it is a function of the
        # manifest entry, and the decoded file is checked against the SHA-256 anyway.
        return self._manifest_header(name)[:size]

    def file_size(self, name: str) -> int:
        _, key, entry = self._entry(name)
        return entry.file_bytes(key)

    def read_file(self, name: str, size: int) -> bytes:
        """The origins sidecar, decoded from its ``uint8`` array (``size`` elements); any
        other file as :meth:`RemoteStore.read_file` reads it."""
        if name != ORIGINS_NAME:
            return super().read_file(name, size)
        data = self._files.get(name)
        if data is None:
            try:
                objects = self._retry(lambda: self._array_objects(name, size, "uint8"), name)
            except FileNotFoundError as exc:
                raise CorpusFormatError(
                    f"{self.url_of(name)}: missing (the manifest names it; {exc})."
                ) from exc
            try:
                data = _decode_array(objects)
            except Exception as exc:  # the codec's own errors: a damaged object
                raise CorpusFormatError(
                    f"{self.url_of(name)}: does not decode ({type(exc).__name__}: {exc})."
                ) from exc
            self._files[name] = data
        return data

    def _array_objects(self, name: str, length: int, dtype: str) -> dict[str, bytes]:
        """The stored objects of array ``name`` (``length`` elements of ``dtype``): its
        metadata (checked before any decode allocates) and every shard object."""
        _, shard = _array_geometry(length)
        keys = [GROUP_META] + [f"c/{i}" for i in range(math.ceil(length / shard))]
        urls = [f"{self.url_of(name)}/{k}" for k in keys]
        nones: list[Any] = [None] * len(urls)
        results = self.fs.cat_ranges(urls, nones, list(nones), on_error="return")
        out = {}
        for url, k, body in zip(urls, keys, results, strict=True):
            if isinstance(body, FileNotFoundError):
                raise FileNotFoundError(url)
            if isinstance(body, BaseException):
                raise body
            out[k] = bytes(body)
        check_array_metadata(out[GROUP_META], urls[0], length, dtype)
        return out

    def _download(self, name: str, temporary: str, size: int, digest: str) -> None:
        """Fetch array ``name``'s objects, decode it whole and write its raw file bytes."""
        _, key, entry = self._entry(name)
        length = entry.num_tokens if key == "tokens" else entry.num_documents + 1
        dtype = "int64" if key == "offsets" else self._dtype

        def fetch() -> dict[str, bytes]:
            return self._array_objects(name, length, dtype)

        def decode(objects: dict[str, bytes]) -> BadResult | None:
            try:
                raw = _decode_array(objects)
            except Exception as exc:  # a corrupt object fails in the codec: refetch
                return BadResult(
                    f"objects of {name} do not decode ({type(exc).__name__}: {exc})",
                    CorpusFormatError,  # consistently undecodable: a damaged object
                )
            if key == "offsets":
                header = OffsetsHeader(self._dtype, entry.num_documents, entry.num_tokens)
                raw = header.pack() + raw
            with open(temporary, "wb") as handle:
                handle.write(raw)
            if len(raw) != size:
                return BadResult(
                    f"decoded {len(raw)} bytes, the manifest says {size}", CorpusFormatError
                )
            if hashlib.sha256(raw).hexdigest() != digest:
                return BadResult(
                    f"decoded bytes' SHA-256 differs from the manifest's {digest} (corrupted)",
                    ChecksumError,
                )
            return None

        self._fetch_checked(
            fetch, name, decode, lambda exc: f"{self.url_of(name)}: zarr object missing ({exc})."
        )
        self.bytes_fetched += size


def _decode_array(objects: Mapping[str, bytes]) -> bytes:
    import zarr
    from zarr.core.buffer import default_buffer_prototype
    from zarr.storage import MemoryStore

    prototype = default_buffer_prototype()
    store = MemoryStore({k: prototype.buffer.from_bytes(v) for k, v in objects.items()})
    array = zarr.open_array(store, mode="r", zarr_format=3)
    values = np.asarray(array[:])
    return values.astype(values.dtype.newbyteorder("<"), copy=False).tobytes()
