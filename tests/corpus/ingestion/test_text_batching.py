"""Text is tokenized a batch at a time, with the tokenizer loaded once per process
(issue #29, item 4): the ids are those of one ``encode`` per document, whatever the
input format, split, unit size or bad records in between."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mixle.corpus import ingest
from mixle.corpus.ingestion.formats import reading
from tests.corpus.ingest_helpers import read_all

tokenizers = pytest.importorskip("tokenizers")

_WORDS = ["the", "cat", "sat", "on", "a", "mat", "while", "dog", "and", "log", "ran", "far"]


class _CountingTokenizer:
    """A ``tokenizers.Tokenizer`` that counts its ``encode_batch_fast`` calls and texts
    (and refuses ``encode_batch``: the reader uses the fast one, which computes no offsets)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[int] = []

    def encode_batch_fast(self, texts: list[str], add_special_tokens: bool) -> Any:
        self.calls.append(len(texts))
        return self.inner.encode_batch_fast(texts, add_special_tokens=add_special_tokens)

    def encode_batch(self, texts: list[str], add_special_tokens: bool) -> Any:
        raise AssertionError("encode_batch computes offsets that ingest never reads")


@pytest.fixture
def tokenizer_file(tmp_path: Path) -> Path:
    vocab = {"[UNK]": 0, **{word: index + 1 for index, word in enumerate(_WORDS)}}
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    return path


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[_CountingTokenizer]]:
    """Every tokenizer loaded while the test runs, wrapped in a counter."""
    loaded: dict[str, list[_CountingTokenizer]] = {"tokenizers": []}
    original = reading._load_tokenizer.__wrapped__

    def load(path: str, size: int, mtime_ns: int) -> _CountingTokenizer:
        wrapped = _CountingTokenizer(original(path, size, mtime_ns))
        loaded["tokenizers"].append(wrapped)
        return wrapped

    reading._load_tokenizer.cache_clear()
    monkeypatch.setattr(reading, "_load_tokenizer", reading.functools.lru_cache(maxsize=4)(load))
    return loaded


def _texts(count: int) -> list[str]:
    return [" ".join(_WORDS[(i + j) % len(_WORDS)] for j in range(i % 7 + 1)) for i in range(count)]


def _expected(tokenizer_file: Path, texts: list[str]) -> list[list[int]]:
    tokenizer = tokenizers.Tokenizer.from_file(str(tokenizer_file))
    return [tokenizer.encode(text, add_special_tokens=False).ids for text in texts]


def _write_files(directory: Path, contents: dict[str, bytes]) -> Path:
    directory.mkdir()
    for name, data in contents.items():
        (directory / name).write_bytes(data)
    return directory


def test_text_files_are_tokenized_in_batches_with_one_load(
    tmp_path: Path, tokenizer_file: Path, counted: dict[str, list[_CountingTokenizer]]
) -> None:
    texts = _texts(60)
    files = {f"{index:03d}.txt": text.encode() for index, text in enumerate(texts)}
    source = _write_files(tmp_path / "docs", files)
    summary = ingest(source, tmp_path / "out", tokenizer=str(tokenizer_file), unit_size=200)
    assert read_all(tmp_path / "out") == _expected(tokenizer_file, texts)
    assert summary.units > 3
    (tokenizer,) = counted["tokenizers"]  # one load for every unit of the process
    assert sum(tokenizer.calls) == len(texts)
    assert len(tokenizer.calls) <= summary.units  # a batch per call, not a document


def test_paragraphs_and_bad_utf8_between_batches_keep_every_document(
    tmp_path: Path, tokenizer_file: Path, counted: dict[str, list[_CountingTokenizer]]
) -> None:
    texts = _texts(40)
    files = {
        "a.txt": ("\n\n".join(texts[:20]) + "\n").encode(),
        "b.txt": b"cat \xff dog\n\nthe mat\n",
        "c.txt": "\n\n".join(texts[20:]).encode(),
    }
    source = _write_files(tmp_path / "docs", files)
    summary = ingest(
        source,
        tmp_path / "out",
        tokenizer=str(tokenizer_file),
        split="paragraphs",
        on_error="skip",
        append_eos=0,
    )
    expected = _expected(tokenizer_file, [*texts[:20], "the mat", *texts[20:]])
    assert read_all(tmp_path / "out") == [[*ids, 0] for ids in expected]
    assert summary.skipped == 1
    (tokenizer,) = counted["tokenizers"]
    assert sum(tokenizer.calls) == len(expected) and len(tokenizer.calls) == 1


def test_jsonl_text_field_is_tokenized_in_batches(
    tmp_path: Path, tokenizer_file: Path, counted: dict[str, list[_CountingTokenizer]]
) -> None:
    texts = _texts(50)
    lines = [json.dumps({"text": text}) for text in texts]
    lines.insert(10, json.dumps({"text": 7}))  # a bad record between good ones
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    summary = ingest(
        tmp_path / "a.jsonl",
        tmp_path / "out",
        tokenizer=str(tokenizer_file),
        on_error="skip",
        unit_size=400,
    )
    assert read_all(tmp_path / "out") == _expected(tokenizer_file, texts)
    assert summary.skipped == 1 and summary.units > 3
    (tokenizer,) = counted["tokenizers"]
    assert sum(tokenizer.calls) == len(texts) and len(tokenizer.calls) <= summary.units


def test_a_replaced_tokenizer_file_is_loaded_again(tmp_path: Path, tokenizer_file: Path) -> None:
    first = reading.make_tokenizer(str(tokenizer_file))
    assert first is not None
    before = first(["cat dog"])[0].tolist()
    vocab = {"[UNK]": 0, "dog": 1, "cat": 2}
    other = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    other.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    other.save(str(tokenizer_file))
    second = reading.make_tokenizer(str(tokenizer_file))
    assert second is not None
    tokens, lengths = second(["cat dog", "", "dog"])
    assert (tokens.tolist(), lengths.tolist()) == ([2, 1, 1], [2, 0, 1])
    assert tokens.tolist()[:2] != before


def test_a_byte_level_bpe_gives_the_ids_of_encode_batch(tmp_path: Path) -> None:
    from tokenizers import decoders, models, pre_tokenizers, trainers

    texts = [f"def f{n}(x):\n    return x * {n} + 'é€{n}'\n" for n in range(200)] + ["", " "]
    bpe = tokenizers.Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    bpe.train_from_iterator(texts, trainer=trainer)
    bpe.save(str(tmp_path / "bpe.json"))
    encode = reading.make_tokenizer(str(tmp_path / "bpe.json"))
    assert encode is not None
    tokens, lengths = encode(texts)
    expected = [item.ids for item in bpe.encode_batch(texts, add_special_tokens=False)]
    assert lengths.tolist() == [len(ids) for ids in expected] and lengths[-2] == 0
    assert tokens.tolist() == [token for ids in expected for token in ids]
    assert tokens.dtype == "int64"
