"""Run under ``torchrun --nproc_per_node N``: every rank streams the packed and the windows
form of :func:`tests.data.mixture_case.build` in the global layout and writes what it got.

``python torchrun_mixture_check.py OUT BATCH_SIZE STEPS SAVE_AT [RESUME_DIR]``: rank ``r``
builds the mixture with its rank, the world size of the job and ``BATCH_SIZE``, loads
``RESUME_DIR/<objective>-state-rank0.json`` when given, takes ``STEPS`` batches and writes
``OUT/<objective>-rank<r>.npz`` (every array of every step), its state after step
``SAVE_AT`` and its accounting at the end (``OUT/<objective>-rank<r>.json``), both also
all-gathered so that every rank checks they are the same everywhere. Driven by
``test_mixture_torchrun.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch.distributed as dist

from tests.data.mixture_case import OBJECTIVES, build


def main(out: str, batch_size: int, steps: int, save_at: int, resume: str | None) -> int:
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for objective in OBJECTIVES:
        mixture = build(objective, rank=rank, world_size=world_size, batch_size=batch_size)
        if resume is not None:
            state = json.loads((Path(resume) / f"{objective}-state-rank0.json").read_text())
            mixture.load_state_dict(state)
        arrays: dict[str, np.ndarray] = {}
        saved = None
        stream = iter(mixture)
        for step in range(steps):
            for index, array in enumerate(next(stream)):
                arrays[f"{index}-{step}"] = array
            if step + 1 == save_at:
                saved = mixture.state_dict()
        accounts = [
            [a.name, a.rows, a.real_tokens, a.epochs_started]
            for a in mixture.accounting(mixture.cursor[1])
        ]
        report = {"rank": rank, "world_size": world_size, "state": saved, "accounting": accounts}
        everyone: list[object] = [None] * world_size
        dist.all_gather_object(everyone, {"state": saved, "accounting": accounts})
        report["same_everywhere"] = all(other == everyone[0] for other in everyone)
        np.savez(Path(out) / f"{objective}-rank{rank}.npz", **arrays)
        (Path(out) / f"{objective}-rank{rank}.json").write_text(json.dumps(report))
        if saved is not None:
            (Path(out) / f"{objective}-state-rank{rank}.json").write_text(json.dumps(saved))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    arguments = sys.argv[1:]
    raise SystemExit(
        main(
            arguments[0],
            int(arguments[1]),
            int(arguments[2]),
            int(arguments[3]),
            arguments[4] if len(arguments) > 4 else None,
        )
    )
