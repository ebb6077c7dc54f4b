"""A real Lightning training job over ``mixle.lightning.StreamDataModule`` for the tests.

Run as ``python tests/lightning/lightning_job.py OUT [options]`` (one process) or under
``torchrun --nproc_per_node 2`` (Lightning's ``ddp`` on CPU, gloo). It trains a tiny
language model on the committed sample corpus (``shards/sample``, memory-mapped) for
``--steps`` optimizer steps, writes a checkpoint every ``--every`` steps into
``OUT/ckpt`` and appends each trained-on batch to ``OUT/rank-<r>.jsonl`` (one JSON line:
the step and the batch's context rows). ``--kill-at K`` makes rank 0 SIGKILL the whole
job (its process group) when step ``K`` starts; ``--resume PATH`` resumes from a
checkpoint. When training starts, rank 0 writes the class names of the loader Lightning
iterates (and of its bases) to ``OUT/loader.txt``. A ``StateMismatchError`` at resume is written to ``OUT/error.txt`` (exit 3).
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint

from mixle.errors import StateMismatchError
from mixle.lightning import StreamDataModule
from tests._framework_jobs import VOCAB, job_arguments, kill_job, log_batch, sample_corpus


class TinyLM(pl.LightningModule):
    """Embedding + linear head; logs each batch it trains on, optionally dies at a step."""

    def __init__(self, log: Path, kill_at: int | None) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 16)
        self.head = torch.nn.Linear(16, VOCAB)
        self.log_path, self.kill_at = log, kill_at

    def on_train_start(self) -> None:
        if self.global_rank == 0:
            loader = self.trainer.train_dataloader
            names = [cls.__name__ for cls in type(loader).__mro__]
            (self.log_path.parent / "loader.txt").write_text(" ".join(names))

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        context, targets, loss_mask = batch[:3]
        if self.kill_at is not None and self.global_step == self.kill_at and self.global_rank == 0:
            kill_job()
        log_batch(self.log_path, self.global_step, context.tolist())
        logits = self.head(self.embed(context))
        losses = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
        mask = loss_mask.flatten().float()
        return (losses * mask).sum() / mask.sum().clamp(min=1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main() -> int:
    parser = job_arguments(__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--resume", default=None)
    args = parser.parse_args()

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    corpus = sample_corpus(
        rank, world, global_batch=args.global_batch, seed=args.seed, layout=args.layout
    )
    pl.seed_everything(0, verbose=False)
    model = TinyLM(args.out / f"rank-{rank}.jsonl", args.kill_at)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=world,
        strategy="ddp" if world > 1 else "auto",
        max_steps=args.steps,
        callbacks=[
            ModelCheckpoint(
                dirpath=args.out / "ckpt",
                filename="{step}",
                every_n_train_steps=args.every,
                save_top_k=-1,
            )
        ],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    # Lightning's advice to use more workers or a sampler does not apply to this job.
    warnings.filterwarnings("ignore", category=UserWarning, module="lightning")
    try:
        trainer.fit(
            model,
            datamodule=StreamDataModule(corpus, num_workers=args.workers),
            ckpt_path=args.resume,
        )
    except StateMismatchError as error:
        (args.out / "error.txt").write_text(str(error))
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
