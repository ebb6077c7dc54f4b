"""Golden digests: batches, state dicts and saved plans of the data layer, pinned.

Each configuration below reads the committed sample corpus (``shards/sample``) through
one public path — the seed tuples of ``StreamingCorpus``/``TokenStream``/
``stream_token_source``, random access, mixtures, the torch and Hugging Face adapters,
the trainer's batch sources, and the plans a plan store is given — and hashes what it
produces (every array's dtype, shape and bytes; every state dict as canonical JSON).
The digests were computed before the data layer was restructured into typed stages
and must never change: a restructure that changes one byte of a batch, a state or a
plan fails here. The streams that default to the blocks order are pinned with
``order="permutation"`` (the order they were computed with); ``corpus_blocks`` pins
the blocks order itself from its first version, ``blocks_default_sizes`` its default
sizes, each at ``order_version=1`` and again (``_v2``) at version 2, the default.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from mixle.corpus import open_corpus
from mixle.data import Mixture, MixtureSource, StreamingCorpus, TokenStream, stream_token_source
from mixle.data.torch import StreamingDataset, TokenStreamDataset
from mixle.hf import GlobalRowDataset
from mixle.testing import VirtualDocuments
from mixle.train._mixture import MixtureBatches
from mixle.train._sources import eval_batches, make_source

SAMPLE = Path(__file__).resolve().parents[2] / "shards" / "sample"


class _Digest:
    def __init__(self) -> None:
        self._hash = hashlib.sha256()

    def array(self, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            value = value.numpy()
        array = np.ascontiguousarray(value)
        self._hash.update(f"{array.dtype.str}{array.shape}".encode())
        self._hash.update(array.tobytes())

    def batch(self, batch: Any) -> None:
        parts = batch.as_tuple() if hasattr(batch, "as_tuple") else batch
        self._hash.update(f"batch{len(parts)}".encode())
        for part in parts:
            self.array(part)

    def batches(self, batches: Iterable[Any], count: int) -> None:
        for _, batch in zip(range(count), batches, strict=False):
            self.batch(batch)

    def json(self, value: Any) -> None:
        self._hash.update(json.dumps(value, sort_keys=True, default=repr).encode())

    def hexdigest(self) -> str:
        return self._hash.hexdigest()[:24]


class _RecordingStore:
    """A plan store in memory that remembers every plan it was given, in order."""

    def __init__(self) -> None:
        self.saved: list[tuple[dict[str, Any], dict[str, np.ndarray]]] = []
        self._plans: dict[str, Mapping[str, np.ndarray]] = {}

    @staticmethod
    def _key(identity: Mapping[str, Any]) -> str:
        return json.dumps(dict(identity), sort_keys=True)

    def load(self, identity: Mapping[str, Any]) -> Mapping[str, np.ndarray] | None:
        return self._plans.get(self._key(identity))

    def save(self, identity: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        self.saved.append((dict(identity), {k: np.array(v) for k, v in arrays.items()}))
        self._plans[self._key(identity)] = dict(arrays)

    def digest_into(self, digest: _Digest) -> None:
        for identity, arrays in self.saved:
            digest.json(identity)
            for name in sorted(arrays):
                digest.json(name)
                digest.array(arrays[name])


@pytest.fixture(scope="module")
def sample() -> Any:
    return open_corpus(SAMPLE)


def _corpus_per_rank(docs: Any, digest: _Digest) -> None:
    kw: dict[str, Any] = dict(
        rank=1, world_size=2, block=16, batch_size=3, seed=3, boundary_id=0, document_ids=True
    )
    corpus = StreamingCorpus(docs[:300], **kw)
    digest.batches(corpus.epoch_batches(0), 40)
    digest.batches(corpus.epoch_batches(1, start_batch=2), 5)
    digest.batch(corpus.batch_at(1, 4))
    digest.array(corpus.rank_document_indices(2))
    digest.json([corpus.num_batches(e) for e in range(3)])
    batches = iter(corpus)
    digest.batches(batches, 5)
    digest.json(corpus.state_dict())
    digest.json(corpus.advance(0, 3, 1000))
    resumed = StreamingCorpus(docs[:300], **kw)
    resumed.load_state_dict(corpus.state_dict())
    digest.batches(resumed, 3)
    digest.json(resumed.state_dict())


def _corpus_global(docs: Any, digest: _Digest) -> None:
    kw: dict[str, Any] = dict(
        world_size=3, block=64, batch_size=2, seed=4, pad_id=7, boundary_id=1, document_ids=True
    )
    corpus = StreamingCorpus(docs[:40], rank=1, layout="global", order="permutation", **kw)
    digest.json(corpus.num_rows(0))
    digest.batches(iter(corpus), 30)  # crosses the end of epoch 0
    digest.json(corpus.state_dict())
    digest.batch(corpus.batch_at_row(1, 5))
    digest.batch(corpus.batch_at(0, 2))
    digest.batches(corpus.epoch_batches(2, start_batch=12), 10)
    digest.json([corpus.advance(0, 6, s) for s in (0, 1, 26, 27, 60)])
    digest.json(corpus.steps_left(0, 12))
    other = StreamingCorpus(
        docs[:40], rank=0, layout="global", order="permutation", **{**kw, "world_size": 2}
    )
    other.load_state_dict(corpus.state_dict())
    digest.batches(other, 4)
    digest.json(other.state_dict())


def _corpus_blocks(docs: Any, digest: _Digest, version: int = 1) -> None:
    """The blocks order (``version``), pinned from its first release: a change to it
    needs a new order version."""
    kw: dict[str, Any] = dict(
        world_size=2, block=32, batch_size=3, seed=6, boundary_id=1, document_ids=True
    )
    corpus = StreamingCorpus(
        docs[:200],
        rank=1,
        layout="global",
        block_documents=16,
        window_blocks=3,
        order_version=version,
        **kw,
    )
    digest.array(corpus.rank_document_indices(1))
    digest.batches(iter(corpus), 12)
    digest.json(corpus.state_dict())
    digest.batch(corpus.batch_at_row(2, 30))
    mixture = Mixture(
        [MixtureSource(docs[:50], 0.5, "a"), MixtureSource(docs[50:90], 0.5, "b")],
        block=16,
        batch_size=2,
        seed=2,
        block_documents=8,
        order_version=version,
    )
    digest.batches(iter(mixture), 6)
    digest.json(mixture.state_dict())


def _blocks_default_sizes(docs: Any, digest: _Digest, version: int = 1) -> None:
    """The blocks order at its default sizes (B=4096, W=64 since Dec 2; the sample
    corpus is one block, so a virtual corpus of two windows): a new default is a new
    digest here, and states of the old sizes resume by naming them."""
    del docs
    corpus = StreamingCorpus(
        VirtualDocuments(300_000, lengths_limit=0),
        rank=0,
        world_size=2,
        block=64,
        batch_size=2,
        seed=4,
        layout="global",
        order_version=version,
    )
    digest.json(corpus.stream_identity()["order"])
    digest.batches(iter(corpus), 3)
    digest.json(corpus.state_dict())
    digest.batch(corpus.batch_at_row(0, corpus.num_rows(0) - 3))


def _corpus_plan_store(docs: Any, digest: _Digest) -> None:
    for layout in ("per-rank", "global"):
        store = _RecordingStore()
        kw: dict[str, Any] = dict(rank=0, world_size=2, block=32, batch_size=2, seed=9)
        corpus = StreamingCorpus(
            docs[:120], layout=layout, plan_store=store, order="permutation", **kw
        )
        digest.batches(corpus.epoch_batches(1), 3)
        again = StreamingCorpus(
            docs[:120], layout=layout, plan_store=store, order="permutation", **kw
        )
        digest.batches(again.epoch_batches(1), 3)
        store.digest_into(digest)


def _token_streams(docs: Any, digest: _Digest) -> None:
    local = TokenStream(docs[:50], 12, 5, epochs=2, seed=2, boundary_id=0)
    digest.batches(iter(local), 7)
    digest.json(local.state_dict())
    digest.batch(local.batch(1, 3))
    digest.batches(local.epoch_batches(1, start_batch=1, step=3), 4)
    local.advance(4)
    digest.json(local.state_dict())
    shared = TokenStream(docs[:50], 12, 5, epochs=2, seed=2, rank=1, world_size=2)
    digest.batches(iter(shared), 6)
    digest.json(shared.state_dict())
    digest.batch(shared.batch_at_position(0, 17))
    digest.json(shared.advance_position(0, 10, 3))
    ordered = TokenStream(docs[:20], 8, 4, shuffle=False)
    digest.batches(iter(ordered), 5)
    tokens = np.concatenate([np.asarray(d, dtype=np.int64) for d in docs[:10]])
    digest.batches(stream_token_source(tokens, 8, 6, epochs=2, seed=1), 10)
    digest.batches(stream_token_source(tokens, 8, 6, shuffle=False), 3)
    digest.batches(stream_token_source([docs[i] for i in range(10)], 8, 6, seed=1), 4)


def _mixtures(docs: Any, digest: _Digest) -> None:
    sources = [MixtureSource(docs[:30], 0.3, "a"), MixtureSource(docs[30:80], 0.7, "b")]
    store = _RecordingStore()
    packed = Mixture(
        sources,
        block=32,
        batch_size=3,
        rank=1,
        world_size=2,
        seed=5,
        boundary_id=0,
        document_ids=True,
        phases=[(40, {"a": 1.0, "b": 1.0})],
        plan_store=store,
        order="permutation",
    )
    digest.batches(iter(packed), 8)
    digest.json(packed.state_dict())
    digest.batch(packed.rows_at(3, 11))
    digest.batch(packed.batch_at_row(7))
    store.digest_into(digest)
    windows = Mixture(sources, block=12, batch_size=4, seed=1, objective="windows")
    digest.batches(iter(windows), 6)
    digest.json(windows.state_dict())
    digest.json([(a.name, a.rows, a.real_tokens) for a in packed.accounting(500)])


def _torch_adapters(docs: Any, digest: _Digest) -> None:
    corpus = StreamingCorpus(docs[:60], rank=0, world_size=2, block=16, batch_size=3, seed=1)
    dataset = StreamingDataset(corpus, num_epochs=2)
    digest.batches(iter(dataset), 6)
    digest.json(dataset.state_dict())
    rows = StreamingCorpus(
        docs[:60],
        rank=1,
        world_size=2,
        block=16,
        batch_size=3,
        layout="global",
        order="permutation",
    )
    digest.batches(iter(StreamingDataset(rows)), 4)
    stream = TokenStream(docs[:60], 10, 4, epochs=2, seed=3)
    windows = TokenStreamDataset(stream)
    digest.batches(iter(windows), 5)
    digest.json(windows.state_dict())
    shared = TokenStreamDataset(TokenStream(docs[:60], 10, 4, seed=3, rank=1, world_size=2))
    digest.batches(iter(shared), 5)
    digest.json(shared.state_dict())


def _hf_rows(docs: Any, digest: _Digest) -> None:
    corpus = StreamingCorpus(
        docs[:40],
        rank=0,
        world_size=2,
        block=16,
        batch_size=3,
        seed=2,
        boundary_id=0,
        document_ids=True,
        layout="global",
        order="permutation",
    )
    rows = GlobalRowDataset(corpus, num_epochs=2)
    items: Iterator[dict[str, torch.Tensor]] = iter(rows)
    for _, item in zip(range(14), items, strict=False):
        for name in sorted(item):
            digest.json(name)
            digest.array(item[name])
    digest.json(rows.state_dict())
    digest.json(rows.state_after(5))


def _train_sources(docs: Any, digest: _Digest) -> None:
    args: dict[str, Any] = dict(rank=1, world_size=2, block=16, batch_size=2, seed=4, boundary_id=0)
    for objective, layout in (
        ("packed", "per-rank"),
        ("packed", "global"),
        ("windows", "per-rank"),
        ("windows", "global"),
    ):
        order = {"order": "permutation"} if objective == "packed" else {}
        source = make_source(objective, docs[:50], layout=layout, **order, **args)
        pairs: Iterator[tuple[Any, tuple[int, int]]] = iter(source)
        for _, (batch, batch_id) in zip(range(4), pairs, strict=False):
            digest.batch(batch)
            digest.json(batch_id)
        digest.json(source.state_dict())
        digest.json([source.steps_in_epoch(0), source.steps_left(0, 1)])
    mixture = Mixture(
        [MixtureSource(docs[:30], 0.5, "a"), MixtureSource(docs[30:60], 0.5, "b")],
        block=16,
        batch_size=2,
        seed=3,
        order="permutation",
    )
    mixed: Iterator[tuple[Any, tuple[int, int]]] = iter(MixtureBatches(mixture))
    for _, (batch, batch_id) in zip(range(3), mixed, strict=False):
        digest.batch(batch)
        digest.json(batch_id)
    for objective in ("packed", "windows"):
        eval_args: dict[str, Any] = dict(block=16, batch_size=2, seed=4, boundary_id=None)
        for batch in eval_batches(objective, docs[50:70], limit=3, **eval_args):
            digest.batch(batch)


def _state_key_order(docs: Any, digest: _Digest) -> None:
    """State dicts as a checkpoint writes them: JSON in the dicts' own key order."""

    def ordered(state: Any) -> None:
        digest._hash.update(json.dumps(state).encode())

    for layout in ("per-rank", "global"):
        corpus = StreamingCorpus(
            docs[:40], rank=1, world_size=2, block=16, batch_size=2, layout=layout,
            order="permutation",
        )  # fmt: skip
        digest.batches(iter(corpus), 3)
        ordered(corpus.state_dict())
        ordered(StreamingDataset(corpus).state_dict())
    for world_size in (None, 2):
        stream = TokenStream(docs[:40], 8, 3, rank=0, world_size=world_size)
        digest.batches(iter(stream), 3)
        ordered(stream.state_dict())
        ordered(TokenStreamDataset(stream).state_dict())
    mixture = Mixture(
        [MixtureSource(docs[:20], 1.0, "a")], block=16, batch_size=2, order="permutation"
    )
    digest.batches(iter(mixture), 2)
    ordered(mixture.state_dict())
    rows = StreamingCorpus(
        docs[:40],
        rank=0,
        world_size=2,
        block=16,
        batch_size=2,
        layout="global",
        order="permutation",
    )
    ordered(GlobalRowDataset(rows).state_after(3))


