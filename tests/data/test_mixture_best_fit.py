"""Mixture(packing="best_fit"): exactly once per source epoch, resumable, elastic, refused by name."""

from __future__ import annotations

import pickle
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.data import Mixture, MixtureSource, PackingOptions
from mixle.data._attention import attention_boundaries
from mixle.data._mixture_best_fit import BestFitSourceRows
from mixle.errors import ArgumentError, StateMismatchError


def _documents(lengths: list[int], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 500, size, dtype=np.int64) for size in lengths]


def _sources(seed: int = 0) -> list[MixtureSource]:
    rng = np.random.default_rng(seed)
    web = _documents(rng.integers(0, 70, 60).tolist(), seed + 1)
    code = _documents(rng.integers(1, 30, 9).tolist(), seed + 2)
    return [MixtureSource(web, 0.7, "web"), MixtureSource(code, 0.3, "code")]


def _mixture(sources: list[MixtureSource], **kwargs: object) -> Mixture:
    options: dict[str, object] = {
        "block": 16,
        "batch_size": 4,
        "seed": 5,
        "packing": "best_fit",
        "document_ids": True,
    }
    options.update(kwargs)
    return Mixture(sources, **options)  # type: ignore[arg-type]


@settings(max_examples=20, deadline=None)
@given(
    st.lists(st.integers(0, 60), min_size=1, max_size=30),
    st.integers(3, 20),
    st.sampled_from([None, 0]),
    st.sampled_from(["blocks", "permutation"]),
    st.integers(1, 12),
    st.booleans(),
)
def test_every_pair_is_trained_once_per_source_epoch(
    lengths: list[int], block: int, boundary: int | None, order: str, window: int, truncate: bool
) -> None:
    small = _documents(lengths, 1)
    big = _documents([7, 40, 3, 25], 2)
    if not sum(lengths) - (0 if boundary is not None else len(lengths)) > 0:
        small.append(np.arange(1, 5))
    sizes = {"block_documents": 1 + window % min(len(small), 4)} if order == "blocks" else {}
    packing = PackingOptions("best_fit", window_documents=window, truncate=truncate)
    mixture = _mixture(
        [MixtureSource(small, 0.5, "small"), MixtureSource(big, 0.5, "big")],
        block=block,
        boundary_id=boundary,
        order=order,
        packing=packing,
        **sizes,
    )
    source = mixture.rows[0]
    assert isinstance(source, BestFitSourceRows)
    epochs = 3
    rows = epochs * source.rows_per_epoch
    batch = source.read(0, rows, True)
    tokens, mask, document_ids, position_ids = batch
    capacity = block + 1
    for epoch in range(epochs):
        part = slice(epoch * source.rows_per_epoch, (epoch + 1) * source.rows_per_epoch)
        pairs = Counter()
        for row, slot in zip(*np.nonzero(mask[part]), strict=True):
            row += part.start
            document, position = int(document_ids[row, slot]), int(position_ids[row, slot])
            text = small[document]
            assert tokens[row, slot] == (text[position] if position < len(text) else boundary)
            following = text[position + 1] if position + 1 < len(text) else boundary
            assert tokens[row, slot + 1] == following
            pairs[(document, position)] += 1
        extra = 0 if boundary is None else 1
        expected = {
            (d, p)
            for d, text in enumerate(small)
            for p in range(len(text) - 1 + extra if len(text) else 0)
            if not truncate or p < capacity - 1
        }
        assert set(pairs) == expected and set(pairs.values()) <= {1}
        # The closed-form count agrees with the rows, whole epochs and partial ones.
        assert source.real_tokens((epoch + 1) * source.rows_per_epoch) == int(
            mask[: part.stop].sum()
        )
    for cut in (1, source.rows_per_epoch // 2, source.rows_per_epoch + 1):
        assert source.real_tokens(cut) == int(mask[:cut].sum())


def test_rows_resume_bitwise_at_random_rows_and_with_any_world_size() -> None:
    sources = _sources()
    whole = _mixture(sources, attention_boundaries=True)
    rows = whole.read_rows(0, 600)
    rng = np.random.default_rng(7)
    for row in rng.integers(0, 500, 6).tolist():
        saved = _mixture(sources, world_size=2, rank=1, batch_size=3, attention_boundaries=True)
        saved.seek(int(row))
        state = saved.state_dict()
        for world, batch_size in ((3, 2), (1, 6), (2, 3)):
            for rank in range(world):
                resumed = _mixture(
                    sources,
                    world_size=world,
                    rank=rank,
                    batch_size=batch_size,
                    attention_boundaries=True,
                )
                resumed.load_state_dict(state)
                batch = next(resumed.batches())
                first = row + rank * batch_size
                expected = rows.rows(slice(first, first + batch_size))
                for name, value in expected.to_dict().items():
                    assert np.array_equal(getattr(batch, name), value), name


def test_attention_boundaries_follow_the_document_ids() -> None:
    batch = _mixture(_sources(), attention_boundaries=True, boundary_id=0).read_rows(0, 40)
    assert batch.document_ids is not None and batch.position_ids is not None
    cu_seqlens, max_seqlen, sequence_ids = attention_boundaries(
        batch.document_ids, batch.position_ids
    )
    assert np.array_equal(batch.cu_seqlens, cu_seqlens)
    assert np.array_equal(batch.max_seqlen, max_seqlen)
    assert np.array_equal(batch.sequence_ids, sequence_ids)
    # A row's batches in iteration carry the same boundaries as the rows read whole.
    first = next(_mixture(_sources(), attention_boundaries=True, boundary_id=0).batches())
    assert np.array_equal(first.cu_seqlens, cu_seqlens[:4])


def test_best_fit_cuts_no_document_shorter_than_a_row() -> None:
    sources = _sources(3)
    mixture = _mixture(sources, block=32, boundary_id=0)
    source = mixture.rows[0]
    _, _, document_ids, _ = source.read(0, source.rows_per_epoch, True)
    rows_of: dict[int, set[int]] = {}
    for row, ids in enumerate(document_ids):
        for document in set(ids.tolist()) - {-1}:
            rows_of.setdefault(document, set()).add(row)
    cut = {d for d, rows in rows_of.items() if len(rows) > 1}
    longer = {d for d, text in enumerate(sources[0].documents) if len(text) + 1 > 33}
    assert cut == longer


def test_each_packing_refuses_the_others_state_by_name() -> None:
    sources = _sources()
    best_fit = _mixture(sources)
    concatenate = _mixture(sources, packing="concatenate")
    with pytest.raises(StateMismatchError, match="packing in checkpoint"):
        best_fit.load_state_dict(concatenate.state_dict())
    with pytest.raises(StateMismatchError, match="packing in checkpoint"):
        concatenate.load_state_dict(best_fit.state_dict())
    truncated = _mixture(sources, packing=PackingOptions("best_fit", truncate=True))
    with pytest.raises(StateMismatchError, match="packing in checkpoint"):
        truncated.load_state_dict(best_fit.state_dict())
    assert "packing" not in concatenate.stream_identity()  # old states keep resuming


def test_bad_options_raise_naming_the_option() -> None:
    sources = _sources()
    with pytest.raises(ArgumentError, match="packing='best_fit'"):
        _mixture(sources, objective="windows", document_ids=False)
    with pytest.raises(ArgumentError, match="attention_boundaries=True"):
        _mixture(
            sources,
            objective="windows",
            document_ids=False,
            packing="concatenate",
            attention_boundaries=True,
        )
    with pytest.raises(ArgumentError, match="`block` must be at least 3"):
        _mixture(sources, block=2)
    with pytest.raises(ArgumentError, match="`packing` must be one of"):
        _mixture(sources, packing="first_fit")
    empty = [MixtureSource([np.array([5])], 1.0, "one")]
    with pytest.raises(ArgumentError, match="source 'one' is empty"):
        _mixture(empty)


def test_a_pickled_mixture_reads_the_same_rows_without_its_packed_windows() -> None:
    mixture = _mixture(_sources(), boundary_id=0)
    rows = mixture.read_rows(0, 30)
    source = mixture.rows[0]
    assert isinstance(source, BestFitSourceRows) and source._plans
    copy = pickle.loads(pickle.dumps(mixture))
    assert not copy.rows[0]._plans  # rebuilt where it is read
    again = copy.read_rows(0, 30)
    for name, value in rows.to_dict().items():
        assert np.array_equal(getattr(again, name), value), name
