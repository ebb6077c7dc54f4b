"""The methods ``tools/bench_peers.py`` times: mixle, its floors, and each installed peer.

Every :class:`Method` carries a factory (``make``) that builds its readers or writers
and returns a ``step``: one unit of work (a whole-corpus write, one document read, one
batch of rows) returning its size. Timing builds the step once and reuses it across
rounds; the memory pass builds a fresh one, so what a method maps and allocates while it
is constructed and run is what is measured.

A peer is only imported when it is installed; :data:`INSTALL` gives the pip line that
installs it next to the pinned CPU torch (``--no-deps`` for the package itself, then its
light dependencies by name, none of which pulls torch).
"""

from __future__ import annotations

import importlib.util
import itertools
import shutil
import statistics
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mixle._gather import numba_available
from mixle.corpus import CorpusWriter, open_corpus
from mixle.data import StreamingCorpus, TokenStream, set_gather_backend
from tools.bench_token_stream import nanogpt_batches

VOCAB = 50257  # < 2**16, so every format stores uint16 (2 bytes per token)

INSTALL = {
    "megatron": "pip install --no-deps megatron-core==0.16.1",
    "litdata": (
        "pip install --no-deps litdata==0.2.76 && "
        "pip install lightning-utilities obstore tifffile filelock boto3 requests"
    ),
    "mds": (
        "pip install --no-deps mosaicml-streaming==0.13.0 && "
        "pip install 'xxhash<4' zstd python-snappy cramjam brotli catalogue 'transformers<5'"
    ),
    "grain": "pip install grain==0.2.18",
    "olmo": (
        "pip install --no-deps ai2-olmo-core==3.0.0 && pip install bettermap cached-path "
        "dataclass-extensions filelock importlib_resources pandas pyyaml requests rich safetensors"
    ),
}
MODULES = {
    "megatron": "megatron.core",
    "litdata": "litdata",
    "mds": "streaming",
    "grain": "grain",
    "olmo": "olmo_core",
}
DISTRIBUTIONS = {
    "megatron": "megatron-core",
    "litdata": "litdata",
    "mds": "mosaicml-streaming",
    "grain": "grain",
    "olmo": "ai2-olmo-core",
}

Step = Callable[[], int]


@dataclass
class Corpus:
    """The synthetic documents (views of one flat uint16 array) and where they are written."""

    offsets: np.ndarray
    documents: list[np.ndarray]
    work: Path

    @property
    def num_tokens(self) -> int:
        return int(self.offsets[-1])

    @property
    def flat_path(self) -> Path:
        return self.work / "flat" / "tokens.bin"


@dataclass
class Tally:
    """Units done, wall seconds and CPU seconds, summed over the slices of a measurement."""

    units: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0

    def add(self, measured: tuple[int, float, float]) -> None:
        units, seconds, cpu_seconds = measured
        self.units += units
        self.seconds += seconds
        self.cpu_seconds += cpu_seconds

    def rates(self) -> tuple[float, float]:
        """Units per wall second and per CPU second."""
        return self.units / max(self.seconds, 1e-9), self.units / max(self.cpu_seconds, 1e-9)


@dataclass
class Method:
    """One measured thing; ``make()`` builds it and returns its step."""

    group: str  # "write", "read" or "rows"
    name: str
    what: str
    make: Callable[[], Step]
    kind: str = "peer"  # "floor", "mixle", "peer" or "reference"
    step: Step | None = None
    seconds: list[float] = field(default_factory=list)  # wall time per timed round
    cpu_seconds: list[float] = field(default_factory=list)  # this process's CPU time per round
    units: list[int] = field(default_factory=list)
    memory: tuple[float, float] | None = None
    # The floor's rates (wall, CPU) measured right before each of this method's rounds
    # (empty when the floor was not paired with it: writes, the floor itself).
    floor_rates: list[tuple[float, float]] = field(default_factory=list)

    def record(self, round_total: Tally) -> None:
        """Append one timed round's units, wall seconds and CPU seconds."""
        self.units.append(round_total.units)
        self.seconds.append(round_total.seconds)
        self.cpu_seconds.append(round_total.cpu_seconds)

    def rates(self, clock: str = "wall") -> list[float]:
        """Units per second in each timed round, by ``clock`` (``"wall"`` or ``"cpu"``)."""
        seconds = self.seconds if clock == "wall" else self.cpu_seconds
        return [u / max(s, 1e-9) for u, s in zip(self.units, seconds, strict=True)]

    def rate(self, clock: str = "wall") -> float:
        """Median units per second over the timed rounds, by ``clock``."""
        return statistics.median(self.rates(clock))

    def floor_rates_by(self, clock: str) -> list[float]:
        """The paired floor's rate before each round, by ``clock``."""
        return [pair[0 if clock == "wall" else 1] for pair in self.floor_rates]


