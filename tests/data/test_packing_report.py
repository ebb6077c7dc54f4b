"""compare_packings: the figures are the streams' own (rows, cut documents, padding)."""

from __future__ import annotations

import numpy as np
import pytest

from mixle.data import PackingOptions, StreamingCorpus, compare_packings
from mixle.errors import ArgumentError


def _lengths() -> np.ndarray:
    rng = np.random.default_rng(5)
    return np.maximum(rng.lognormal(np.log(40), 1.0, 600).astype(np.int64), 0)


def _corpus(lengths: np.ndarray, packing: str) -> StreamingCorpus:
    documents = [np.ones(int(n), dtype=np.int64) for n in lengths]
    return StreamingCorpus(
        documents,
        rank=0,
        world_size=1,
        block=64,
        batch_size=8,
        layout="global",
        packing=PackingOptions(packing, window_documents=100),
        document_ids=True,
    )


def _cut_in_stream(corpus: StreamingCorpus) -> int:
    rows: dict[int, set[int]] = {}
    for index, batch in enumerate(corpus.iter_epoch(0)):
        for row in range(batch.num_rows):
            slots = batch.document_ids[row]
            # A document is inside a row when all of it is: its last token may be the
            # row's final target (concatenate-and-chunk rows share one token).
            for document in set(slots[slots >= 0].tolist()):
                rows.setdefault(document, set()).add(index * 8 + row)
    return sum(len(found) > 1 for found in rows.values())


@pytest.mark.parametrize("packing", ["concatenate", "best_fit"])
def test_rows_and_cut_documents_are_those_of_the_stream(packing: str) -> None:
    lengths = _lengths()
    summaries = dict(
        (s.packing, s) for s in compare_packings(lengths, block=64, window_documents=100)
    )
    summary = summaries[packing]
    corpus = _corpus(lengths, packing)
    assert summary.rows == corpus.num_rows(0)
    if packing == "best_fit":
        assert summary.cut_documents == _cut_in_stream(corpus) == summary.longer_than_row
    else:
        # The stream's document ids miss a document's last token when it is a row's
        # final target only: count cuts from the order directly.
        order = corpus.rank_document_indices(0)
        starts = np.concatenate(([0], np.cumsum(lengths[order])[:-1]))
        ends = starts + lengths[order]
        expected = sum(
            1
            for s, e, n in zip(starts, ends, lengths[order], strict=True)
            if n and e > (s // 64) * 64 + 65
        )
        assert summary.cut_documents == expected > summaries["best_fit"].cut_documents


def test_padding_and_trained_fractions_add_up_for_best_fit() -> None:
    lengths = _lengths()
    _, best_fit = compare_packings(lengths, block=64)
    corpus = _corpus(lengths, "best_fit")
    trained = sum(int(batch.loss_mask.sum()) for batch in corpus.iter_epoch(0))
    assert trained == int(np.maximum(lengths - 1, 0).sum())
    assert best_fit.trained_fraction == pytest.approx(trained / (best_fit.rows * 64))
    assert 0 < best_fit.padding_fraction < 1 - best_fit.trained_fraction + 1e-12


def test_the_permutation_order_gives_the_permutation_streams_figures() -> None:
    lengths = _lengths()
    documents = [np.ones(int(n), dtype=np.int64) for n in lengths]
    corpus = StreamingCorpus(
        documents,
        rank=0,
        world_size=1,
        block=64,
        batch_size=8,
        layout="global",
        order="permutation",
        packing=PackingOptions("best_fit", window_documents=100),
    )
    _, best_fit = compare_packings(lengths, block=64, order="permutation", window_documents=100)
    assert best_fit.rows == corpus.num_rows(0)


def test_truncation_is_counted() -> None:
    _, best_fit = compare_packings(np.array([100, 3, 200]), block=64, truncate=True)
    assert best_fit.truncated_tokens == (100 - 65) + (200 - 65)
    assert best_fit.cut_documents == 0


def test_bad_options_are_named() -> None:
    with pytest.raises(ArgumentError, match="window_documents"):
        compare_packings(np.array([3]), block=64, window_documents=0)
    with pytest.raises(ArgumentError, match="block"):
        compare_packings(np.array([3]), block=2)
