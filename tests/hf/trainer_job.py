"""One ``transformers.Trainer`` run over a :class:`GlobalRowDataset`, for test_trainer_resume.

Run directly (one process) or under ``torchrun`` (gloo, CPU)::

    python tests/hf/trainer_job.py OUTPUT [--kill-at STEP] [--resume]

A tiny Llama built from a config (no download) trains for :data:`MAX_STEPS` steps,
:data:`ACCUMULATION` micro-batches each, saving a checkpoint every :data:`SAVE_STEPS`
steps under ``OUTPUT/run``. Each micro-batch's ``input_ids`` and labels are appended
as one JSON line ``{"step", "input_ids", "labels"}`` to ``OUTPUT/seen-<rank>.jsonl``
as the model sees them. ``--kill-at STEP`` SIGKILLs every process at the end of that
step; ``--resume`` resumes from the latest checkpoint; ``--stop-and-resume`` runs a
first ``Trainer`` to the checkpoint and resumes it in a second one, in one launch.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments

from mixle.hf import GlobalRowDataset
from mixle.hf.trainer import TRAINER_SETTINGS, LoaderStateCallback, causal_lm_collate
from tests.hf.corpus import BATCH_SIZE, BLOCK, global_corpus

MAX_STEPS = 8
SAVE_STEPS = 3
ACCUMULATION = 2


class KillAt(TrainerCallback):
    """SIGKILL this process at the end of step ``step`` (no clean-up, as a crash)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def tiny_model() -> LlamaForCausalLM:
    """A one-layer Llama over the test corpus's ids, built from a config (seeded, no download)."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=1000,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=BLOCK,
    )
    return LlamaForCausalLM(config)


def run(output: Path, max_steps: int, callbacks: list[Any], resume: bool) -> None:
    """Train a fresh tiny Llama over a fresh dataset for ``max_steps`` steps, recording."""
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    model = tiny_model()
    rows = GlobalRowDataset(global_corpus(rank=0, world_size=world))
    args = TrainingArguments(
        output_dir=str(output / "run"),
        per_device_train_batch_size=BATCH_SIZE,
        gradient_accumulation_steps=ACCUMULATION,
        max_steps=max_steps,
        save_strategy="steps",
        save_steps=SAVE_STEPS,
        logging_steps=MAX_STEPS,
        report_to=[],
        use_cpu=True,
        ddp_backend="gloo" if world > 1 else None,
        disable_tqdm=True,
        seed=0,
        **TRAINER_SETTINGS,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=rows,
        data_collator=causal_lm_collate,
        callbacks=[LoaderStateCallback(), *callbacks],
    )
    seen = output / f"seen-{rank}.jsonl"

    def record(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        line = {
            "step": trainer.state.global_step + 1,
            "input_ids": kwargs["input_ids"].tolist(),
            "labels": kwargs["labels"].tolist(),
        }
        with seen.open("a") as file:  # one write per line: whole before any SIGKILL
            file.write(json.dumps(line) + "\n")

    model.register_forward_pre_hook(record, with_kwargs=True)
    trainer.train(resume_from_checkpoint=True if resume else None)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("output", type=Path)
    parser.add_argument("--kill-at", type=int)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument(
        "--stop-and-resume",
        action="store_true",
        help="end a first Trainer at the checkpoint, then resume in a second one (one launch)",
    )
    options = parser.parse_args()
    if options.stop_and_resume:
        run(options.output, SAVE_STEPS, [], resume=False)
        run(options.output, MAX_STEPS, [], resume=True)
        return 0
    killer = [] if options.kill_at is None else [KillAt(options.kill_at)]
    run(options.output, MAX_STEPS, killer, resume=options.resume)
    return 0


if __name__ == "__main__":
    sys.exit(main())
