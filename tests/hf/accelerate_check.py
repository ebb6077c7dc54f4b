"""Run under ``torchrun --nproc_per_node 2``: real ``accelerate.Accelerator`` on CPU/gloo.

Every process prepares a DataLoader over the same :class:`GlobalRowDataset` in each of
the four accelerate modes (``dispatch_batches`` x ``split_batches``) and writes the
batches it receives to ``<mode>.npz`` in its output folder
(:func:`tests._torchrun.rank_output_dir`). Driven by
``test_accelerate_launch.py``, which compares them with the global layout's rank batches.
"""

from __future__ import annotations

import sys

import numpy as np
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration
from torch.utils.data import DataLoader

from mixle.hf import GlobalRowDataset
from tests._torchrun import rank_output_dir
from tests.hf.corpus import BATCH_SIZE, global_corpus


def main() -> int:
    dataset = GlobalRowDataset(global_corpus(rank=0), num_epochs=1)
    for dispatch in (True, False):
        for split in (False, True):
            config = DataLoaderConfiguration(dispatch_batches=dispatch, split_batches=split)
            accelerator = Accelerator(cpu=True, dataloader_config=config)
            world = accelerator.num_processes
            size = BATCH_SIZE * world if split else BATCH_SIZE
            loader = accelerator.prepare(DataLoader(dataset, batch_size=size))
            batches = list(loader)
            arrays = {
                f"{name}-{step}": value.numpy()
                for step, batch in enumerate(batches)
                for name, value in batch.items()
            }
            mode = f"dispatch{int(dispatch)}-split{int(split)}"
            np.savez(rank_output_dir() / f"{mode}.npz", steps=len(batches), **arrays)
            accelerator.wait_for_everyone()
            accelerator.free_memory()
    return 0


if __name__ == "__main__":
    sys.exit(main())