def installed(peer: str) -> bool:
    """Whether ``peer`` imports here; prints the install line when it does not."""
    if importlib.util.find_spec(MODULES[peer]) is None:
        print(f"skipping {peer}: not installed; to compare, run: {INSTALL[peer]}")
        return False
    return True


def import_mds() -> Any:
    """Import ``streaming.base`` without running the package's ``__init__``.

    mosaicml-streaming's top-level ``__init__`` imports its vision datasets, hence
    torchvision, and the registry's torchvision wheels are CUDA builds that fail to load
    against the CPU torch. The text path measured here never touches them, so the
    package object is created bare and only ``streaming.base`` (the real MDS writer and
    dataset) is imported from it.
    """
    if "streaming" not in sys.modules:
        spec = importlib.util.find_spec("streaming")
        assert spec is not None and spec.submodule_search_locations is not None
        package = types.ModuleType("streaming")
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules["streaming"] = package
    import streaming.base

    return streaming.base


# -- building blocks ---------------------------------------------------------------------
def endless(make: Callable[[], Iterator[Any]]) -> Iterator[Any]:
    """Restart an epoch iterator whenever it ends (the timing never sees the end)."""
    while True:
        empty = True
        for item in make():
            empty = False
            yield item
        if empty:
            raise RuntimeError("an epoch yielded nothing: the corpus is too small for a batch")


def stepper(iterator: Iterator[Any], size: int) -> Step:
    def step() -> int:
        next(iterator)
        return size

    return step


def with_gather(backend: str, step: Step) -> Step:
    """``step`` run with packed-row gather ``backend`` (the previous one restored after
    each call: the methods are timed interleaved)."""

    def run() -> int:
        previous = set_gather_backend(backend)
        try:
            return step()
        finally:
            set_gather_backend(previous)

    return run


def reader(read: Callable[[int], Any], indices: list[int]) -> Step:
    cycle = itertools.cycle(indices)

    def step() -> int:
        read(next(cycle))
        return 1

    return step


def bandwidth_floor(path: Path, block: int, batch: int) -> Iterator[np.ndarray]:
    """The memory-bandwidth floor: each batch's bytes copied into one preallocated array.

    Sequential ``batch`` rows of ``block + 1`` tokens (overlapping by one token), cast to
    int64 by one strided copy into the same output array every batch: no allocation, no
    page faults on the output, the least any packed-row reader must do.
    """
    data = np.memmap(path, dtype=np.uint16, mode="r")
    span = block * batch
    rows = np.empty((batch, block + 1), dtype=np.int64)
    while True:
        for begin in range(0, data.shape[0] - span - 1, span):
            window = data[begin : begin + span + 1]
            np.copyto(
                rows,
                np.lib.stride_tricks.as_strided(
                    window, shape=(batch, block + 1), strides=(2 * block, 2)
                ),
            )
            yield rows


def row_slice_floor(path: Path, block: int, batch: int) -> Iterator[np.ndarray]:
    """Sequential per-row ``np.memmap`` slices into one preallocated int64 array."""
    data = np.memmap(path, dtype=np.uint16, mode="r")
    span = block * batch
    rows = np.empty((batch, block + 1), dtype=np.int64)
    while True:
        for begin in range(0, data.shape[0] - span - 1, span):
            for row in range(batch):
                start = begin + row * block
                rows[row] = data[start : start + block + 1]
            yield rows


def rows_from_documents(
    documents: Iterator[np.ndarray], block: int, batch: int
) -> Iterator[np.ndarray]:
    """What a user of a document-level reader writes: concatenate, cast, cut into rows."""
    need = batch * block + 1
    pending: list[np.ndarray] = []
    have = 0
    for document in documents:
        pending.append(document)
        have += document.shape[0]
        if have < need:
            continue
        stream = np.concatenate(pending).astype(np.int64)
        while stream.shape[0] >= need:
            yield np.lib.stride_tricks.as_strided(
                stream, shape=(batch, block + 1), strides=(8 * block, 8)
            ).copy()
            stream = stream[need - 1 :]
        pending, have = [stream], stream.shape[0]


