"""A mixture's batches, read ahead many global batches at a time: bitwise the rows of
each source read one at a time, whatever the read-ahead (batches are views of it by
design, so their buffers are not checked)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.corpus import CorpusWriter, open_corpus
from mixle.data import Mixture, MixtureSource

BLOCK = 16
_SIZES = ((30, 1, 60), (9, 1, 25), (4, 20, 90))  # (documents, shortest, longest) per source


def _documents(seed: int, count: int, low: int, high: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        rng.integers(100 * seed, 100 * seed + 99, int(rng.integers(low, high)), dtype=np.int64)
        for _ in range(count)
    ]


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[object]]:
    """The same three sources in memory and as corpora on disk (whose gather differs)."""
    memory = [_documents(seed, *size) for seed, size in enumerate(_SIZES, 1)]
    disk = []
    for index, documents in enumerate(memory):
        path = Path(tmp_path_factory.mktemp(f"source-{index}"))
        with CorpusWriter(path, vocab_size=1000, overwrite=True) as writer:
            writer.add_many(documents)
        disk.append(open_corpus(path))
    return {"memory": list(memory), "disk": disk}


def _reference(mixture: Mixture, rows: np.ndarray) -> list[np.ndarray]:
    """The fields of global ``rows``: each row read alone from its own source."""
    ids, local = mixture.schedule.lookup(rows)
    parts = [
        mixture.rows[int(s)].read(int(m), 1, mixture.document_ids)
        for s, m in zip(ids.tolist(), local.tolist(), strict=True)
    ]
    fields = [np.concatenate(field) for field in zip(*parts, strict=True)]
    if mixture.objective == "windows":
        return [fields[0], fields[1], ids]
    tokens = fields[0]
    return [tokens[:, :-1], tokens[:, 1:], *fields[1:], ids]


@settings(max_examples=40, deadline=None)
@given(
    store=st.sampled_from(["memory", "disk"]),
    weights=st.lists(st.integers(0, 9), min_size=3, max_size=3).filter(any),
    seed=st.integers(0, 2**16),
    batch_size=st.integers(1, 9),
    world_size=st.integers(1, 3),
    layout=st.sampled_from(["concatenate", "ids", "best_fit", "best_fit ids", "windows"]),
    start=st.integers(0, 400),
)
def test_batches_equal_each_sources_rows_read_alone(
    sources: dict[str, list[object]],
    store: str,
    weights: list[int],
    seed: int,
    batch_size: int,
    world_size: int,
    layout: str,
    start: int,
) -> None:
    mixture = Mixture(
        [
            MixtureSource(documents, weight, f"s{index}")
            for index, (documents, weight) in enumerate(zip(sources[store], weights, strict=True))
        ],
        block=BLOCK,
        batch_size=batch_size,
        rank=world_size - 1,
        world_size=world_size,
        seed=seed,
        boundary_id=None if seed % 3 == 0 else 999,
        pad_id=7,
        document_ids="ids" in layout,
        packing="best_fit" if "best_fit" in layout else "concatenate",
        objective="windows" if layout == "windows" else "packed",
    )
    first = start * mixture.global_batch_size
    mixture.seek(first)
    batches = mixture.batches()
    # Past the read-ahead's first doublings (1, 2, 4, ... batches) and across epoch ends:
    # the smallest source's epoch is a few rows.
    for step in range(9):
        batch = next(batches)
        row = first + step * mixture.global_batch_size + mixture.rank * batch_size
        expected = _reference(mixture, np.arange(row, row + batch_size, dtype=np.int64))
        assert all(
            a.dtype == b.dtype and np.array_equal(a, b)
            for a, b in zip(batch.as_tuple(), expected, strict=True)
        )
    # Random access: any rows, the empty read too.
    count = (seed % 5) * batch_size
    batch = mixture.read_rows(first, first + count)
    if count:
        expected = _reference(mixture, np.arange(first, first + count, dtype=np.int64))
        assert all(np.array_equal(a, b) for a, b in zip(batch.as_tuple(), expected, strict=True))
    else:
        assert all(a.shape[0] == 0 for a in batch.as_tuple())


def test_empty_read_has_the_fields_and_dtypes_of_a_batch() -> None:
    documents = [np.arange(50) for _ in range(3)]
    for kwargs in ({}, {"document_ids": True}, {"objective": "windows"}):
        mixture = Mixture([MixtureSource(documents, 1.0, "a")], block=4, batch_size=2, **kwargs)  # type: ignore[arg-type]
        empty, full = mixture.read_rows(3, 3).as_tuple(), mixture.read_rows(0, 2).as_tuple()
        assert [(a.dtype, a.shape[1:]) for a in empty] == [(a.dtype, a.shape[1:]) for a in full]
