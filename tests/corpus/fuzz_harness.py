"""Mutation fuzzing of every ingest input format and corpus file kind (issue #18).

Run as ``python -m tests.corpus.fuzz_harness KIND COUNT SEED``: writes a valid seed
file of ``KIND``, then ``COUNT`` times mutates it (bit flips, truncation, splices,
interesting integers, zeroed or duplicated ranges), reads it through mixle under a
per-input timeout and compares every id mixle accepted with an independent
reference reader. Prints one JSON line of counts:

``inputs``
    mutated inputs tried.
``clean``
    inputs that mixle reported with its own error (``CorpusError``) or as rejects.
``raw``
    inputs where any other exception escaped (the first few are listed in ``examples``).
``hangs``
    inputs that did not finish within the per-input timeout.
``wrong``
    inputs where an id mixle accepted differs from the reference (silent corruption).
``accepted``
    documents mixle accepted (all checked against the reference).

Input kinds: ``jsonl``, ``jsonl.gz``, ``npy``, ``npz``, ``parquet``, ``text``,
``megatron``. Corpus kinds: ``manifest.json``, ``offsets``, ``tokens``, ``zarr.json``,
``shards.table`` (the version-2 shard table, mutated and then re-sealed: its size and
SHA-256 and the manifest's checksum are recomputed, so the mutation reaches the
table's parser instead of stopping at the digest).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tests.corpus.hardening_helpers import Hang, deadline

INPUT_KINDS = ("jsonl", "jsonl.gz", "npy", "npz", "parquet", "text", "megatron")
CORPUS_KINDS = ("manifest.json", "offsets", "tokens", "zarr.json", "shards.table")
PER_INPUT_SECONDS = 10.0
# Seed documents: ids up to 2**62 for the formats that hold int64, so a float64 path
# or a narrowing cast would change them.
_WIDE = [[1, 2, 3], [2**53 + 1, 2**60 + 3], [], [2**62, 7], [5] * 40, [9, 8, 7, 6]]
_NARROW = [[1, 2, 3], [65535, 0], [], [400, 7], [5] * 40, [9, 8, 7, 6]]
_INTERESTING = [0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 2**31 - 1, 2**32 - 1, 2**63 - 1, 2**64 - 1]


def mutate(data: bytes, rng: random.Random) -> bytes:
    """Return ``data`` with 1-4 random structural or byte-level mutations."""
    buffer = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        size = len(buffer)
        op = rng.randrange(8)
        at = rng.randrange(size + 1) if size else 0
        if op == 0 and size:  # flip bits
            buffer[min(at, size - 1)] ^= 1 << rng.randrange(8)
        elif op == 1:  # truncate
            del buffer[at:]
        elif op == 2 and size:  # random bytes
            for _ in range(rng.randint(1, 8)):
                buffer[rng.randrange(size)] = rng.randrange(256)
        elif op == 3:  # insert junk
            buffer[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif op == 4 and size:  # interesting integer
            value = rng.choice(_INTERESTING)
            width = rng.choice((1, 2, 4, 8))
            packed = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
            buffer[at : at + width] = packed
        elif op == 5 and size:  # zero a range
            end = min(size, at + rng.randint(1, 32))
            buffer[at:end] = bytes(end - at)
        elif op == 6 and size:  # duplicate a range
            end = min(size, at + rng.randint(1, 64))
            buffer[at:at] = buffer[at:end]
        elif op == 7 and size:  # delete a range
            del buffer[at : min(size, at + rng.randint(1, 32))]
    return bytes(buffer)


# -- seeds -------------------------------------------------------------------------
def _seed_input(kind: str, directory: str) -> dict[str, bytes]:
    """Return ``{file name: bytes}`` of a valid input of ``kind``."""
    if kind in ("jsonl", "jsonl.gz"):
        text = "".join(json.dumps({"input_ids": doc}) + "\n" for doc in _WIDE).encode()
        return {"in.jsonl": text} if kind == "jsonl" else {"in.jsonl.gz": gzip.compress(text)}
    if kind == "npy":
        handle = io.BytesIO()
        np.save(handle, np.asarray(_WIDE[3], dtype=np.int64))
        return {"doc.npy": handle.getvalue()}
    if kind == "npz":
        handle = io.BytesIO()
        # One long document, so the tokens member is larger than zipfile's read-ahead
        # and mixle maps it (checking its CRC-32 itself).
        docs = [*_NARROW, list(range(3000))]
        tokens = np.concatenate([np.asarray(d, dtype=np.uint16) for d in docs])
        offsets = np.cumsum([0] + [len(d) for d in docs]).astype(np.int64)
        np.savez(handle, tokens=tokens, offsets=offsets)
        return {"in.npz": handle.getvalue()}
    if kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        handle = io.BytesIO()
        column = pa.array([*_WIDE, [1, None]], pa.list_(pa.int64()))
        pq.write_table(pa.table({"input_ids": column}), handle, compression="NONE")
        return {"in.parquet": handle.getvalue()}
    if kind == "text":
        text = "first paragraph\nstill first\n\nsecond é paragraph\n\n\nthird\n"
        return {"in.txt": text.encode()}
    if kind == "megatron":
        docs = [np.asarray(d, dtype=np.uint16) for d in _NARROW]
        sizes = np.asarray([len(d) for d in docs], dtype=np.int32)
        pointers = np.concatenate(([0], np.cumsum(sizes[:-1].astype(np.int64) * 2)))
        doc_idx = np.arange(len(docs) + 1, dtype=np.int64)
        header = struct.pack("<9sQBQQ", b"MMIDIDX\x00\x00", 1, 8, len(docs), len(doc_idx))
        idx = header + sizes.tobytes() + pointers.astype("<i8").tobytes() + doc_idx.tobytes()
        return {"in.bin": np.concatenate(docs).tobytes(), "in.idx": idx}
    raise ValueError(kind)


# -- reference readers (independent of mixle) ---------------------------------------
def _ref_record(line: bytes) -> list[int] | None:
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    value = record.get("input_ids", record.get("tokens"))
    if not isinstance(value, list) or not all(type(v) is int for v in value):
        return None
    if not all(-(2**63) <= v < 2**63 for v in value):
        return None
    return value


def _lines_like_readline(data: bytes) -> list[bytes]:
    out, start = [], 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end + 1
        out.append(data[start:end])
        start = end
    return out


def _ref_jsonl_lines(data: bytes) -> dict[tuple[int, int], list[int] | None]:
    lines = _lines_like_readline(data)
    return {(i, 0): _ref_record(line) for i, line in enumerate(lines) if line.strip()}


_NPY_HEADERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
}


def _ref_npy_bytes(data: bytes) -> np.ndarray | None:
    handle = io.BytesIO(data)
    try:
        read_header = _NPY_HEADERS[np.lib.format.read_magic(handle)]
        shape, _, dtype = read_header(handle)
    except Exception:
        return None
    if len(shape) != 1 or dtype.kind not in "iu" or dtype == np.uint64 or dtype.hasobject:
        return None
    if shape[0] * dtype.itemsize != len(data) - handle.tell():
        return None
    return np.frombuffer(data, dtype=dtype, offset=handle.tell(), count=shape[0])


def _ref_npz(data: bytes) -> list[np.ndarray] | None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            arrays = {}
            for name in ("tokens", "offsets"):
                raw = archive.read(f"{name}.npy")
                array = _ref_npy_bytes(raw)
                if array is None:
                    return None
                arrays[name] = array.astype(np.int64)
    except Exception:
        return None
    tokens, offsets = arrays["tokens"], arrays["offsets"]
    if offsets.size < 1 or offsets[0] != 0 or offsets[-1] != tokens.size:
        return None
    if np.any(np.diff(offsets) < 0):
        return None
    return [tokens[offsets[i] : offsets[i + 1]] for i in range(offsets.size - 1)]


def _ref_megatron(bin_data: bytes, idx: bytes) -> list[np.ndarray] | None:
    header = struct.Struct("<9sQBQQ")
    if len(idx) < header.size:
        return None
    magic, version, code, n_seq, n_doc = header.unpack(idx[: header.size])
    dtypes = {1: "u1", 2: "i1", 3: "<i2", 4: "<i4", 5: "<i8", 8: "<u2"}
    if magic != b"MMIDIDX\x00\x00" or version != 1 or code not in dtypes or n_doc < 1:
        return None
    if len(idx) < header.size + 12 * n_seq + 8 * n_doc:
        return None
    sizes = np.frombuffer(idx, "<i4", n_seq, header.size).astype(np.int64)
    pointers = np.frombuffer(idx, "<i8", n_seq, header.size + 4 * n_seq)
    doc_idx = np.frombuffer(idx, "<i8", n_doc, header.size + 12 * n_seq)
    dtype = np.dtype(dtypes[code])
    item = dtype.itemsize
    if len(bin_data) % item or doc_idx[0] != 0 or doc_idx[-1] != n_seq:
        return None
    tokens = np.frombuffer(bin_data, dtype)
    docs = []
    for d in range(n_doc - 1):
        parts = []
        for s in range(int(doc_idx[d]), int(doc_idx[d + 1])):
            if not 0 <= s < n_seq or sizes[s] < 0 or pointers[s] % item:
                return None
            start = int(pointers[s]) // item
            if start < 0 or start + sizes[s] > tokens.size:
                return None
            parts.append(tokens[start : start + int(sizes[s])])
        docs.append(np.concatenate(parts) if parts else np.empty(0, dtype))
    return docs


def _ref_text(data: bytes) -> dict[tuple[int, int], list[int] | None]:
    out: dict[tuple[int, int], list[int] | None] = {}
    block: list[bytes] = []
    first = 0
    lines = _lines_like_readline(data)

    def emit() -> None:
        joined = b"".join(block).rstrip(b"\r\n")
        try:
            out[(0, first)] = list(joined.decode("utf-8").encode("utf-8"))
        except UnicodeDecodeError:
            out[(0, first)] = None

    for number, line in enumerate(lines):
        if not line.strip():
            if block:
                emit()
                block = []
            continue
        if not block:
            first = number
        block.append(line)
    if block:
        emit()
    return out


def _reference(kind: str, files: dict[str, bytes]) -> dict[tuple[int, int], Any]:
    """Expected ids by mixle location; ``None`` marks a record that must be rejected."""
    if kind == "jsonl":
        return _ref_jsonl_lines(files["in.jsonl"])
    if kind == "jsonl.gz":
        try:
            return _ref_jsonl_lines(gzip.decompress(files["in.jsonl.gz"]))
        except Exception:
            return {}  # a damaged stream: nothing may be accepted
    if kind == "npy":
        return {(0, 0): _ref_npy_bytes(files["doc.npy"])}
    if kind == "npz":
        docs = _ref_npz(files["in.npz"])
        return {} if docs is None else {(i, 0): d for i, d in enumerate(docs)}
    if kind == "megatron":
        docs = _ref_megatron(files["in.bin"], files["in.idx"])
        return {} if docs is None else {(i, 0): d for i, d in enumerate(docs)}
    if kind == "parquet":
        import pyarrow.parquet as pq

        try:
            rows = (
                pq.ParquetFile(io.BytesIO(files["in.parquet"]))
                .read_row_group(0, columns=["input_ids"])
                .column("input_ids")
                .to_pylist()
            )
        except Exception:
            return {}
        expected: dict[tuple[int, int], Any] = {}
        for r, row in enumerate(rows):
            ok = isinstance(row, list) and all(type(v) is int for v in row)
            expected[(r, 0)] = row if ok else None
        return expected
    if kind == "text":
        return _ref_text(files["in.txt"])
    raise ValueError(kind)


# -- one input through mixle --------------------------------------------------------
def _read_with_mixle(kind: str, directory: str) -> tuple[dict[tuple[int, int], np.ndarray], int]:
    """Documents mixle accepts by location, and the number of rejects."""
    from mixle.corpus.ingestion.input_readers import ReadOptions, read_unit
    from mixle.corpus.ingestion.inputs import plan_units, resolve_inputs

    options = ReadOptions(
        ("text",) if kind == "text" else ("input_ids", "tokens"),
        "bytes" if kind == "text" else None,
        "paragraphs" if kind == "text" else "none",
    )
    files = resolve_inputs([directory])
    docs: dict[tuple[int, int], np.ndarray] = {}
    rejects = 0
    for unit in plan_units(files, 1 << 30):
        for batch in read_unit(unit, options):
            ends = np.cumsum(batch.lengths)
            for d in range(batch.lengths.shape[0]):
                location = tuple(batch.locations[d])
                docs[location] = np.asarray(batch.tokens[ends[d] - batch.lengths[d] : ends[d]])
            rejects += len(batch.rejects)
    return docs, rejects


def _check_input(kind: str, files: dict[str, bytes], directory: str) -> tuple[str, int]:
    """Return ``(outcome, accepted documents)``; outcome is clean, wrong or raw:..."""
    from mixle.errors import CorpusError

    for name, data in files.items():
        with open(os.path.join(directory, name), "wb") as handle:
            handle.write(data)
    try:
        docs, _ = _read_with_mixle(kind, directory)
    except CorpusError:
        return "clean", 0
    expected = _reference(kind, files)
    for location, ids in docs.items():
        reference = expected.get(location)
        if reference is None or not np.array_equal(
            np.asarray(reference, dtype=object), ids.astype(object)
        ):
            return f"wrong: {location} mixle {ids.tolist()[:8]} reference {reference}", len(docs)
    return "clean", len(docs)


# -- corpus files ----------------------------------------------------------------------
def _seed_corpus(directory: str) -> tuple[str, list[np.ndarray]]:
    from mixle.corpus import CorpusWriter, convert_corpus

    docs = [np.asarray(d, dtype=np.int64) for d in _NARROW] * 3
    raw = os.path.join(directory, "raw")
    with CorpusWriter(raw, vocab_size=65536, shard_max_bytes=96) as writer:
        writer.add_many(docs)
    convert_corpus(raw, os.path.join(directory, "zarr"), layout="zarr")
    with CorpusWriter(
        os.path.join(directory, "table"), vocab_size=65536, shard_max_bytes=96, shard_table=True
    ) as writer:
        writer.add_many(docs)
    return raw, docs


def _reseal_table(directory: str) -> None:
    """Point ``directory``'s manifest at its (mutated) table: size, SHA-256, checksum."""
    import hashlib

    from mixle.corpus.format.manifest import canonical_json

    path = os.path.join(directory, "manifest.json")
    manifest = json.loads(Path(path).read_bytes())
    table = Path(os.path.join(directory, manifest["shard_table"]["file"])).read_bytes()
    manifest["shard_table"].update(bytes=len(table), sha256=hashlib.sha256(table).hexdigest())
    body = {key: value for key, value in manifest.items() if key != "manifest_sha256"}
    manifest["manifest_sha256"] = hashlib.sha256(canonical_json(body)).hexdigest()
    Path(path).write_bytes(json.dumps(manifest).encode())


