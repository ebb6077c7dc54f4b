"""``mixle merge`` / ``export`` / ``ingest --overwrite`` never read outside their inputs
nor destroy what they promised to keep (issue #32, classes 2, 3, 5 and 11)."""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle._file_checks import check_replaceable
from mixle.cli import main
from mixle.corpus import CorpusWriter, export_corpus, ingest, merge_corpora, open_corpus
from mixle.corpus.format.shard import rewrite_shard_dtype
from mixle.errors import ArgumentError, CorpusFormatError, CorpusNotFoundError, UnsafePathError
from tests.corpus.hardening_helpers import deadline
from tests.corpus.ingest_helpers import random_docs


def _corpus(path: Path, seed: int, count: int = 40, **options: object) -> Path:
    options.setdefault("vocab_size", 1000)
    with CorpusWriter(path, shard_max_bytes=600, **options) as writer:  # type: ignore[arg-type]
        writer.add_many(random_docs(seed, count, vocab=int(options["vocab_size"])))  # type: ignore[call-overload]
    return path


def _snapshot(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}


def _hidden(path: Path) -> list[str]:
    return sorted(name for name in os.listdir(path) if name.startswith("."))


def _second_shard(corpus: Path) -> Path:
    return corpus / open_corpus(corpus).manifest["shards"][1]["tokens"]


# -- class 2: nothing is read outside the inputs -------------------------------------------


def test_a_shard_linked_out_of_its_corpus_is_refused_before_the_output_is_touched(
    tmp_path: Path,
) -> None:
    a, b = _corpus(tmp_path / "a", 1), _corpus(tmp_path / "b", 2)
    out = tmp_path / "out"
    merge_corpora([str(a), str(b)], out)
    before = _snapshot(out)
    shard = _second_shard(a)
    outside = tmp_path / "secret"
    shutil.move(shard, outside)
    shard.symlink_to(outside)  # same size, same bytes: only its location is wrong
    with pytest.raises(UnsafePathError, match="outside the corpus directory"):
        merge_corpora([str(a), str(b)], out, overwrite=True)
    assert _snapshot(out) == before and _hidden(out) == []


@pytest.mark.parametrize("kind", ["fifo", "directory", "short"])
def test_a_shard_that_is_not_a_regular_file_of_its_size_is_refused_at_once(
    tmp_path: Path, kind: str
) -> None:
    a, b = _corpus(tmp_path / "a", 3), _corpus(tmp_path / "b", 4)
    shard = _second_shard(a)
    data = shard.read_bytes()
    shard.unlink()
    if kind == "fifo":
        os.mkfifo(shard)
    elif kind == "directory":
        shard.mkdir()
    else:
        shard.write_bytes(data[:-2])
    out = tmp_path / "out"
    with deadline(20), pytest.raises(CorpusFormatError, match=re.escape(str(shard))):
        merge_corpora([str(a), str(b)], out)
    assert not (out / "manifest.json").exists()
    assert not out.exists() or _hidden(out) == []


