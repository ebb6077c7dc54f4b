"""One publish module, one path per destination (issue 28).

Local directories built whole (a published corpus, an export) go through the one
``staged_directory`` swap; an ingest's units are published by ``publish_units`` on
local disk and on a store alike, the manifest committed last by ``commit_manifest_to``;
ingest output and merge read and write through the store, so its retry policy covers
them.
"""

from __future__ import annotations

import itertools
import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mixle.corpus import (
    CorpusWriter,
    IngestOptions,
    commit_ingest,
    export_corpus,
    merge_corpora,
    open_corpus,
    plan_ingest,
    publish_corpus,
    run_unit,
)
from mixle.corpus.format.store import ShardStore
from mixle.corpus.ingestion.area import OutputArea
from mixle.corpus.storage import publish, remote
from mixle.corpus.storage.local import LocalStore
from mixle.corpus.storage.remote import RemoteStore
from mixle.errors import CorpusFormatError

_URLS = itertools.count()


def _url() -> str:
    return f"memory://publish-paths-{uuid.uuid4().hex}/c{next(_URLS)}"


def _corpus(path: Path, offset: int) -> Path:
    with CorpusWriter(path, vocab_size=1000, shard_max_bytes=64) as writer:
        writer.add_many([np.arange(offset + k, offset + k + 5) for k in range(12)])
    return path


def _flaky(monkeypatch: pytest.MonkeyPatch, fs: Any, method: str, failures: int = 1) -> list[int]:
    """Make ``fs.method`` raise a connection reset ``failures`` times first."""
    real = getattr(fs, method)
    left = [failures]

    def flaky(*args: Any, **kwargs: Any) -> Any:
        if left[0]:
            left[0] -= 1
            raise ConnectionResetError("reset by peer (injected)")
        return real(*args, **kwargs)

    monkeypatch.setattr(fs, method, flaky)
    return left


def test_a_published_corpus_and_an_export_are_swapped_in_by_the_one_staging_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _corpus(tmp_path / "source", 0)
    swapped: list[tuple[str, str]] = []
    real = publish.swap_directory

    def watching(staging: str, target: str) -> None:
        swapped.append((os.path.basename(staging), target))
        real(staging, target)

    monkeypatch.setattr(publish, "swap_directory", watching)
    publish_corpus(source, tmp_path / "copy")
    export_corpus(source, tmp_path / "export", format="megatron")
    assert [target for _, target in swapped] == [
        str(tmp_path / "copy"),
        str(tmp_path / "export"),
    ]
    assert swapped[0][0].startswith(".copy.tmp-")
    assert swapped[1][0].startswith(".export.mixle-export-")
    assert len(open_corpus(tmp_path / "copy")) == 12


def test_a_failed_staged_write_leaves_neither_output_nor_staging(tmp_path: Path) -> None:
    target = tmp_path / "out"
    with pytest.raises(RuntimeError, match="injected"), publish.staged_directory(str(target)) as d:
        Path(d, "half").write_bytes(b"x")
        raise RuntimeError("injected")
    assert os.listdir(tmp_path) == []


def _units(source: Path, output: str) -> None:
    options = IngestOptions(vocab_size=1000, unit_size=source.stat().st_size // 4 + 1)
    plan = plan_ingest([str(source)], options)
    for unit in plan.units:
        run_unit(plan, unit.index, output)


def test_units_commit_through_one_publish_path_locally_and_on_a_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(f'{{"input_ids": [{i}, {i + 1}, 7]}}\n' for i in range(400)))
    committed: list[type[ShardStore]] = []
    real = publish.commit_manifest_to

    def watching(store: ShardStore, *args: Any, **kwargs: Any) -> dict[str, Any]:
        committed.append(type(store))
        return real(store, *args, **kwargs)

    monkeypatch.setattr(publish, "commit_manifest_to", watching)
    url = _url()
    _units(source, str(tmp_path / "local"))
    _units(source, url)
    commit_ingest(tmp_path / "local")
    commit_ingest(url)
    assert committed == [LocalStore, RemoteStore]
    local = OutputArea(str(tmp_path / "local"))
    published = OutputArea(url)
    assert published.read_bytes("manifest.json") == local.read_bytes("manifest.json")
    assert set(published.sizes("")) == set(local.sizes("")) - {".mixle-ingest.lock"}


def test_output_reads_retry_a_transient_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    area = OutputArea(_url())
    area.write_bytes("a/done.json", b"{}")
    assert isinstance(area.store, RemoteStore)
    left = _flaky(monkeypatch, area.store.fs, "cat")
    assert area.read_many(["a/done.json", "b/done.json"]) == {"a/done.json": b"{}"}
    assert left == [0]


def _remote_inputs(tmp_path: Path) -> list[str]:
    urls = [_url(), _url()]
    for offset, url in zip((0, 500), urls, strict=True):
        publish_corpus(_corpus(tmp_path / f"in-{offset}", offset), url)
    return urls


def test_a_remote_merge_copies_through_the_store_and_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inputs = _remote_inputs(tmp_path)
    output = _url()
    fs = OutputArea(output).store
    assert isinstance(fs, RemoteStore)
    left = _flaky(monkeypatch, fs.fs, "copy", failures=2)
    merge_corpora(inputs, output)
    assert left == [0]
    merged = open_corpus(output)
    assert len(merged) == 24
    np.testing.assert_array_equal(merged[12], np.arange(500, 505))


def test_a_remote_merge_input_manifest_is_bounded_like_every_manifest_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inputs = _remote_inputs(tmp_path)
    monkeypatch.setattr(remote, "MAX_MANIFEST_BYTES", 64)
    with pytest.raises(CorpusFormatError, match="larger than the 64 bytes accepted"):
        merge_corpora(inputs, _url())


def test_units_run_into_a_store_retry_a_transient_upload_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(f'{{"input_ids": [{i}, 3]}}\n' for i in range(200)))
    url = _url()
    store = OutputArea(url).store
    assert isinstance(store, RemoteStore)
    left = _flaky(monkeypatch, store.fs, "put_file", failures=3)
    _units(source, url)
    assert left == [0]
    commit_ingest(url)
    documents = open_corpus(url)
    assert len(documents) == 200
    np.testing.assert_array_equal(documents[7], [7, 3])
