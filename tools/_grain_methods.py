"""Grain's methods for ``tools/bench_peers.py``: ArrayRecord write and read, packed rows.

Grain reads random-access sources; its own on-disk format is ArrayRecord (a dependency
of ``grain``), one record per document (the document's uint16 bytes), written with
``group_size:1`` so that any record is one read: the write and random-read rows.

Rows are Grain's two packers over a ``MapDataset`` shuffled by ``index_shuffle``:
``ConcatThenSplitIterDataset`` (concatenate and cut into rows of ``block + 1``) and
``BestFitPackIterDataset`` (best-fit into padded rows, with segment ids and positions;
documents longer than a row are truncated first, as its contract requires), batched
with ``.batch`` and cast to int64 like every other method's rows. Their documents come
from :class:`FlatSource`, a ``RandomAccessDataSource`` over the same mapped flat uint16
file the floors read (Grain reads any object with ``__len__`` and ``__getitem__``): the
fastest source Grain can have here, 2.8x the packers' rate over ``ArrayRecordDataSource``
(whose ``[i]`` costs ~30 µs a record on this machine). The documents are read
synchronously (``ReadOptions(num_threads=0)``): Grain's default read-ahead (16 threads, a
500-element buffer that it polls on every element) was 8x slower in CPU time on this
2-core machine, and 1 or 2 threads slower than none.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from tools._peer_methods import Corpus, Method, Step, endless, reader, stepper

__all__ = ["FlatSource", "grain_read", "grain_rows", "grain_write"]


class FlatSource:
    """A Grain random-access source: document ``i`` of one flat uint16 file, as
    ``{"tokens": view}`` (a view of the mapping; Grain's packers copy it)."""

    def __init__(self, flat: Path, offsets: np.ndarray) -> None:
        self.tokens = np.asarray(np.memmap(flat, dtype=np.uint16, mode="r"))  # plain views
        self.offsets = np.asarray(offsets, dtype=np.int64)

    def __len__(self) -> int:
        return int(self.offsets.shape[0]) - 1

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        return {"tokens": self.tokens[self.offsets[index] : self.offsets[index + 1]]}


def _path(corpus: Corpus) -> Path:
    return corpus.work / "grain" / "corpus.array_record"


def grain_write(corpus: Corpus) -> Method:
    """``ArrayRecordWriter.write`` of every document's bytes."""
    from array_record.python.array_record_module import ArrayRecordWriter

    path = _path(corpus)
    path.parent.mkdir(exist_ok=True)

    def write() -> int:
        writer = ArrayRecordWriter(str(path), "group_size:1")
        for document in corpus.documents:
            writer.write(document.tobytes())
        writer.close()
        return corpus.num_tokens

    what = "`ArrayRecordWriter.write` per document (`group_size:1`)"
    return Method("write", "Grain ArrayRecord", what, lambda: write)


def _source(corpus: Corpus) -> Any:
    import grain

    return grain.sources.ArrayRecordDataSource(str(_path(corpus)))


def grain_read(corpus: Corpus, indices: list[int]) -> Method:
    """``ArrayRecordDataSource[i]`` decoded with ``np.frombuffer``."""

    def make() -> Step:
        source = _source(corpus)
        return reader(lambda i: np.frombuffer(source[i], dtype=np.uint16), indices)

    what = "`ArrayRecordDataSource[i]` + `np.frombuffer`"
    return Method("read", "Grain ArrayRecordDataSource", what, make)


def _documents(corpus: Corpus, truncate: int | None) -> Any:
    """An endless ``IterDataset`` of ``{"tokens": document}``, shuffled with
    ``index_shuffle``, each document cut to ``truncate`` tokens (``None``: whole)."""
    import grain

    documents = grain.MapDataset.source(FlatSource(corpus.flat_path, corpus.offsets))
    documents = documents.shuffle(seed=0)
    if truncate is not None:
        documents = documents.map(lambda d: {"tokens": d["tokens"][:truncate]})
    return documents.repeat().to_iter_dataset(
        grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
    )


def as_int64(batches: Iterator[dict[str, np.ndarray]]) -> Iterator[dict[str, np.ndarray]]:
    """Each batch with its tokens cast to int64 (the rows every method here returns; the
    best-fit segment ids and positions stay as Grain makes them)."""
    for batch in batches:
        yield {**batch, "tokens": batch["tokens"].astype(np.int64)}


def grain_rows(corpus: Corpus, block: int, batch: int) -> list[Method]:
    """Concatenate-and-chunk and best-fit rows of ``block + 1`` tokens, ``batch`` a batch."""
    import grain.experimental as experimental

    length = {"tokens": block + 1}

    def concat() -> Step:
        documents = _documents(corpus, None)
        rows = experimental.ConcatThenSplitIterDataset(documents, length_struct=length)
        return stepper(as_int64(endless(rows.batch(batch).__iter__)), block * batch)

    def best_fit() -> Step:
        documents = _documents(corpus, block + 1)
        rows = experimental.BestFitPackIterDataset(
            documents, length_struct=length, num_packing_bins=batch, seed=0
        )
        return stepper(as_int64(endless(rows.batch(batch).__iter__)), block * batch)

    shuffled = "`index_shuffle` documents of a mapped flat file"
    return [
        Method(
            "rows", "Grain ConcatThenSplit", f"{shuffled}, `ConcatThenSplitIterDataset`", concat
        ),
        Method("rows", "Grain BestFitPack", f"{shuffled}, `BestFitPackIterDataset`", best_fit),
    ]
