"""``mixle train CORPUS``: argparse over :class:`mixle.train.TrainConfig`, then :func:`train`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["register"]

_EXAMPLE = (
    "examples:\n"
    "  mixle train shards/sample --steps 300 --checkpoint-dir runs/a --plot runs/a/loss.png\n"
    "  mixle train shards/sample --steps 600 --checkpoint-dir runs/a --resume\n"
    "  mixle train --mixture mix.toml --steps 300 --checkpoint-dir runs/m --plot runs/m/loss.png\n"
    "  torchrun --nproc_per_node 2 -m mixle.cli train shards/sample --steps 300 "
    "--checkpoint-dir runs/b"
)


def register(subparsers: Any) -> None:
    """Add the ``train`` command."""
    p = subparsers.add_parser(
        "train",
        help="Train the streaming transformer on a corpus; crash-safe checkpoints, exact resume.",
        description=(
            "Train the mixle streaming transformer on a sharded corpus (local directory or "
            "URL), single-process or under torchrun (gloo on CPU, NCCL on CUDA). "
            "Checkpoints are atomic; --resume continues bitwise-exactly on CPU."
        ),
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "corpus", nargs="?", default=None, help="corpus directory (holding manifest.json) or URL"
    )
    data = p.add_argument_group("data")
    data.add_argument(
        "--mixture",
        default=None,
        metavar="MIX.toml",
        help="train on a weighted mixture of corpora (TOML or JSON file, see "
        "docs/mixtures.md) instead of CORPUS; needs --steps",
    )
    data.add_argument(
        "--objective",
        choices=("packed", "windows"),
        default="packed",
        help="packed: StreamingCorpus rows, dense masked loss (default); "
        "windows: TokenStream windows, next-token loss",
    )
    data.add_argument(
        "--layout",
        choices=("global", "per-rank"),
        default="global",
        help="'global' (default): global batches cut from one stream, so --resume works "
        "with another --nproc_per_node or --batch-size; 'per-rank': each rank's own share "
        "(resume with the same shape only)",
    )
    data.add_argument(
        "--packing",
        choices=("concatenate", "best_fit"),
        default="concatenate",
        help="concatenate (default): the order as one stream cut into rows (documents cut "
        "at row edges); best_fit: windows of the order packed by best-fit decreasing, only "
        "documents longer than a row are cut (packed objective, --layout global)",
    )
    data.add_argument(
        "--document-mask",
        action="store_true",
        help="attention stays inside each document of a packed row, positions restart "
        "at each document (packed objective)",
    )
    data.add_argument("--block", type=int, default=64, help="context length (default 64)")
    data.add_argument(
        "--batch-size", type=int, default=16, help="rows or windows per step per rank (16)"
    )
    data.add_argument("--boundary-id", type=int, default=None, help="token between documents")
    data.add_argument(
        "--holdout",
        type=int,
        default=0,
        metavar="N",
        help="hold out the last N documents for evaluation (default 0)",
    )
    data.add_argument("--vocab", type=int, default=None, help="vocabulary size (default: manifest)")
    model = p.add_argument_group("model and optimizer")
    model.add_argument("--d-model", type=int, default=128, help="width (default 128)")
    model.add_argument("--n-layer", type=int, default=4, help="blocks (default 4)")
    model.add_argument("--n-head", type=int, default=4, help="attention heads (default 4)")
    model.add_argument("--untied-head", action="store_true", help="separate output matrix")
    model.add_argument("--lr", type=float, default=3.0e-3, help="AdamW learning rate (3e-3)")
    model.add_argument("--seed", type=int, default=0, help="init, shuffle and RNG seed (0)")
    run = p.add_argument_group("run")
    run.add_argument("--steps", type=int, default=None, help="stop after this many steps")
    run.add_argument(
        "--epochs", type=int, default=None, help="stop at this epoch (default 1 without --steps)"
    )
    run.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    run.add_argument("--threads", type=int, default=None, help="torch CPU threads per process")
    run.add_argument("--eval-every", type=int, default=0, help="evaluate every N steps (0: off)")
    run.add_argument("--eval-batches", type=int, default=8, help="held-out batches per eval (8)")
    ckpt = p.add_argument_group("checkpoints and output")
    ckpt.add_argument("--checkpoint-dir", default=None, help="directory for checkpoints")
    ckpt.add_argument(
        "--checkpoint-every", type=int, default=0, help="checkpoint every N steps (0: at the end)"
    )
    ckpt.add_argument("--keep-last", type=int, default=3, help="checkpoints to keep (3)")
    ckpt.add_argument(
        "--resume", action="store_true", help="continue from the newest checkpoint, if any"
    )
    ckpt.add_argument(
        "--metrics", default=None, help="JSONL log (default CHECKPOINT_DIR/metrics.jsonl)"
    )
    ckpt.add_argument("--plot", default=None, help="write a loss-curve PNG here (mixle[plot])")
    ckpt.add_argument("--log-every", type=int, default=50, help="progress line every N steps")
    ckpt.add_argument(
        "--prefetch",
        type=int,
        default=2,
        help="batches read ahead of the step in a background thread (0: none; default 2)",
    )
    bar = ckpt.add_mutually_exclusive_group()
    bar.add_argument("--progress", dest="progress", action="store_true", default=None)
    bar.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        help="force the progress bar on/off (default: on when stderr is a terminal)",
    )
    p.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    """Build the config, train, print the summary; 2 on a usage or checkpoint error."""
    import signal

    from mixle.cli._errors import report
    from mixle.errors import MixleError
    from mixle.train import TrainConfig, train

    if (args.corpus is None) == (args.mixture is None):
        print(
            "mixle train: give either CORPUS or --mixture MIX.toml (exactly one).", file=sys.stderr
        )
        return 2
    try:
        config = TrainConfig(
            corpus=args.corpus or args.mixture,
            mixture=args.mixture,
            objective=args.objective,
            layout=args.layout,
            packing=args.packing,
            document_mask=args.document_mask,
            vocab=args.vocab,
            d_model=args.d_model,
            n_layer=args.n_layer,
            n_head=args.n_head,
            block=args.block,
            tie_head=not args.untied_head,
            batch_size=args.batch_size,
            lr=args.lr,
            steps=args.steps,
            epochs=args.epochs,
            seed=args.seed,
            boundary_id=args.boundary_id,
            holdout_documents=args.holdout,
            eval_every=args.eval_every,
            eval_batches=args.eval_batches,
            checkpoint_dir=args.checkpoint_dir,
            checkpoint_every=args.checkpoint_every,
            keep_last=args.keep_last,
            resume=args.resume,
            device=args.device,
            threads=args.threads,
            metrics=args.metrics,
            plot=args.plot,
            log_every=args.log_every,
            progress=args.progress,
            prefetch=args.prefetch,
        )
        summary = train(config, log=lambda line: print(line, flush=True), handle_signals=True)
    except MixleError as exc:
        return report("train", exc)
    if summary.stopped.startswith("signal "):
        # The shell convention for "terminated by signal N", after a clean checkpoint.
        return 128 + int(signal.Signals[summary.stopped.split()[1]])
    return 0