# -- write ---------------------------------------------------------------------------------
def write_methods(corpus: Corpus, peers: set[str]) -> list[Method]:
    """concat+tofile (the floor), ``CorpusWriter`` and each peer's writer."""
    size, work = corpus.num_tokens, corpus.work
    corpus.flat_path.parent.mkdir(parents=True, exist_ok=True)

    joined = np.empty(size, dtype=np.uint16)  # preallocated: the floor reuses its buffer

    def baseline() -> int:
        np.concatenate(corpus.documents, out=joined).tofile(corpus.flat_path)
        return size

    def ours() -> int:
        with CorpusWriter(work / "mixle", vocab_size=VOCAB, overwrite=True, durable=False) as w:
            w.add_many(corpus.documents)
        return size

    methods = [
        Method(
            "write",
            "concat+tofile",
            "`np.concatenate(out=)` into a preallocated array + `tofile`",
            lambda: baseline,
            "floor",
        ),
        Method("write", "mixle CorpusWriter", "`add_many`, `durable=False`", lambda: ours, "mixle"),
    ]
    if "megatron" in peers:
        methods.append(_megatron_write(corpus))
    if "litdata" in peers:
        methods.append(_litdata_write(corpus))
    if "grain" in peers:
        from tools._grain_methods import grain_write

        methods.append(grain_write(corpus))
    if "mds" in peers:
        mds = import_mds()

        def mosaic() -> int:
            shutil.rmtree(work / "mds", ignore_errors=True)
            columns = {"tokens": "ndarray:uint16"}
            with mds.MDSWriter(out=str(work / "mds"), columns=columns, size_limit=1 << 26) as w:
                for document in corpus.documents:
                    w.write({"tokens": document})
            return size

        methods.append(
            Method("write", "MDS MDSWriter", "`MDSWriter.write` per document", lambda: mosaic)
        )
    return methods


def _megatron_write(corpus: Corpus) -> Method:
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    prefix = corpus.work / "megatron" / "corpus"
    prefix.parent.mkdir(exist_ok=True)

    def write() -> int:
        builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=np.uint16)
        for document in corpus.documents:
            builder.add_item(torch.from_numpy(document))
            builder.end_document()
        builder.finalize(f"{prefix}.idx")
        return corpus.num_tokens

    what = "`IndexedDatasetBuilder.add_item` + `end_document`"
    return Method("write", "Megatron IndexedDatasetBuilder", what, lambda: write)


_LITDATA_SOURCE: list[Corpus] = []  # read by the forked optimize worker


def _litdata_documents(group: tuple[int, int]) -> Iterator[torch.Tensor]:
    for index in range(*group):
        yield torch.from_numpy(_LITDATA_SOURCE[0].documents[index])


def _litdata_write(corpus: Corpus) -> Method:
    from litdata import TokensLoader, optimize

    count = len(corpus.documents)
    groups = [(i, min(i + 1000, count)) for i in range(0, count, 1000)]
    _LITDATA_SOURCE[:] = [corpus]

    def write() -> int:
        shutil.rmtree(corpus.work / "litdata", ignore_errors=True)
        optimize(
            fn=_litdata_documents,
            inputs=groups,
            output_dir=str(corpus.work / "litdata"),
            chunk_bytes="64MB",
            item_loader=TokensLoader(),
            num_workers=1,
            start_method="fork",  # the worker inherits the in-memory corpus
            verbose=False,
        )
        return corpus.num_tokens

    what = "`optimize(item_loader=TokensLoader())`, 1 worker process"
    return Method("write", "LitData optimize", what, lambda: write)