def _corpus_target(kind: str, seed: str, rng: random.Random) -> str:
    """The file (relative to the seed directory) that ``kind`` mutates this time."""
    if kind == "manifest.json":
        return "raw/manifest.json"
    if kind == "shards.table":
        return "table/shards.table"
    if kind in ("offsets", "tokens"):
        names = sorted(n for n in os.listdir(os.path.join(seed, "raw")) if n.endswith(kind))
        return "raw/" + rng.choice(names)
    arrays = sorted(n for n in os.listdir(os.path.join(seed, "zarr")) if n.startswith("shard-"))
    return rng.choice(["zarr/zarr.json", f"zarr/{rng.choice(arrays)}/zarr.json"])


def _check_corpus(kind: str, root: str, expected: list[np.ndarray], cache: str) -> tuple[str, int]:
    from mixle.corpus import open_corpus, verify_corpus
    from mixle.errors import CorpusError

    if kind == "zarr.json":
        try:
            docs = open_corpus(os.path.join(root, "zarr"), cache_dir=cache)
            read = [np.asarray(d) for d in docs]
        except CorpusError:
            return "clean", 0
        same = len(read) == len(expected) and all(map(np.array_equal, read, expected))
        # zarr shards are checked against the manifest SHA-256 when decoded.
        return ("clean" if same else "wrong: zarr documents differ"), len(read)
    path = os.path.join(root, "table" if kind == "shards.table" else "raw")
    try:
        read = [np.asarray(d).copy() for d in open_corpus(path)]
    except CorpusError:
        read = None
    try:
        report = verify_corpus(path, raise_errors=False)
    except CorpusError:
        return "clean", 0
    if report.ok:
        same = read is not None and len(read) == len(expected)
        same = same and all(map(np.array_equal, read or [], expected))
        if not same:
            return "wrong: verify calls the corpus intact but its documents differ", 0
    return "clean", 0 if read is None else len(read)


