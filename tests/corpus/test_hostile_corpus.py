"""Hostile corpora (issue #18): non-regular files, escapes, oversized JSON, forged zarr
shapes, ids outside the vocabulary. Each test failed (hang, escape, traceback or
false "intact") before the hardening and passes after it."""

from __future__ import annotations

import http.server
import json
import os
import resource
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from mixle.corpus import CorpusWriter, convert_corpus, open_corpus, verify_corpus
from mixle.errors import CorpusFormatError, UnsafePathError
from tests.corpus.hardening_helpers import deadline, reseal, run_mixle

DOCS = [np.arange(n, dtype=np.int64) % 50 + 3 for n in (5, 0, 9, 3, 12, 7)]


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus"
    with CorpusWriter(path, vocab_size=100, shard_max_bytes=24) as writer:
        writer.add_many(DOCS)
    return path


def _shard(corpus: Path, number: int, kind: str) -> Path:
    manifest = json.loads((corpus / "manifest.json").read_text())
    return corpus / manifest["shards"][number][kind]


def _empty_tokens_shard(tmp_path: Path) -> tuple[Path, Path]:
    path = tmp_path / "with-empty"
    with CorpusWriter(path) as writer:
        writer.add_many([np.empty(0, np.int64)] * 3)
    manifest = json.loads((path / "manifest.json").read_text())
    empty = next(e for e in manifest["shards"] if e["num_tokens"] == 0)
    return path, path / empty["tokens"]


# -- non-regular files ----------------------------------------------------------------
def test_fifo_offsets_is_an_error_not_a_hang(corpus: Path) -> None:
    offsets = _shard(corpus, 0, "offsets")
    offsets.unlink()
    os.mkfifo(offsets)
    with deadline(20), pytest.raises(CorpusFormatError, match="FIFO"):
        open_corpus(corpus)
    inspect = run_mixle("inspect", str(corpus), timeout=60)
    assert inspect.returncode == 2 and "FIFO" in inspect.stderr
    verify = run_mixle("verify", str(corpus), timeout=60)
    assert verify.returncode == 1 and "FIFO" in verify.stdout
    assert "Traceback" not in inspect.stderr + verify.stderr


def test_dev_zero_in_place_of_an_empty_tokens_file_is_refused(tmp_path: Path) -> None:
    path, tokens = _empty_tokens_shard(tmp_path)
    tokens.unlink()
    tokens.symlink_to("/dev/zero")
    with deadline(20), pytest.raises(CorpusFormatError):
        verify_corpus(path)
    result = run_mixle("verify", str(path), timeout=60)
    assert result.returncode == 1 and "Traceback" not in result.stderr


def test_device_inside_the_corpus_is_not_a_regular_file(tmp_path: Path) -> None:
    from mixle._file_checks import open_regular

    with pytest.raises(CorpusFormatError, match="character device"):
        open_regular("/dev/zero", CorpusFormatError)


# -- escaping the corpus ---------------------------------------------------------------
def test_symlink_out_of_the_corpus_is_refused(corpus: Path, tmp_path: Path) -> None:
    tokens = _shard(corpus, 0, "tokens")
    outside = tmp_path / "outside.bin"
    outside.write_bytes(tokens.read_bytes())
    tokens.unlink()
    tokens.symlink_to(outside)
    with pytest.raises(UnsafePathError, match="outside the corpus"):
        open_corpus(corpus)[0]


def test_symlink_inside_the_corpus_is_followed(corpus: Path) -> None:
    tokens = _shard(corpus, 0, "tokens")
    moved = corpus / "data"
    moved.mkdir()
    (moved / "kept.bin").write_bytes(tokens.read_bytes())
    tokens.unlink()
    tokens.symlink_to(moved / "kept.bin")
    assert [d.tolist() for d in open_corpus(corpus)] == [d.tolist() for d in DOCS]


@pytest.mark.parametrize(
    "name", ["%2e%2e%2fsecret.bin", "a%2fb", "x y", "é.tokens", "shard~1", "a..b"]
)
def test_names_outside_the_safe_alphabet_are_refused(corpus: Path, name: str) -> None:
    reseal(corpus, lambda m: m["shards"][0].update(tokens=name))
    with pytest.raises(UnsafePathError, match="plain file name"):
        open_corpus(corpus)