GOLDEN = {
    "corpus_per_rank": (_corpus_per_rank, "0ea2d89bc7dc9950329df3d4"),
    "corpus_global": (_corpus_global, "2e909fb3829b4bcfa7aa9e62"),
    "corpus_blocks": (_corpus_blocks, "d8facc20237b716e16f04d91"),
    "blocks_default_sizes": (_blocks_default_sizes, "82fb4f99d50a2f2e79b1c771"),
    # Version 2 (Dec 2 late: mixed-radix bijections, a window's blocks ascending), the
    # default since: pinned from its first release, as version 1 above.
    "corpus_blocks_v2": (functools.partial(_corpus_blocks, version=2), "3fed156665644003598089d5"),
    "blocks_default_sizes_v2": (
        functools.partial(_blocks_default_sizes, version=2),
        "075cc9c10dfdc8f6975fce8d",
    ),
    "corpus_plan_store": (_corpus_plan_store, "c5353418cc51b70a3980bfaf"),
    "token_streams": (_token_streams, "1ac18150294882011ac50e9b"),
    "mixtures": (_mixtures, "9b24591824cf838c9cf94a88"),
    "torch_adapters": (_torch_adapters, "f766379478b017c84ecd8d0c"),
    "hf_rows": (_hf_rows, "d7eadbf59bb31bd54ed4aa77"),
    "state_key_order": (_state_key_order, "834efdcfcdd58cb18ae3c5b4"),
    "train_sources": (_train_sources, "513d6f7d09ca01d083b200f9"),
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_streams_are_byte_identical_to_the_golden_digests(sample: Any, name: str) -> None:
    build, expected = GOLDEN[name]
    digest = _Digest()
    build(sample, digest)
    assert digest.hexdigest() == expected