# -- driver ----------------------------------------------------------------------------
class Fuzzer:
    """Seeds for one ``kind`` under ``base``; :meth:`once` tries one mutated input."""

    def __init__(self, kind: str, base: str) -> None:
        self.kind = kind
        self.base = base
        self.turn = 0
        if kind in INPUT_KINDS:
            self.seed_files = _seed_input(kind, base)
        else:
            self.seed_dir = os.path.join(base, "seed")
            _, self.expected = _seed_corpus(self.seed_dir)
            self.corpus_copy = os.path.join(base, "copy")
            shutil.copytree(self.seed_dir, self.corpus_copy)
            self.originals: dict[str, bytes] = {}

    def once(self, rng: random.Random) -> tuple[str, int]:
        """Mutate, read under the per-input timeout; return ``(outcome, accepted)``.

        ``outcome`` is ``"clean"``, ``"hang"``, ``"raw: ..."`` or ``"wrong: ..."``.
        """
        self.turn += 1
        work = os.path.join(self.base, f"w{self.turn % 2}")
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        check: Callable[[], tuple[str, int]]
        if self.kind in INPUT_KINDS:
            name = rng.choice(sorted(self.seed_files))
            files = dict(self.seed_files, **{name: mutate(self.seed_files[name], rng)})

            def check() -> tuple[str, int]:
                return _check_input(self.kind, files, work)
        else:
            # One working copy; the mutated file is restored after the check.
            relative = _corpus_target(self.kind, self.seed_dir, rng)
            target = os.path.join(self.corpus_copy, relative)
            original = self.originals.setdefault(relative, Path(target).read_bytes())
            Path(target).write_bytes(mutate(original, rng))
            # A re-sealed table also rewrites its manifest: restore both afterwards.
            restore = [(target, original)]
            if self.kind == "shards.table":
                manifest = os.path.join(os.path.dirname(target), "manifest.json")
                restore.append((manifest, Path(manifest).read_bytes()))
                _reseal_table(os.path.dirname(target))
            cache = os.path.join(work, "cache")

            def check() -> tuple[str, int]:
                try:
                    return _check_corpus(self.kind, self.corpus_copy, self.expected, cache)
                finally:
                    for path, data in restore:
                        Path(path).write_bytes(data)

        try:
            with deadline(PER_INPUT_SECONDS):
                return check()
        except Hang:
            return "hang", 0
        except Exception as exc:  # the very thing being counted
            return f"raw: {type(exc).__name__}: {str(exc)[:200]}", 0


