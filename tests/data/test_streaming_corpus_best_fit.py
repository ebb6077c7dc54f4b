"""StreamingCorpus(layout="global", packing="best_fit"): exactly once, elastic, refused by name."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.corpus import CorpusWriter, open_corpus
from mixle.data._attention import attention_boundaries
from mixle.data._packing_options import PackingOptions
from mixle.data._streaming import StreamingCorpus
from mixle.errors import ArgumentError, StateMismatchError


def _documents(lengths: list[int], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 500, size, dtype=np.int64) for size in lengths]


def _corpus(documents: list[np.ndarray], **kwargs: object) -> StreamingCorpus:
    options: dict[str, object] = {
        "rank": 0,
        "world_size": 1,
        "block": 16,
        "batch_size": 4,
        "layout": "global",
        "packing": "best_fit",
        "document_ids": True,
    }
    options.update(kwargs)
    return StreamingCorpus(documents, **options)  # type: ignore[arg-type]


def _trained_pairs(corpus: StreamingCorpus, documents: list[np.ndarray], boundary: int | None):
    """(document, position) of every trained target, checking each token on the way."""
    pairs: list[tuple[int, int]] = []
    for batch in corpus.iter_epoch(0):
        ids, positions, mask = batch.document_ids, batch.position_ids, batch.loss_mask
        for row, slot in zip(*np.nonzero(mask), strict=True):
            document, position = int(ids[row, slot]), int(positions[row, slot])
            text = documents[document]
            expected = text[position] if position < len(text) else boundary
            assert batch.context[row, slot] == expected
            following = text[position + 1] if position + 1 < len(text) else boundary
            assert batch.targets[row, slot] == following
            pairs.append((document, position))
    return pairs


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(0, 70), min_size=1, max_size=50),
    st.integers(3, 24),
    st.sampled_from([None, 0]),
    st.integers(1, 20),
    st.sampled_from(["blocks", "permutation"]),
)
def test_every_pair_of_every_document_is_trained_once_per_epoch(
    lengths: list[int], block: int, boundary: int | None, window: int, order: str
) -> None:
    documents = _documents(lengths)
    sizes = {"block_documents": 1 + window % len(lengths)} if order == "blocks" else {}
    corpus = _corpus(
        documents,
        block=block,
        boundary_id=boundary,
        order=order,
        packing=PackingOptions("best_fit", window_documents=window),
        **sizes,
    )
    pairs = _trained_pairs(corpus, documents, boundary)
    extra = 0 if boundary is None else 1
    expected = {(d, p) for d, text in enumerate(documents) for p in range(len(text) - 1 + extra)}
    if boundary is not None:  # an empty document still trains nothing
        expected = {(d, p) for d, p in expected if len(documents[d])}
    assert len(pairs) == len(set(pairs)) and set(pairs) == expected


def test_only_documents_longer_than_a_row_are_cut() -> None:
    rng = np.random.default_rng(3)
    lengths = np.maximum(rng.lognormal(np.log(50), 1.0, 2000).astype(int), 1).tolist()
    documents = _documents(lengths)
    corpus = _corpus(documents, block=256, batch_size=8)
    rows_of: dict[int, set[tuple[int, int]]] = {}
    for index, batch in enumerate(corpus.iter_epoch(0)):
        for row in range(batch.num_rows):
            for document in set(batch.document_ids[row].tolist()) - {-1}:
                rows_of.setdefault(document, set()).add((index, row))
    cut = {d for d, rows in rows_of.items() if len(rows) > 1}
    assert cut == {d for d, size in enumerate(lengths) if size > 257}


def test_a_state_resumes_with_another_world_size_and_batch_size() -> None:
    documents = _documents(np.random.default_rng(1).integers(1, 50, 200).tolist())
    whole = _corpus(documents, batch_size=6)
    rows = np.concatenate([b.context for b in whole.iter_epoch(0)])
    saved = _corpus(documents, world_size=2, rank=1, batch_size=3)
    for _ in zip(range(5), saved.batches(), strict=False):
        pass
    state = saved.state_dict()
    for rank in range(3):
        resumed = _corpus(documents, world_size=3, rank=rank, batch_size=2)
        resumed.load_state_dict(state)
        row = state["row"]
        batch = next(resumed.batches())
        assert np.array_equal(batch.context, rows[row + 2 * rank : row + 2 * rank + 2])


def test_each_packing_refuses_the_others_state_by_name() -> None:
    documents = _documents([5, 9, 30, 2, 17])
    best_fit = _corpus(documents)
    concatenate = _corpus(documents, packing="concatenate")
    with pytest.raises(StateMismatchError, match="packing in checkpoint"):
        best_fit.load_state_dict(concatenate.state_dict())
    with pytest.raises(StateMismatchError, match="packing in checkpoint"):
        concatenate.load_state_dict(best_fit.state_dict())


def test_best_fit_with_the_per_rank_layout_is_refused() -> None:
    with pytest.raises(ArgumentError, match="layout='global'"):
        _corpus(_documents([4]), layout="per-rank")


def test_an_unknown_packing_is_refused_with_the_accepted_names() -> None:
    with pytest.raises(ArgumentError, match="`packing` must be one of 'concatenate', 'best_fit'"):
        _corpus(_documents([4]), packing="first_fit")


def test_bad_window_option_is_refused_before_any_batch() -> None:
    with pytest.raises(ArgumentError, match="window_documents"):
        PackingOptions("best_fit", window_documents=0)


def test_a_block_too_small_for_best_fit_is_refused() -> None:
    with pytest.raises(ArgumentError, match="at least 3 with packing='best_fit'"):
        _corpus(_documents([4]), block=2)


def test_truncation_keeps_one_row_per_document() -> None:
    documents = _documents([40, 3, 5])
    corpus = _corpus(documents, packing=PackingOptions("best_fit", truncate=True))
    pairs = _trained_pairs(corpus, documents, None)
    assert sorted(pairs) == sorted(
        {(0, p) for p in range(16)} | {(1, 0), (1, 1)} | {(2, p) for p in range(4)}
    )


@pytest.mark.parametrize("packing", ["concatenate", "best_fit"])
def test_attention_boundaries_mark_each_document_of_a_row(packing: str) -> None:
    documents = _documents([5, 9, 30, 2, 17, 1, 8])
    corpus = _corpus(documents, packing=packing, attention_boundaries=True)
    for batch in corpus.iter_epoch(0):
        assert batch.cu_seqlens.dtype == np.int32 and batch.cu_seqlens.shape == (4, 17)
        for row in range(batch.num_rows):
            cu = batch.cu_seqlens[row]
            ends = cu[1:][cu[1:] > cu[:-1]]
            starts = np.concatenate(([0], ends[:-1]))
            for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
                run = batch.document_ids[row, start:end]
                assert (run == run[0]).all()
                if run[0] >= 0:
                    positions = batch.position_ids[row, start:end]
                    assert (np.diff(positions) == 1).all()
            assert batch.max_seqlen[row] == np.diff(cu).max()
            assert batch.sequence_ids[row, 0] == 0


def test_boundaries_split_a_document_that_repeats_in_a_row() -> None:
    ids = np.array([[3, 3, 3, 3, -1, -1]])
    positions = np.array([[0, 1, 0, 1, 0, 0]])
    cu_seqlens, max_seqlen, sequence_ids = attention_boundaries(ids, positions)
    assert cu_seqlens.tolist() == [[0, 2, 4, 6, 6, 6, 6]]
    assert max_seqlen.tolist() == [2] and sequence_ids.tolist() == [[0, 0, 1, 1, 2, 2]]


def test_read_ahead_hints_each_document_once(tmp_path: Path) -> None:
    documents = _documents(np.random.default_rng(4).integers(1, 40, 600).tolist())
    with CorpusWriter(tmp_path / "c", dtype="uint16", durable=False) as writer:
        writer.add_many(documents)
    corpus_documents = open_corpus(tmp_path / "c")
    hinted: list[int] = []
    corpus_documents.prefetch = lambda indices: hinted.extend(np.asarray(indices).tolist())  # type: ignore[method-assign]
    corpus = _corpus(corpus_documents, order="permutation", packing=PackingOptions("best_fit", 100))
    for _ in corpus.iter_epoch(0):
        pass
    assert len(hinted) == len(set(hinted)) > 0


def test_the_row_shuffle_is_keyed_by_the_epoch() -> None:
    # Every epoch packs the same order here (a selector that keeps the natural order),
    # so only the epoch tells the row shuffles apart: the same rows, in another order.
    documents = _documents([int(n) for n in np.random.default_rng(3).integers(1, 40, 300)])
    corpus = _corpus(
        documents, block=32, sequence_selector=lambda order, seed, epoch: np.sort(order)
    )

    def rows(epoch: int) -> list[bytes]:
        return [row.tobytes() for b in corpus.iter_epoch(epoch) for row in b.document_ids]

    first, second = rows(0), rows(1)
    assert sorted(first) == sorted(second)
    assert first != second


@pytest.mark.parametrize(
    ("order_version", "expected"), [(1, "24e4d1cea551cd40"), (2, "4d23d6db953276f9")]
)
def test_the_rows_of_packing_version_1_are_pinned(order_version: int, expected: str) -> None:
    # A change to best-fit rows must bump the packing's version (states name it); the
    # windows it packs are those of the blocks order's version (each pinned).
    rng = np.random.default_rng(0)
    documents = [rng.integers(0, 1000, int(n)) for n in rng.integers(0, 90, 200)]
    corpus = _corpus(
        documents,
        block=32,
        boundary_id=7,
        block_documents=16,
        window_blocks=4,
        order_version=order_version,
    )
    digest = hashlib.sha256()
    for batch in corpus.iter_epoch(0):
        fields = (batch.context, batch.targets, batch.loss_mask)
        for value in (*fields, batch.document_ids, batch.position_ids):
            digest.update(np.ascontiguousarray(value).tobytes())
    assert corpus.stream_identity()["packing"]["version"] == 1
    assert digest.hexdigest()[:16] == expected
