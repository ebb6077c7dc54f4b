"""Rank program for tests/data/test_dcp.py, run under torchrun (gloo, CPU).

``dcp_job.py LAYOUT LOAD_DIR SAVE_DIR SKIP STEPS``: build a tiny corpus view for this
rank (global batch 4 rows), load ``LOAD_DIR`` with ``dcp.load`` unless it is ``-``,
read ``SKIP`` batches, ``dcp.save`` to ``SAVE_DIR`` unless ``-``, then read ``STEPS``
batches and write their contexts (or the load error) to ``batches.json``.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from mixle.data import DcpLoaderState, StreamingCorpus
from mixle.data.torch import StreamingDataset
from mixle.errors import StateMismatchError
from tests._torchrun import rank_output_dir

layout, load_dir, save_dir, skip, steps = sys.argv[1:6]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
documents = [np.arange(1 + i, 1 + i + 3 + (i * 7) % 11, dtype=np.int64) for i in range(40)]
corpus = StreamingCorpus(
    documents, rank=rank, world_size=world, block=6, batch_size=4 // world, seed=3, layout=layout
)
dataset = StreamingDataset(corpus)
state = {"loader": DcpLoaderState(dataset)}
result: dict[str, object] = {}
try:
    if load_dir != "-":
        dcp.load(state, checkpoint_id=load_dir)
    batches = iter(dataset)
    for _ in range(int(skip)):
        next(batches)
    if save_dir != "-":
        dcp.save(state, checkpoint_id=save_dir)
    result["batches"] = [next(batches)[0].tolist() for _ in range(int(steps))]
except StateMismatchError as error:
    result["error"] = str(error)
(rank_output_dir() / "batches.json").write_text(json.dumps(result))
dist.barrier()
dist.destroy_process_group()
os._exit(0)