def test_a_shard_linked_to_dev_zero_is_refused_in_the_command(tmp_path: Path) -> None:
    a, b = _corpus(tmp_path / "a", 5), _corpus(tmp_path / "b", 6)
    shard = _second_shard(a)
    shard.unlink()
    shard.symlink_to("/dev/zero")
    with deadline(20):
        assert main(["merge", str(a), str(b), str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()


def test_a_failed_copy_names_the_file_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = _corpus(tmp_path / "a", 7), _corpus(tmp_path / "b", 8)
    out = tmp_path / "out"

    def no_links(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    real_open = open
    writes = {"count": 0}

    class FullDisk:
        """A file whose third write fails as a full disk does."""

        def __init__(self, handle: object) -> None:
            self.handle = handle

        def __enter__(self) -> FullDisk:
            return self

        def __exit__(self, *exc: object) -> None:
            self.handle.close()  # type: ignore[attr-defined]

        def write(self, data: bytes) -> int:
            writes["count"] += 1
            if writes["count"] >= 3:
                raise OSError(errno.ENOSPC, "No space left on device")
            return self.handle.write(data)  # type: ignore[attr-defined,no-any-return]

        def __getattr__(self, name: str) -> object:
            return getattr(self.handle, name)

    def full_open(file: object, mode: str = "r", *args: object, **kwargs: object) -> object:
        handle = real_open(file, mode, *args, **kwargs)  # type: ignore[call-overload]
        return FullDisk(handle) if mode == "xb" else handle

    monkeypatch.setattr(os, "link", no_links)
    monkeypatch.setattr("builtins.open", full_open)
    assert main(["merge", str(a), str(b), str(out)]) == 2
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert "No space left on device" in err and str(out / "shard-00001.") in err, err
    assert len(err.strip().splitlines()) == 1
    assert _hidden(out) == [] and not (out / "manifest.json").exists()


# -- class 3: what the tools promise to keep is kept ---------------------------------------


def test_an_output_that_is_a_link_to_an_input_is_refused(tmp_path: Path) -> None:
    a, b = _corpus(tmp_path / "a", 9), _corpus(tmp_path / "b", 10)
    link = tmp_path / "link"
    link.symlink_to(a)
    before = _snapshot(a)
    with pytest.raises(ArgumentError, match="is the input"):
        merge_corpora([str(a), str(b)], link, overwrite=True)
    with pytest.raises(ArgumentError, match="is the input"):
        merge_corpora([str(a), str(b)], tmp_path / "b" / ".." / "a", overwrite=True)
    assert _snapshot(a) == before and len(open_corpus(a)) == 40


@pytest.mark.parametrize("where", ["contains", "inside"])
def test_an_output_that_contains_or_lies_inside_an_input_is_refused(
    tmp_path: Path, where: str
) -> None:
    parent = tmp_path / "parent"
    a = _corpus(parent / "a", 11) if where == "contains" else _corpus(tmp_path / "a", 11)
    b = _corpus(tmp_path / "b", 12)
    out = parent if where == "contains" else a / "sub"
    with pytest.raises(
        ArgumentError, match="contains the input" if where == "contains" else "is inside"
    ):
        merge_corpora([str(a), str(b)], out, overwrite=True)
    assert len(open_corpus(a)) == 40


def test_a_refused_vocab_size_leaves_the_old_output_in_place(tmp_path: Path) -> None:
    c1, c2 = _corpus(tmp_path / "c1", 13), _corpus(tmp_path / "c2", 14)
    out = tmp_path / "out"
    merge_corpora([str(c1), str(c2)], out)
    before = _snapshot(out)
    with pytest.raises(ArgumentError, match="uint16"):
        merge_corpora([str(c1), str(c2)], out, overwrite=True, vocab_size=100_000)
    with pytest.raises(ArgumentError, match="integer"):
        merge_corpora([str(c1), str(c2)], out, overwrite=True, vocab_size="many")  # type: ignore[arg-type]
    assert _snapshot(out) == before and len(open_corpus(out)) == 80


def test_a_missing_input_is_corpus_not_found(tmp_path: Path) -> None:
    a = _corpus(tmp_path / "a", 15)
    with pytest.raises(CorpusNotFoundError, match="missing"):
        merge_corpora([str(a), str(tmp_path / "missing")], tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusNotFoundError, match=r"manifest\.json is missing"):
        merge_corpora([str(a), str(tmp_path / "empty")], tmp_path / "out")


def test_a_manifest_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    a = _corpus(tmp_path / "a", 16)
    b = tmp_path / "b"
    b.mkdir()
    os.mkfifo(b / "manifest.json")
    with deadline(20), pytest.raises(CorpusFormatError, match="FIFO"):
        merge_corpora([str(a), str(b)], tmp_path / "out")


@pytest.mark.parametrize("which", ["tokens", "offsets"])
def test_the_dtype_rewrite_opens_only_regular_files_of_their_size(
    tmp_path: Path, which: str
) -> None:
    small = _corpus(tmp_path / "small", 17)
    entry = dict(open_corpus(small).manifest["shards"][0])
    path = small / entry[which]
    path.unlink()
    os.mkfifo(path)
    with deadline(20), pytest.raises(CorpusFormatError, match="FIFO"):
        rewrite_shard_dtype(small, entry, from_dtype="uint16", to_dtype="uint32")
    path.unlink()
    path.write_bytes(b"\0" * 4096)
    with deadline(20), pytest.raises(CorpusFormatError, match="4096 bytes on disk"):
        rewrite_shard_dtype(small, entry, from_dtype="uint16", to_dtype="uint32")


def test_export_over_a_directory_holding_the_corpus_is_refused(tmp_path: Path) -> None:
    c1, c2 = _corpus(tmp_path / "c1", 19), _corpus(tmp_path / "c2", 20)
    exp = tmp_path / "exp"
    export_corpus(c1, exp)
    shutil.copytree(c2, exp / "corpus")
    with pytest.raises(ArgumentError, match="contains the corpus"):
        export_corpus(exp / "corpus", exp, overwrite=True)
    assert len(open_corpus(exp / "corpus")) == 40
    link = tmp_path / "link"
    link.symlink_to(c1)
    with pytest.raises(ArgumentError, match="is the corpus"):
        export_corpus(c1, link, overwrite=True)


def test_ingest_overwrite_never_removes_a_work_directory_holding_an_input(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    source = tmp_path / "docs.npy"
    np.save(source, np.arange(12, dtype=np.int64))
    ingest([str(source)], out)
    work = out / ".mixle-ingest"
    work.mkdir()
    inside = work / "docs.npy"
    shutil.copy(source, inside)
    with pytest.raises(ArgumentError, match="contains the input"):
        ingest([str(inside)], out, overwrite=True)
    assert inside.exists()


def test_a_full_disk_during_export_names_the_file_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = _corpus(tmp_path / "c", 21)

    def full(*args: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    # The chunk header is written, then the tokens are copied in the kernel: that fails.
    monkeypatch.setattr(os, "copy_file_range", full)
    monkeypatch.setattr(os, "sendfile", full)
    code = main(["export", str(corpus), str(tmp_path / "exp"), "--format", "litdata"])
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "No space left on device" in err and "chunk-0-0.bin" in err, err
    assert sorted(os.listdir(tmp_path)) == ["c"]  # no output, no staging directory


# -- property: "is / contains / inside" does not depend on how a path is spelled -----------

_NODES = ["a", "a/b", "a/b/c", "d"]


def _spell(root: Path, node: str, how: int) -> str:
    """One of several spellings of ``root/node``: plain, trailing slash, ``x/..``
    detours, ``./`` parts, a ``file://`` URL, or through the symlink ``root/la`` -> a."""
    plain = str(root / node)
    if how == 1:
        return plain + "/"
    if how == 2:
        return str(root / "d" / ".." / node)
    if how == 3:
        return str(root / "." / node.replace("/", "/./"))
    if how == 4:
        return "file://" + plain
    if how == 5 and node.startswith("a"):
        return str(root / ("la" + node[1:]))
    return plain


@given(
    target=st.sampled_from(_NODES),
    kept=st.sampled_from(_NODES),
    spell_target=st.integers(0, 5),
    spell_kept=st.integers(0, 5),
)
@settings(max_examples=200, deadline=None)
def test_replace_checks_compare_real_paths_whatever_the_spelling(
    tmp_path_factory: pytest.TempPathFactory,
    target: str,
    kept: str,
    spell_target: int,
    spell_kept: int,
) -> None:
    root = tmp_path_factory.getbasetemp() / "spellings"
    if not root.exists():
        (root / "a" / "b" / "c").mkdir(parents=True)
        (root / "d").mkdir()
        (root / "la").symlink_to(root / "a")

    def outcome(t: str, k: str) -> str | None:
        try:
            check_replaceable(t, [k], what="t", allow_inside=False)
        except ArgumentError as exc:
            return next(word for word in ("is the", "contains", "is inside") if word in str(exc))
        return None

    spelled = outcome(_spell(root, target, spell_target), _spell(root, kept, spell_kept))
    assert spelled == outcome(str(root / target), str(root / kept))
    expected = (
        "is the"
        if target == kept
        else "contains"
        if kept.startswith(target + "/")
        else "is inside"
        if target.startswith(kept + "/")
        else None
    )
    assert spelled == expected


def test_a_manifest_larger_than_the_bound_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = _corpus(tmp_path / "a", 22), _corpus(tmp_path / "b", 23)
    monkeypatch.setattr("mixle.corpus.storage.local.MAX_MANIFEST_BYTES", 100)
    with pytest.raises(CorpusFormatError, match="larger than the 100 bytes"):
        merge_corpora([str(a), str(b)], tmp_path / "out")
    with pytest.raises(CorpusFormatError, match="larger than the 100 bytes"):
        open_corpus(a)