# -- random document read --------------------------------------------------------------------
def read_methods(corpus: Corpus, peers: set[str], indices: list[int]) -> list[Method]:
    """The floor (memmap + offsets in hand), ``open_corpus`` and each peer's reader."""
    offsets = corpus.offsets.tolist()

    def floor() -> Step:
        data = np.asarray(np.memmap(corpus.flat_path, dtype=np.uint16, mode="r"))
        return reader(lambda i: data[offsets[i] : offsets[i + 1]], indices)

    methods = [
        Method(
            "read",
            "floor: mapped ndarray slice",
            "a view of the mapped file (plain `ndarray`), offsets in hand",
            floor,
            "floor",
        ),
        Method(
            "read",
            "mixle open_corpus",
            "`open_corpus(path)[i]`",
            lambda: reader(open_corpus(corpus.work / "mixle").__getitem__, indices),
            "mixle",
        ),
    ]
    if "megatron" in peers:
        from megatron.core.datasets.indexed_dataset import IndexedDataset

        prefix = str(corpus.work / "megatron" / "corpus")
        methods.append(
            Method(
                "read",
                "Megatron IndexedDataset",
                "`IndexedDataset(prefix)[i]`",
                lambda: reader(IndexedDataset(prefix).__getitem__, indices),
            )
        )
    if "mds" in peers:

        def mosaic() -> Step:
            dataset = mds_dataset(corpus.work, shuffle=False)
            return reader(lambda i: dataset[i]["tokens"], indices)

        what = "`StreamingDataset(local=...)[i]`"
        methods.append(Method("read", "MDS StreamingDataset", what, mosaic))
    if "grain" in peers:
        from tools._grain_methods import grain_read

        methods.append(grain_read(corpus, indices))
    return methods


_MDS_OPEN: list[Any] = []


def mds_dataset(work: Path, *, shuffle: bool) -> Any:
    """A local MDS ``StreamingDataset`` over ``work/mds``; see :func:`close_mds`."""
    dataset = import_mds().StreamingDataset(
        local=str(work / "mds"), shuffle=shuffle, shuffle_seed=0, batch_size=8
    )
    _MDS_OPEN.append(dataset)
    return dataset


def close_mds() -> None:
    """Stop the MDS datasets' download threads before their directory is deleted.

    ``StreamingDataset`` has no public close; ``_iterator.exit()`` is what its own
    ``__iter__`` calls to end the previous epoch's threads.
    """
    for dataset in _MDS_OPEN:
        if hasattr(dataset, "_iterator"):
            dataset._iterator.exit()
    _MDS_OPEN.clear()


# -- packed rows and windows -------------------------------------------------------------------
def row_methods(corpus: Corpus, peers: set[str], block: int, batch: int) -> list[Method]:
    """Floors, mixle's packed rows and windows, nanoGPT's ``get_batch`` and each peer."""
    size = block * batch  # context tokens per batch

    def packed(backend: str = "numpy", **options: Any) -> Callable[[], Step]:
        def make() -> Step:
            view = StreamingCorpus(
                open_corpus(corpus.work / "mixle"),
                rank=0,
                world_size=1,
                block=block,
                batch_size=batch,
                **options,
            )
            return with_gather(backend, stepper(endless(lambda: view.epoch_batches(0)), size))

        return make

    def windows() -> Step:
        stream = TokenStream(open_corpus(corpus.work / "mixle"), block, batch, shuffle=True)
        return stepper(endless(stream.__iter__), size)

    shuffled = "packed rows, full document shuffle"
    methods = [
        Method(
            "rows",
            "floor: memory bandwidth",
            "each batch's bytes copied into one preallocated int64 array",
            lambda: stepper(bandwidth_floor(corpus.flat_path, block, batch), size),
            "floor",
        ),
        Method(
            "rows",
            "floor: row slices",
            "sequential `np.memmap` slice per row into a preallocated int64 array",
            lambda: stepper(row_slice_floor(corpus.flat_path, block, batch), size),
            "reference",
        ),
        Method("rows", "mixle StreamingCorpus", f"{shuffled}, per-rank", packed(), "mixle"),
        *(
            [
                Method(
                    "rows",
                    "mixle StreamingCorpus [fast]",
                    f"{shuffled}, per-rank, compiled gather (`mixle[fast]`, numba)",
                    packed("numba"),
                    "mixle",
                )
            ]
            if numba_available()
            else []
        ),
        Method(
            "rows",
            "mixle StreamingCorpus +ids",
            f"{shuffled}, per-rank, `document_ids=True`",
            packed(document_ids=True),
            "mixle",
        ),
    ]
    best_fit = "best-fit packed rows, global layout, `packing='best_fit'`"
    methods += [
        Method(
            "rows",
            "mixle StreamingCorpus best-fit",
            best_fit,
            packed(layout="global", packing="best_fit"),
            "mixle",
        ),
        Method(
            "rows",
            "mixle StreamingCorpus best-fit +ids",
            f"{best_fit}, `document_ids=True`",
            packed(layout="global", packing="best_fit", document_ids=True),
            "mixle",
        ),
        Method(
            "rows",
            "mixle StreamingCorpus global",
            f"{shuffled}, `layout='global'`",
            packed(layout="global"),
            "mixle",
        ),
        Method(
            "rows",
            "mixle StreamingCorpus global +ids",
            f"{shuffled}, `layout='global'`, `document_ids=True`",
            packed(layout="global", document_ids=True),
            "mixle",
        ),
    ]
    methods += [
        Method("rows", "mixle TokenStream", "random windows", windows, "mixle"),
        Method(
            "rows",
            "nanoGPT get_batch",
            "random windows, fresh `np.memmap` per batch",
            lambda: stepper(nanogpt_batches(str(corpus.flat_path), block, batch), size),
            "reference",
        ),
    ]
    if "megatron" in peers:
        methods += _megatron_rows(corpus, block, batch)
    if "litdata" in peers:
        methods.append(_litdata_rows(corpus, block, batch))
    if "mds" in peers:

        def mosaic() -> Step:
            dataset = mds_dataset(corpus.work, shuffle=True)
            texts = (sample["tokens"] for sample in endless(dataset.__iter__))
            return stepper(rows_from_documents(texts, block, batch), size)

        what = "shuffled documents, concatenated into rows"
        methods.append(Method("rows", "MDS StreamingDataset", what, mosaic))
    if "grain" in peers:
        from tools._grain_methods import grain_rows

        methods += grain_rows(corpus, block, batch)
    if "olmo" in peers:
        from tools._olmo_methods import olmo_rows

        methods += olmo_rows(corpus, block, batch)
    return methods