class _UnquotingHandler(http.server.BaseHTTPRequestHandler):
    """A careless server: %-decodes the path before joining it to its root."""

    root: ClassVar[str] = ""
    requested: ClassVar[list[str]] = []

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        self.requested.append(self.path)
        relative = urllib.parse.unquote(self.path.split("?", 1)[0]).lstrip("/")
        path = os.path.normpath(os.path.join(self.root, relative))
        if not os.path.isfile(path):
            self.send_error(404)
            return
        data = Path(path).read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_HEAD(self) -> None:
        self.send_error(405)


@pytest.fixture
def careless_server(tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    handler = type("H", (_UnquotingHandler,), {"root": str(tmp_path), "requested": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler.requested
    finally:
        server.shutdown()
        server.server_close()


def test_percent_encoded_traversal_is_never_requested(
    corpus: Path, tmp_path: Path, careless_server: tuple[str, list[str]]
) -> None:
    pytest.importorskip("aiohttp")
    url, requested = careless_server
    secret = tmp_path / "secret.bin"
    secret.write_bytes(_shard(corpus, 0, "tokens").read_bytes())
    reseal(corpus, lambda m: m["shards"][0].update(tokens="%2e%2e%2fsecret.bin"))
    with pytest.raises(UnsafePathError):
        open_corpus(f"{url}/corpus", cache_dir=str(tmp_path / "cache"), retries=1)
    assert requested and not any("secret" in path or "%" in path for path in requested)


# -- JSON metadata ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("payload", "match"),
    [
        ('{"format": "mixle-corpus", "num_tokens": ' + "9" * 5000 + "}", "5000 digits"),
        ("[" * 100_000 + "]" * 100_000, "nested"),
        ('{"a": ' * 50_000 + "1" + "}" * 50_000, "nested"),
    ],
    # Short ids: pytest puts the test id into PYTEST_CURRENT_TEST, and an environment
    # string over 128 KiB makes every subprocess the test starts fail with E2BIG.
    ids=["long-number", "deep-list", "deep-object"],
)
def test_oversized_manifest_json_is_a_format_error(corpus: Path, payload: str, match: str) -> None:
    (corpus / "manifest.json").write_text(payload)
    with pytest.raises(CorpusFormatError, match=match):
        open_corpus(corpus)
    for command in ("inspect", "verify"):
        result = run_mixle(command, str(corpus))
        assert result.returncode in (1, 2) and "Traceback" not in result.stderr, result.stderr


def _zarr_copy(corpus: Path, tmp_path: Path) -> Path:
    target = tmp_path / "corpus.zarr"
    convert_corpus(corpus, target, layout="zarr")
    return target


def test_oversized_zarr_json_is_a_format_error(corpus: Path, tmp_path: Path) -> None:
    target = _zarr_copy(corpus, tmp_path)
    (target / "zarr.json").write_text('{"attributes": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(CorpusFormatError, match="nested"):
        open_corpus(target, cache_dir=str(tmp_path / "cache"))


@pytest.mark.parametrize("shape", [2**27, 2**40])
def test_forged_zarr_shape_is_refused_before_any_allocation(
    corpus: Path, tmp_path: Path, shape: int
) -> None:
    target = _zarr_copy(corpus, tmp_path)
    meta_path = target / _shard(corpus, 0, "tokens").name / "zarr.json"
    meta = json.loads(meta_path.read_text())
    meta["shape"] = [shape]
    meta_path.write_text(json.dumps(meta))
    cache = tmp_path / "cache"
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    documents = open_corpus(target, cache_dir=str(cache), retries=1)
    with deadline(60), pytest.raises(CorpusFormatError, match="shape"):
        documents[0]
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 64 * 1024, f"peak RSS grew by {grown_kib} KiB"
    cached = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
    assert cached < 1 << 20


# -- ids against the vocabulary ------------------------------------------------------------
def test_verify_reports_ids_at_or_above_vocab_size(corpus: Path) -> None:
    reseal(corpus, lambda m: m.update(vocab_size=10))
    with pytest.raises(CorpusFormatError, match="vocab_size 10") as info:
        verify_corpus(corpus)
    assert "document 2" in str(info.value) and "position 7" in str(info.value)
    result = run_mixle("verify", str(corpus))
    assert result.returncode == 1 and "CORRUPT" in result.stdout
