"""``mixle show RUN_OR_CORPUS --step N``: the rows a ``mixle train`` run trained on at step N.

Flags: ``mixle show``'s own (:class:`~mixle.provenance.ShowOptions`) and, for a corpus
or mixture given on the command line, ``mixle train``'s stream flags (the data section
of :class:`~mixle.train.TrainConfig` and ``--seed``), built from their declarations.
Torch is never imported: the command reads checkpoint metadata and the corpus only.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from typing import Any

from mixle.cli._flags import add_section_flags, section_values
from mixle.cli._run_args import add_run_arguments, add_stream_flags, run_spec

__all__ = ["register"]

_DESCRIPTION = textwrap.fill(
    "Rebuild exactly the rows a `mixle train` run trained on at step N, without replaying "
    "the run: per rank and row, the documents it holds (source, corpus index, token range "
    "[start, end), length, targets trained), each document's origin (input file and "
    "line/row/record, from the corpus's origins sidecar) and id, and with --tokenizer the "
    "text. RUN_OR_CORPUS is a run's --checkpoint-dir (its newest checkpoint gives the "
    "corpus or mixture, the stream options and the world size), one step-NNNNNNNN "
    "checkpoint in it, or a corpus directory/URL with the stream options given here "
    "(mixle train's flags and defaults; --mixture MIX.toml instead of a corpus). Steps "
    "count as in metrics.jsonl: step 1 is the first batch; each rank's digest is the "
    "one metrics.jsonl records for that step.",
    88,
)
_EXAMPLE = (
    "examples:\n"
    "  mixle show runs/a --step 120                      # every rank's rows at step 120\n"
    "  mixle show runs/a --step 120 --rank 1 --tokenizer tokenizer.json --max-chars 80\n"
    "  mixle show runs/a --step 120 --json > step120.json\n"
    "  mixle show shards/sample --step 3 --block 128 --batch-size 8 --world-size 2 "
    "--tokenizer bytes\n"
    "  mixle show --mixture mix.toml --step 10 --block 64"
)


def register(subparsers: Any) -> None:
    """Add the ``show`` command: RUN_OR_CORPUS, show's flags, train's stream flags."""
    from mixle.provenance import ShowOptions

    parser = subparsers.add_parser(
        "show",
        help="Show the rows a mixle train run trained on at step N: documents, origins, text.",
        description=_DESCRIPTION,
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_arguments(parser)
    add_section_flags(parser.add_argument_group("show"), ShowOptions)
    add_stream_flags(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the step's rows (text or ``--json``); 2 on bad input, one line."""
    from mixle.cli._errors import echo, report
    from mixle.errors import MixleError
    from mixle.provenance import ShowOptions, load_decoder, render_step, show_step

    try:
        options = ShowOptions(**section_values(args, ShowOptions))
        if options.step is None:
            print("mixle show: error: --step N is required (1: the first step).", file=sys.stderr)
            return 2
        decoder = None if options.tokenizer is None else load_decoder(options.tokenizer)
        spec = run_spec(args, world_size=options.world_size)
        step = show_step(spec, options.step, rank=options.rank, decoder=decoder)
    except MixleError as exc:
        return report("show", exc)
    if options.json:
        print(json.dumps(step.to_dict(), ensure_ascii=False))
    else:
        echo(render_step(step, max_chars=options.max_chars))
    return 0
