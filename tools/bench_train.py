"""Benchmark ``mixle train``: the README main job, and the trainer's overhead.

1. The README job: train a small model on the sample corpus for ``--steps`` steps on the
   CPU, stopping at ``--resume-at`` and resuming from the checkpoint, with a held-out
   evaluation and a loss plot. Reports tokens/s, the train and held-out loss reached, and
   wall time (in-process, so without the ~2-5 s interpreter/torch start-up per launch).
2. Overhead: the trainer (``mixle.train.train``, no checkpoints) against a plain PyTorch
   loop over the same model (``CausalTransformerLM``, same seed), AdamW, and the same
   ``StreamingCorpus`` batches with the same masked mean loss. The two alternate in the
   same run (``--repeats`` times); medians and the ratio are reported.

Usage: ``python -m tools.bench_train [--corpus shards/sample] [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from mixle.corpus import CorpusWriter, open_corpus
from mixle.data.streaming_corpus import StreamingCorpus
from mixle.models import CausalTransformerLM
from mixle.train import TrainConfig, train
from tools._memory import peak_rss_mb, rss_anon_mb


def _fallback_corpus(directory: str) -> str:
    """Byte-level text of this repository's Python files, when no sample corpus is given."""
    path = os.path.join(directory, "corpus")
    root = Path(__file__).resolve().parents[1]
    with CorpusWriter(path, vocab_size=256) as writer:
        for file in sorted(root.glob("mixle/**/*.py")):
            writer.add(np.frombuffer(file.read_bytes(), dtype=np.uint8).astype(np.int64))
    return path


def _plain_loop(corpus: str, config: TrainConfig, steps: int) -> float:
    """Tokens/s of a plain PyTorch loop with the trainer's model, optimizer and batches."""
    documents = open_corpus(corpus)
    train_docs = documents[: len(documents) - config.holdout_documents]
    stream = StreamingCorpus(
        train_docs,
        rank=0,
        world_size=1,
        block=config.block,
        batch_size=config.batch_size,
        seed=config.seed,
    )
    model = CausalTransformerLM(
        256,
        d_model=config.d_model,
        n_layer=config.n_layer,
        n_head=config.n_head,
        block=config.block,
        seed=config.seed,
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)
    tokens = 0
    started = time.perf_counter()
    for (context, targets, mask), _ in zip(stream, range(steps), strict=False):
        ids = torch.from_numpy(context)
        logits = model(ids)
        nll = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]),
            torch.from_numpy(np.where(mask, targets, 0)).reshape(-1),
            reduction="none",
        )
        weights = torch.from_numpy(mask.reshape(-1)).float()
        loss = (nll * weights).sum() / weights.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        tokens += int(mask.sum())
    return tokens / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="shards/sample", help="corpus directory")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--resume-at", type=int, default=150)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--n-layer", type=int, default=2)
    parser.add_argument("--block", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--overhead-steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="tiny smoke run")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.resume_at, args.overhead_steps, args.repeats = 20, 10, 10, 1
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="mixle-bench-train-") as tmp:
        corpus = args.corpus if os.path.isdir(args.corpus) else _fallback_corpus(tmp)
        run = os.path.join(tmp, "run")
        base: dict[str, Any] = {
            "corpus": corpus,
            "d_model": args.d_model,
            "n_layer": args.n_layer,
            "block": args.block,
            "batch_size": args.batch_size,
            "threads": args.threads,
            "holdout_documents": 16,
            "eval_every": max(1, args.steps // 6),
            "log_every": 0,
            "progress": False,
        }

        def quiet(line: str) -> None:
            del line

        print(f"README job on {corpus}: {args.steps} steps, resumed once at {args.resume_at}")
        began = time.perf_counter()
        first = train(TrainConfig(**base, steps=args.resume_at, checkpoint_dir=run), log=quiet)
        second = train(
            TrainConfig(
                **base,
                steps=args.steps,
                checkpoint_dir=run,
                resume=True,
                plot=os.path.join(tmp, "loss.png"),
            ),
            log=quiet,
        )
        wall = time.perf_counter() - began
        tokens = first.tokens + second.tokens
        print(
            f"  tokens/s: {first.tokens_per_second:,.0f} (first run), "
            f"{second.tokens_per_second:,.0f} (resumed run); {tokens:,} tokens in {wall:.1f} s "
            "in-process"
        )
        print(
            f"  train loss {second.first_loss:.3f} -> {second.final_loss:.3f} nats/token, "
            f"held-out {second.eval_loss:.3f} (uniform over bytes: {np.log(256):.3f})"
        )
        overhead_config = TrainConfig(**{**base, "eval_every": 0}, steps=args.overhead_steps)
        ours, plain = [], []
        for _ in range(args.repeats):
            ours.append(train(overhead_config, log=quiet).tokens_per_second)
            plain.append(_plain_loop(corpus, overhead_config, args.overhead_steps))
        ratio = statistics.median(ours) / statistics.median(plain)
        print(
            f"trainer vs plain PyTorch loop ({args.overhead_steps} steps x {args.repeats}, "
            f"medians): {statistics.median(ours):,.0f} vs {statistics.median(plain):,.0f} "
            f"tokens/s = {ratio:.2f}x"
        )
        print(f"peak RSS {peak_rss_mb():.0f} MB, RssAnon now {rss_anon_mb():.0f} MB")


if __name__ == "__main__":
    main()
