"""``mixle train CORPUS``: flags built from the fields of :class:`mixle.train.TrainConfig`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mixle.cli._flags import add_option_flags, option_values

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
    """Add the ``train`` command: CORPUS, then one flag per field of :class:`TrainConfig`."""
    from mixle.train import TrainConfig

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
    add_option_flags(p, TrainConfig)
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
            **{**option_values(args, TrainConfig), "corpus": args.corpus or args.mixture}
        )
        summary = train(config, log=lambda line: print(line, flush=True), handle_signals=True)
    except MixleError as exc:
        return report("train", exc)
    if summary.stopped.startswith("signal "):
        # The shell convention for "terminated by signal N", after a clean checkpoint.
        return 128 + int(signal.Signals[summary.stopped.split()[1]])
    return 0
