"""Rank program for tests/data/test_mesh.py: a (2, 2) ("dp", "tp") CPU mesh, 4 ranks."""

from __future__ import annotations

import json
import os

import numpy as np
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from mixle.data import StreamingCorpus, data_parallel_place
from tests._torchrun import rank_output_dir

mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
rank, world = data_parallel_place(mesh, "dp")
documents = [np.arange(1 + i, 5 + i, dtype=np.int64) for i in range(20)]
corpus = StreamingCorpus(documents, rank=rank, world_size=world, block=4, batch_size=2)
batches = [
    batch.as_tuple()[0].tolist() for _, batch in zip(range(2), corpus.batches(), strict=False)
]
(rank_output_dir() / "out.json").write_text(
    json.dumps({"place": [rank, world], "batches": batches})
)
dist.barrier()
dist.destroy_process_group()
os._exit(0)
