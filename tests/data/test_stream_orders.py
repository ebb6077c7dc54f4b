"""The epoch order of a stream: blocks by default in the global layout, versioned, kept.

The row-stream contract itself (bitwise across shapes, elastic resume, every target
once) runs under both orders in ``test_streaming_corpus_global.py``; here: what the
order is, its defaults, the state fields that name it and the errors at its edges.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mixle.corpus import CorpusWriter, open_corpus
from mixle.data import Mixture, MixtureSource, StreamingCorpus, pack_documents
from mixle.data._options import DEFAULT_WINDOW_BLOCKS, OrderOptions
from mixle.data._order_windows import BlockOrder, CumulativeOffsets
from mixle.errors import ArgumentError, ArgumentTypeError, StateMismatchError
from mixle.testing import VirtualDocuments
from mixle.train._mixture import MixtureBatches
from mixle.train._sources import PackedBatches


def _documents(count: int, seed: int = 0, longest: int = 30) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 900, int(n)) for n in rng.integers(0, longest, count)]


def _global(documents: Any, **kw: Any) -> StreamingCorpus:
    options: dict[str, Any] = {"rank": 0, "world_size": 1, "block": 8, "batch_size": 2}
    return StreamingCorpus(documents, layout="global", **{**options, **kw})


def test_the_global_layout_defaults_to_the_blocks_order_and_per_rank_keeps_the_permutation() -> (
    None
):
    documents = _documents(50)
    assert _global(documents).order == OrderOptions("blocks")
    assert _global(documents).stream_identity()["order"] == {
        "name": "blocks",
        "version": 2,
        "block_documents": 50,
        "window_blocks": 1,
    }
    per_rank = StreamingCorpus(documents, rank=0, world_size=1, block=8, batch_size=2)
    assert per_rank.order.name == "permutation"
    assert "order" not in per_rank.stream_identity()
    assert "order" not in _global(documents, order="permutation").stream_identity()
    selected = _global(documents, sequence_selector=lambda order, seed, epoch: order)
    assert selected.order.name == "permutation"


def test_the_blocks_stream_is_the_packing_of_its_order_on_a_sharded_corpus(
    tmp_path: Path,
) -> None:
    lengths = np.random.default_rng(3).integers(0, 25, size=900)
    tokens = np.arange(int(lengths.sum())) % 60_000
    with CorpusWriter(tmp_path / "c", vocab_size=60_000, shard_max_bytes=700) as writer:
        writer.add_flat(tokens.astype(np.uint16), lengths)
    corpus = open_corpus(tmp_path / "c")
    stream = _global(
        corpus, block=16, batch_size=5, boundary_id=60_001, block_documents=50, window_blocks=3
    )
    expected = BlockOrder(
        900, CumulativeOffsets(corpus), seed=0, epoch=1, block_documents=50, window_blocks=3
    )
    order = stream.rank_document_indices(1)
    assert np.array_equal(
        order, np.concatenate([expected.window_documents(k) for k in range(expected.num_windows)])
    )
    fresh = open_corpus(tmp_path / "c")
    next(iter(_global(fresh, block_documents=50, window_blocks=3)))
    mixture = Mixture([MixtureSource(fresh, 1.0, "c")], block=8, block_documents=50)
    next(iter(mixture))
    assert fresh._lengths is None  # no per-document array on the way to a batch
    packed = pack_documents(corpus, order, 16, boundary_id=60_001)
    rows = np.concatenate([b.context for b in stream.iter_epoch(1)])
    assert np.array_equal(rows[: len(packed.context)], packed.context)
    assert stream.epoch_size(1) == len(packed.context)  # the cursor counts rows


def test_a_batch_at_mid_epoch_reads_only_the_windows_it_needs() -> None:
    documents = _documents(2000)
    stream = _global(documents, block_documents=20, window_blocks=2)  # 50 windows
    plan = stream._plan(0)
    stream.batch_at_row(0, plan.rows // 2)
    kept = plan.layout._kept  # type: ignore[attr-defined]
    assert 1 <= len(kept) <= 2


def test_states_resume_only_with_the_order_they_were_saved_with() -> None:
    documents = _documents(60)
    blocks = _global(documents, block_documents=7, window_blocks=3)
    permutation = _global(documents, order="permutation")
    next(iter(blocks))
    next(iter(permutation))
    with pytest.raises(StateMismatchError, match=r"Build the stream with order='permutation'"):
        _global(documents).load_state_dict(permutation.state_dict())
    with pytest.raises(
        StateMismatchError, match=r"order='blocks', block_documents=7, window_blocks=3"
    ):
        _global(documents, order="permutation").load_state_dict(blocks.state_dict())
    with pytest.raises(StateMismatchError, match=r"block_documents=7, window_blocks=3 to resume"):
        _global(documents, block_documents=8).load_state_dict(blocks.state_dict())
    resumed = _global(documents, block_documents=7, window_blocks=3)
    resumed.load_state_dict(blocks.state_dict())
    assert resumed.cursor == blocks.cursor


def test_a_state_of_the_old_default_window_resumes_only_when_the_stream_names_it() -> None:
    # Defaults are part of the identity: a state saved at W=16 (the default until
    # Dec 2) is refused by a stream of today's default W=64, with the sizes that resume it.
    documents = VirtualDocuments(300_000, lengths_limit=0)
    old = _global(documents, window_blocks=16)
    next(iter(old))
    assert old.stream_identity()["order"]["window_blocks"] == 16
    default = _global(documents)
    assert default.stream_identity()["order"]["window_blocks"] == DEFAULT_WINDOW_BLOCKS == 64
    with pytest.raises(
        StateMismatchError,
        match=r"Build the stream with order='blocks', block_documents=4096, window_blocks=16 ",
    ):
        default.load_state_dict(old.state_dict())
    assert default.cursor == (0, 0)
    resumed = _global(documents, window_blocks=16)
    resumed.load_state_dict(old.state_dict())
    for got, want in zip(next(iter(resumed)), next(iter(old)), strict=True):
        assert np.array_equal(got, want)


@pytest.mark.parametrize(
    ("order", "fragment"),
    [
        ({"name": "shuffled", "version": 1}, r"unknown order 'shuffled' in `stream.order`"),
        ("blocks", r"unknown order 'blocks' in `stream.order`"),
        (
            {"name": "blocks", "version": 3},
            r"order 'blocks' version 3 in `stream.order`; this mixle reads version\(s\) \[1, 2\]",
        ),
    ],
)
def test_a_state_of_an_unknown_order_or_version_is_refused(order: Any, fragment: str) -> None:
    stream = _global(_documents(30))
    state = stream.state_dict()
    state["stream"]["order"] = order
    with pytest.raises(StateMismatchError, match=fragment):
        stream.load_state_dict(state)
    assert stream.cursor == (0, 0)


@pytest.mark.parametrize(
    ("options", "error", "fragment"),
    [
        ({"block_documents": 0}, ArgumentError, "`block_documents` must be a positive"),
        ({"block_documents": -3}, ArgumentError, "`block_documents` must be a positive"),
        ({"block_documents": 41}, ArgumentError, "between 1 and the corpus's 40 documents"),
        ({"window_blocks": 0}, ArgumentError, "`window_blocks` must be a positive"),
        (
            {"block_documents": 10, "window_blocks": 5},
            ArgumentError,
            "`window_blocks` must be between 1 and the corpus's 4 blocks",
        ),
        ({"block_documents": 2.0}, ArgumentTypeError, "block_documents"),
        ({"order": "random"}, ArgumentError, "`order` must be one of 'blocks', 'permutation'"),
        (
            {"order": "permutation", "window_blocks": 2},
            ArgumentError,
            "`window_blocks` applies only to order='blocks'",
        ),
        (
            {"order": "permutation", "order_version": 1},
            ArgumentError,
            "`order_version` applies only to order='blocks'",
        ),
        ({"order_version": 3}, ArgumentError, r"`order_version` must be one of \[1, 2\]"),
        ({"order_version": 0}, ArgumentError, "`order_version` must be a positive integer"),
        ({"order_version": "1"}, ArgumentTypeError, "order_version"),
    ],
)
def test_bad_order_options_are_refused_before_any_batch(
    options: dict[str, Any], error: type[Exception], fragment: str
) -> None:
    with pytest.raises(error, match=fragment):
        _global(_documents(40), **options)


def test_the_blocks_order_needs_the_global_layout_and_no_selector() -> None:
    documents = _documents(20)
    with pytest.raises(ArgumentError, match="layout='per-rank' takes order='permutation'"):
        StreamingCorpus(documents, rank=0, world_size=1, block=4, batch_size=1, order="blocks")
    with pytest.raises(ArgumentError, match="`sequence_selector`"):
        _global(documents, order="blocks", sequence_selector=lambda o, s, e: o)


def _mixture(**kw: Any) -> Mixture:
    sources = [
        MixtureSource(_documents(30, 1), 0.5, "a"),
        MixtureSource(_documents(9, 2), 0.5, "b"),
    ]
    return Mixture(sources, block=8, batch_size=2, seed=3, **kw)


def test_mixture_sources_take_the_blocks_order_and_name_it_per_source() -> None:
    mixture = _mixture(block_documents=3)
    identity = mixture.stream_identity()
    assert identity["source 'a' order"]["block_documents"] == 3
    assert identity["source 'b' order"]["window_blocks"] == 3
    assert "source 'a' order" not in _mixture(order="permutation").stream_identity()
    for rows in mixture.rows:
        order = rows.layout(2).document_order()  # type: ignore[attr-defined]
        assert sorted(order.tolist()) == list(range(rows.num_documents))
    with pytest.raises(ArgumentError, match="source 'b': `block_documents` must be between"):
        _mixture(block_documents=10)
    with pytest.raises(ArgumentError, match="need objective='packed'"):
        _mixture(objective="windows", order="blocks")


def test_a_mixture_state_of_the_permutation_order_is_refused_by_a_blocks_mixture() -> None:
    old = _mixture(order="permutation")
    next(iter(old))
    with pytest.raises(StateMismatchError, match=r"`stream\[\"source 'a' order\"\]`"):
        _mixture().load_state_dict(old.state_dict())


def test_training_sources_resume_an_old_state_with_the_permutation_order() -> None:
    # A `mixle train` checkpoint from before the order field: the permutation's state.
    documents = _documents(80)
    args: dict[str, Any] = dict(rank=0, world_size=1, block=8, batch_size=2, seed=1)
    old = PackedBatches(documents, layout="global", boundary_id=None, order="permutation", **args)
    batches = iter(old)
    next(batches)
    state = old.state_dict()
    expected = [batch for batch, _ in (next(batches) for _ in range(3))]
    resumed = PackedBatches(documents, layout="global", boundary_id=None, **args)
    assert resumed.corpus.order.name == "blocks"
    resumed.load_state_dict(state)
    assert resumed.corpus.order.name == "permutation"
    for want, (got, _) in zip(expected, resumed, strict=False):
        assert np.array_equal(got.context, want.context)
    mixed = MixtureBatches(_mixture(order="permutation"))
    next(iter(mixed))
    fresh = MixtureBatches(_mixture())
    fresh.load_state_dict(mixed.state_dict())
    assert fresh.mixture.order.name == "permutation"
    assert np.array_equal(next(iter(fresh))[0].context, next(iter(mixed))[0].context)


def test_a_state_of_blocks_version_1_resumes_bitwise_when_the_stream_names_it() -> None:
    # States saved before version 2 (the default since): refused by a default stream,
    # with the argument that resumes them; resumed by it bitwise.
    documents = _documents(300, longest=40)
    old = _global(documents, block_documents=16, window_blocks=4, order_version=1)
    assert old.stream_identity()["order"]["version"] == 1
    batches = iter(old)
    for _ in range(5):
        next(batches)
    state = old.state_dict()
    expected = [next(batches) for _ in range(12)]  # across a window and an epoch edge
    default = _global(documents, block_documents=16, window_blocks=4)
    assert default.stream_identity()["order"]["version"] == 2
    assert not np.array_equal(next(iter(default))[0], next(iter(old))[0])
    with pytest.raises(
        StateMismatchError,
        match=r"Build the stream with order='blocks', block_documents=16, window_blocks=4, "
        r"order_version=1 to resume",
    ):
        default.load_state_dict(state)
    resumed = _global(documents, block_documents=16, window_blocks=4, order_version=1)
    resumed.load_state_dict(state)
    for want, got in zip(expected, resumed, strict=False):
        for a, b in zip(want, got, strict=True):
            assert np.array_equal(a, b)
    assert OrderOptions("blocks") == OrderOptions("blocks", version=2)
    assert OrderOptions("permutation").version is None


def test_training_sources_and_mixtures_follow_a_version_1_state() -> None:
    # `mixle train` leaves the order unset on --resume: a checkpoint of version 1
    # resumes with it, the single stream's and every mixture source's.
    documents = _documents(120)
    args: dict[str, Any] = dict(rank=0, world_size=1, block=8, batch_size=2, seed=1)
    old = PackedBatches(documents, layout="global", boundary_id=None, **args)
    old.corpus = old.stream = StreamingCorpus(documents, layout="global", order_version=1, **args)
    batches = iter(old)
    next(batches)
    state = old.state_dict()
    expected = [batch for batch, _ in (next(batches) for _ in range(3))]
    resumed = PackedBatches(documents, layout="global", boundary_id=None, **args)
    resumed.load_state_dict(state)
    assert resumed.corpus.order.version == 1
    for want, (got, _) in zip(expected, resumed, strict=False):
        assert np.array_equal(got.context, want.context)
    mixed = MixtureBatches(_mixture(order_version=1))
    next(iter(mixed))
    fresh = MixtureBatches(_mixture())
    assert fresh.mixture.order.version == 2
    fresh.load_state_dict(mixed.state_dict())
    assert fresh.mixture.order == OrderOptions("blocks", version=1)
    assert np.array_equal(next(iter(fresh))[0].context, next(iter(mixed))[0].context)
    with pytest.raises(StateMismatchError, match="order_version=1"):
        _mixture().load_state_dict(mixed.state_dict())
    kept = MixtureBatches(_mixture(), follow_saved_order=False)
    with pytest.raises(StateMismatchError, match="order_version=1"):
        kept.load_state_dict(mixed.state_dict())


def test_train_config_takes_an_order_for_the_packed_objective_only() -> None:
    from mixle.train import TrainConfig

    assert TrainConfig(corpus="c", order="permutation").order == "permutation"
    assert "order" not in TrainConfig(corpus="c", order="blocks").identity()
    with pytest.raises(ArgumentError, match="`order` must be one of blocks, permutation"):
        TrainConfig(corpus="c", order="random")
    with pytest.raises(ArgumentError, match="`order` needs objective='packed'"):
        TrainConfig(corpus="c", objective="windows", order="blocks")
