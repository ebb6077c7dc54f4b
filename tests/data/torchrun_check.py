"""Run under ``torchrun --nproc_per_node N``: each rank iterates epoch 0 of a
``StreamingCorpus.for_current_rank`` view and writes what it saw to ``result.json`` in
its output folder (:func:`tests._torchrun.rank_output_dir`). Driven by
``test_torchrun.py``."""

from __future__ import annotations

import json

import numpy as np
import torch.distributed as dist

from mixle.data.streaming_corpus import StreamingCorpus
from mixle.data.torch import StreamingDataset, StreamLoader
from tests._torchrun import rank_output_dir


def main() -> int:
    dist.init_process_group("gloo")
    rng = np.random.default_rng(1)
    documents = [rng.integers(0, 1000, size=int(n)) for n in rng.integers(1, 200, size=301)]
    corpus = StreamingCorpus.for_current_rank(
        documents, block=32, batch_size=4, seed=11, boundary_id=-1, document_ids=True
    )
    batches = 0
    seen: set[int] = set()
    for _, _, _, document_ids, _ in corpus.epoch_batches(0):
        batches += 1
        seen.update(document_ids[document_ids >= 0].tolist())
    # issue #31: the same batches through StreamLoader's workers (groups of 3, mid-group end)
    loader = StreamLoader(StreamingDataset(corpus, num_epochs=1), num_workers=2, batches_per_item=3)
    through_loader = [[part.numpy().tobytes() for part in batch] for batch in loader]
    direct = [[part.tobytes() for part in batch] for batch in corpus.epoch_batches(0)]
    result = {
        "rank": corpus.rank,
        "world_size": corpus.world_size,
        "indices": corpus.rank_document_indices(0).tolist(),
        "batches": batches,
        "num_batches": corpus.num_batches(0),
        "seen": sorted(seen),
        "num_documents": len(documents),
        "loader_matches": through_loader == direct,
        "loader_batches": len(through_loader),
    }
    (rank_output_dir() / "result.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
