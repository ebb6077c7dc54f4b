"""Regenerate ``shards/sample/``, the committed sample corpus and format fixture.

The source text is a fixed selection of CPython 3.11.7 standard-library modules
(Python Software Foundation License, text in ``shards/sample-src/LICENSE.txt``),
committed under ``shards/sample-src/`` (each file with ``.txt`` appended, so linters
and test runners treat it as the data it is) so the output never depends on the local
Python. Tokenization is byte-level: a token id is a byte of the UTF-8 file
(``vocab_size`` 256). Each file is split into documents (paragraphs) after every run
of blank lines, keeping the blank lines with the preceding document, so that the
documents of a file concatenate back to the file exactly.

The output is a pure function of the source files: same bytes, same fingerprint.

Usage::

    python -m tools.make_sample                      # rewrite shards/sample/
    python -m tools.make_sample --output /tmp/s      # write elsewhere
    python -m tools.make_sample --copy-from /usr/lib/python3.11   # refresh sources
"""

from __future__ import annotations

import argparse
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from mixle.corpus import CorpusWriter  # noqa: E402

SOURCE_DIR = ROOT / "shards" / "sample-src"
OUTPUT_DIR = ROOT / "shards" / "sample"
#: Files taken from CPython's ``Lib/`` (3.11.7), in this order.
SELECTION = (
    "abc.py",
    "argparse.py",
    "ast.py",
    "bisect.py",
    "calendar.py",
    "collections/__init__.py",
    "contextlib.py",
    "copy.py",
    "csv.py",
    "dataclasses.py",
    "difflib.py",
    "enum.py",
    "fractions.py",
    "functools.py",
    "heapq.py",
    "inspect.py",
    "json/__init__.py",
    "json/decoder.py",
    "json/encoder.py",
    "json/scanner.py",
    "json/tool.py",
    "locale.py",
    "pprint.py",
    "random.py",
    "shutil.py",
    "statistics.py",
    "string.py",
    "textwrap.py",
    "tokenize.py",
    "typing.py",
)
SHARD_MAX_BYTES = 1 << 20  # 1 MiB of uint16 tokens per shard: >= 3 shards


def documents_of(data: bytes) -> Iterator[np.ndarray]:
    """Split a file's bytes into documents after each run of blank lines."""
    start = 0
    for match in re.finditer(rb"\n(?:[ \t]*\n)+", data):
        end = match.end()
        yield np.frombuffer(data[start:end], dtype=np.uint8)
        start = end
    if start < len(data):
        yield np.frombuffer(data[start:], dtype=np.uint8)


def build(source: Path, output: Path) -> dict[str, object]:
    """Write the sample corpus for ``source`` to ``output``; return the manifest."""
    metadata = {
        "sample": {
            "origin": "CPython 3.11.7 Lib/",
            "license": "PSF-2.0 (shards/sample-src/LICENSE.txt)",
            "tokenizer": "utf-8 bytes",
            "files": list(SELECTION),
        }
    }
    with CorpusWriter(
        output, vocab_size=256, shard_max_bytes=SHARD_MAX_BYTES, overwrite=True, metadata=metadata
    ) as writer:
        for name in SELECTION:
            writer.add_many(documents_of((source / f"{name}.txt").read_bytes()))
    assert writer.manifest is not None
    return writer.manifest


def copy_sources(lib: Path) -> None:
    """Refresh ``shards/sample-src`` from a CPython ``Lib`` directory (and its LICENSE)."""
    for name in SELECTION:
        target = SOURCE_DIR / f"{name}.txt"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(lib / name, target)
    shutil.copyfile(lib / "LICENSE.txt", SOURCE_DIR / "LICENSE.txt")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=SOURCE_DIR)
    parser.add_argument("--output", type=Path, default=OUTPUT_DIR)
    parser.add_argument("--copy-from", type=Path, help="CPython Lib/ to copy the sources from")
    args = parser.parse_args(argv)
    if args.copy_from:
        copy_sources(args.copy_from)
    manifest = build(args.source, args.output)
    print(
        f"{args.output}: {manifest['num_documents']} documents, {manifest['num_tokens']} tokens, "
        f"{len(manifest['shards'])} shards, fingerprint {manifest['fingerprint']}"  # type: ignore[arg-type]
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
