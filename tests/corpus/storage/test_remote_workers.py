"""DataLoader workers over remote corpora with both start methods.

fsspec's async filesystems are not fork-safe: the reader is used in the parent first
(so the parent owns a live filesystem and event loop), then handed to forked or
spawned workers, which must build their own lazily and read the same documents.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from mixle.corpus import ShardedDocuments, open_corpus
from tests.corpus._remote_fixtures import *  # noqa: F403
from tests.corpus._remote_fixtures import OPENERS, Published
from tests.corpus._servers import CorpusHTTPServer


class _Documents(Dataset[torch.Tensor]):
    def __init__(self, documents: ShardedDocuments) -> None:
        self.documents = documents

    def __len__(self) -> int:
        return len(self.documents)

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.from_numpy(self.documents[index].astype(np.int64))

    def __getitems__(self, indices: list[int]) -> list[torch.Tensor]:
        # Batched reads: one coalesced request set per batch in range mode.
        return [torch.from_numpy(doc.astype(np.int64)) for doc in self.documents.take(indices)]


def _as_list(batch: list[torch.Tensor]) -> list[torch.Tensor]:
    return batch


@pytest.mark.parametrize(
    ("backend", "start_method"),
    [
        ("s3-cache", "fork"),
        ("s3-cache", "spawn"),
        ("s3-range", "fork"),
        pytest.param("s3-range", "spawn", marks=pytest.mark.slow),  # ~20 s: torch import x2
        ("zarr-s3", "fork"),
    ],
)
def test_dataloader_workers_read_the_same_documents(
    backend: str,
    start_method: str,
    published: Published,
    http_corpus: CorpusHTTPServer,
    sample_corpus: Path,
    tmp_path: Path,
) -> None:
    documents = OPENERS[backend](published, http_corpus, tmp_path / "cache")
    assert documents[0] is not None  # the parent now holds a live filesystem
    loader: DataLoader[Any] = DataLoader(
        _Documents(documents),
        batch_size=64,
        num_workers=2,
        multiprocessing_context=start_method,
        collate_fn=_as_list,
    )
    got = [tensor.numpy() for batch in loader for tensor in batch]
    reference = open_corpus(sample_corpus)
    assert len(got) == len(reference)
    for index, array in enumerate(got):
        np.testing.assert_array_equal(array, reference[index], err_msg=f"document {index}")
    # The parent still works after its workers are gone.
    np.testing.assert_array_equal(documents[len(documents) - 1], reference[len(reference) - 1])
