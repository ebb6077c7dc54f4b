"""A real OLMo-core training job over ``mixle.olmo.OlmoDataLoader`` for the tests.

Run as ``python tests/olmo/olmo_job.py OUT [options]`` (one process) or under
``torchrun --nproc_per_node 2`` (gloo, CPU). OLMo-core's ``Trainer`` trains a tiny
language model (wrapped in DDP) with its ``BasicTrainModule`` on the committed sample
corpus (``shards/sample``, memory-mapped) for ``--steps`` steps, its
``CheckpointerCallback`` saving every ``--every`` steps into ``OUT/save``; each batch
trained on is appended to ``OUT/rank-<r>.jsonl`` (the step and its ``input_ids`` rows).
``--kill-at K`` makes rank 0 SIGKILL its process group when step ``K`` starts. A rerun
with the same ``OUT`` resumes from the latest checkpoint there (OLMo-core's default
``load_strategy``); ``--load PATH`` resumes from another job's checkpoint instead; ``--workers N`` reads
the batches in ``N`` worker processes. A
``StateMismatchError`` at resume is written to ``OUT/error.txt`` (exit 3).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from olmo_core.train import Duration, TrainerConfig
from olmo_core.train.callbacks import CheckpointerCallback
from olmo_core.train.train_module import BasicTrainModule

from mixle.errors import StateMismatchError
from mixle.olmo import OlmoDataLoader
from tests._framework_jobs import (
    BLOCK,
    VOCAB,
    job_arguments,
    kill_job,
    log_batch,
    sample_corpus,
)


class TinyLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 16)
        self.head = torch.nn.Linear(16, VOCAB)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(input_ids))


class LoggingTrainModule(BasicTrainModule):
    """OLMo-core's basic train module; logs each batch it trains on, may die at a step."""

    def __init__(self, log: Path, kill_at: int | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.log_path, self.kill_at = log, kill_at

    def train_batch(self, batch: dict[str, Any], dry_run: bool = False) -> None:
        step = self.trainer.global_step
        if not dry_run:
            if self.kill_at is not None and step == self.kill_at and dist.get_rank() == 0:
                kill_job()
            log_batch(self.log_path, step, batch["input_ids"].tolist())
        super().train_batch(batch, dry_run)

    def global_num_flops_in_batch(self, batch: dict[str, Any]) -> int | None:
        return None  # no throughput metrics for this model


def main() -> int:
    parser = job_arguments(__doc__.splitlines()[0])
    parser.add_argument("--load", default=None)
    parser.add_argument("--workers", type=int, default=0, help="OlmoDataLoader num_workers")
    args = parser.parse_args()

    if "RANK" not in os.environ:  # one process without a launcher: a group of one
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29517")
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    corpus = sample_corpus(
        rank, world, global_batch=args.global_batch, seed=args.seed, layout=args.layout
    )
    loader = OlmoDataLoader(corpus, work_dir=args.out / "work", num_workers=args.workers)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(TinyLM())
    train_module = LoggingTrainModule(
        args.out / f"rank-{rank}.jsonl",
        args.kill_at,
        model=model,
        optim=torch.optim.SGD(model.parameters(), lr=0.1),
        rank_microbatch_size=corpus.batch_size * BLOCK,
    )
    trainer = TrainerConfig(
        save_folder=str(args.out / "save"),
        work_dir=str(args.out / "work"),
        load_path=args.load,
        device="cpu",
        save_overwrite=True,
        max_duration=Duration.steps(args.steps),
        metrics_collect_interval=1,
        cancel_check_interval=1,
        callbacks={
            "checkpointer": CheckpointerCallback(
                save_interval=args.every, ephemeral_save_interval=None, save_async=False
            )
        },
    ).build(train_module, loader)
    try:
        trainer.fit()
    except StateMismatchError as error:
        (args.out / "error.txt").write_text(str(error))
        return 3
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