@dataclass
class SpecialTokens:
    """The special-token ids Megatron's ``GPTDataset`` reads from its tokenizer."""

    eod: int
    pad: int
    vocab_size: int

    @property
    def unique_identifiers(self) -> dict[str, int]:  # hashed into the dataset's cache key
        return {"eod": self.eod, "pad": self.pad, "vocab_size": self.vocab_size}


def _megatron_rows(corpus: Corpus, block: int, batch: int) -> list[Method]:
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from megatron.core.datasets.utils import Split

    size = block * batch
    prefix = str(corpus.work / "megatron" / "corpus")

    def concat() -> Step:
        indexed = IndexedDataset(prefix)
        order = np.random.default_rng(0).permutation(len(indexed)).tolist()
        documents = endless(lambda: (indexed[i] for i in order))
        return stepper(rows_from_documents(documents, block, batch), size)

    def gpt() -> Step:
        indexed = IndexedDataset(prefix)
        config = GPTDatasetConfig(
            random_seed=0,
            sequence_length=block,
            split="100,0,0",
            path_to_cache=str(corpus.work / "megatron" / "cache"),
            tokenizer=SpecialTokens(eod=0, pad=VOCAB, vocab_size=VOCAB),
            reset_position_ids=False,
            reset_attention_mask=False,
            eod_mask_loss=False,
            create_attention_mask=False,
        )
        everything = np.arange(len(indexed), dtype=np.int32)
        dataset = GPTDataset(indexed, prefix, everything, None, Split.train, config)
        samples = endless(lambda: iter(range(len(dataset))))  # the dataset shuffles

        def step() -> int:
            items = [dataset[next(samples)] for _ in range(batch)]
            for key in ("tokens", "labels", "loss_mask"):
                torch.stack([item[key] for item in items])
            return size

        return step

    return [
        Method(
            "rows",
            "Megatron IndexedDataset+concat",
            "shuffled documents, concatenated into rows",
            concat,
        ),
        Method("rows", "Megatron GPTDataset", "`GPTDataset[i]`, stacked", gpt),
    ]


def _litdata_rows(corpus: Corpus, block: int, batch: int) -> Method:
    from litdata import StreamingDataset, TokensLoader

    def make() -> Step:
        dataset = StreamingDataset(
            str(corpus.work / "litdata"),
            item_loader=TokensLoader(block_size=block + 1),
            shuffle=True,
            seed=0,
        )
        rows = endless(dataset.__iter__)

        def step() -> int:
            torch.stack([next(rows) for _ in range(batch)]).long()
            return block * batch

        return step

    return Method("rows", "LitData TokensLoader", "packed blocks, chunk-local shuffle", make)
