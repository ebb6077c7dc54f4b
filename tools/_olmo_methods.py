"""OLMo-core's methods for ``tools/bench_peers.py``: its numpy datasets over memmapped tokens.

OLMo-core reads flat token files (what the Dolma toolkit writes: raw uint16 ids, an EOS
after every document); :func:`write_olmo_tokens` writes that file untimed — there is no
OLMo-core writer API to time. Rows go through its own data loader
(``NumpyFSLDataLoader``: shuffled global instance indices saved under its work
directory, ``DataCollator`` stacking), over ``NumpyFSLDataset`` (concatenate and chunk
into ``block + 1``-token instances) and ``NumpyPackedFSLDataset`` (optimized best-fit
decreasing into padded instances; OLMo-core requires a power-of-two length, so its rows
are ``block`` tokens and count ``block - 1`` context tokens each). The instances are
read synchronously (``num_threads=0``), as Grain's are: the loader's in-process default
(4 reader threads) cost 1.3-2x the CPU time per batch on this 2-core machine and moved
with the load (per-round ratios 0.009-0.020 against 0.022-0.027 synchronous, FSL; six
paired rounds, load ~4).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from tools._peer_methods import VOCAB, Corpus, Method, Step, endless, stepper

__all__ = ["EOS", "olmo_dataset", "olmo_loader", "olmo_rows", "write_olmo_tokens"]

EOS = VOCAB  # one past the ids drawn, so it never collides with a document token


def olmo_path(work: Path) -> Path:
    return work / "olmo" / "tokens.npy"


def write_olmo_tokens(documents: list[np.ndarray], work: Path) -> Path:
    """The documents, each followed by :data:`EOS`, as one flat uint16 file."""
    path = olmo_path(work)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        eos = np.array([EOS], dtype=np.uint16)
        for document in documents:
            out.write(document.tobytes())
            out.write(eos.tobytes())
    return path


def olmo_dataset(work: Path, length: int, *, packed: bool) -> Any:
    """A prepared ``NumpyFSLDataset`` (or ``NumpyPackedFSLDataset``) of ``length`` tokens."""
    from olmo_core.data import NumpyFSLDataset, NumpyPackedFSLDataset

    kind = NumpyPackedFSLDataset if packed else NumpyFSLDataset
    dataset = kind(
        olmo_path(work),
        sequence_length=length,
        pad_token_id=EOS,
        eos_token_id=EOS,
        vocab_size=VOCAB + 1,
    )
    dataset.work_dir = work / "olmo" / ("packed" if packed else "fsl")
    dataset.prepare()
    return dataset


def olmo_loader(dataset: Any, work: Path, batch: int) -> Any:
    """OLMo-core's ``NumpyFSLDataLoader`` of ``batch`` instances a batch, in-process,
    reading its instances synchronously."""
    from olmo_core.data import DataCollator, NumpyFSLDataLoader

    return NumpyFSLDataLoader(
        dataset,
        collator=DataCollator(pad_token_id=EOS),
        global_batch_size=batch * dataset.sequence_length,
        work_dir=work / "olmo" / "loader",
        seed=0,
        num_workers=0,
        num_threads=0,  # synchronous reads (module notes)
    )


def _epochs(loader: Any) -> Iterator[Any]:
    """One epoch of ``loader`` after another, each reshuffled as its trainer does."""
    loader.reshuffle()
    yield from loader
    loader.reset()


def olmo_rows(corpus: Corpus, block: int, batch: int) -> list[Method]:
    """Concatenate-and-chunk and best-fit rows through OLMo-core's data loader."""

    def make(length: int, packed: bool) -> Step:
        loader = olmo_loader(olmo_dataset(corpus.work, length, packed=packed), corpus.work, batch)
        return stepper(endless(lambda: _epochs(loader)), (length - 1) * batch)

    return [
        Method(
            "rows",
            "OLMo-core NumpyFSLDataset",
            "shuffled instances of the concatenated tokens, `NumpyFSLDataLoader`",
            lambda: make(block + 1, packed=False),
        ),
        Method(
            "rows",
            "OLMo-core NumpyPackedFSLDataset",
            f"best-fit (OBFD) rows of {block}, `NumpyFSLDataLoader`",
            lambda: make(block, packed=True),
        ),
    ]