def run_in_subprocess(module: str, kind: str, count: int, seed: int) -> dict[str, Any]:
    """Run the fuzz driver ``python -m module kind count seed`` in a fresh process (the
    long ``-m slow`` forms) and return its counts (its last stdout line, JSON).

    The counts are printed (the record closing notes quote) and appended to the file
    ``$MIXLE_FUZZ_LOG`` when it is set. Fails the test when the driver does not exit 0.
    """
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-m", module, kind, str(count), str(seed)],
        cwd=root,
        env=dict(os.environ, PYTHONPATH=str(root)),
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    counts: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    print(json.dumps(counts))
    log = os.environ.get("MIXLE_FUZZ_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(counts) + "\n")
    return counts


def run(kind: str, count: int, seed: int) -> dict[str, Any]:
    """Fuzz ``kind`` with ``count`` mutated inputs; return the counts."""
    rng = random.Random(seed)
    counts: dict[str, Any] = {
        "kind": kind,
        "inputs": 0,
        "clean": 0,
        "raw": 0,
        "hangs": 0,
        "wrong": 0,
        "accepted": 0,
        "examples": [],
    }
    base = tempfile.mkdtemp(prefix="mixle-fuzz-")
    try:
        fuzzer = Fuzzer(kind, base)
        for _ in range(count):
            outcome, accepted = fuzzer.once(rng)
            counts["inputs"] += 1
            counts["accepted"] += accepted
            key = {"clean": "clean", "hang": "hangs"}.get(outcome, outcome.split(":")[0])
            counts[key] += 1
            if key != "clean" and len(counts["examples"]) < 5:
                counts["examples"].append(outcome[:300])
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return counts


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))))
