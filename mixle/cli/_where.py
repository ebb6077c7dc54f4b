"""``mixle where RUN_OR_CORPUS DOCUMENT``: every step, rank and row that trained on a document.

Flags: ``mixle where``'s own (:class:`~mixle.provenance.WhereOptions`), ``mixle show``'s
``--world-size`` and, for a corpus or mixture given on the command line, ``mixle
train``'s stream flags (the data section of :class:`~mixle.train.TrainConfig` and
``--seed``), built from their declarations. Torch is never imported.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from mixle.cli._flags import add_section_flags, section_values
from mixle.cli._run_args import add_run_arguments, add_stream_flags, run_spec

__all__ = ["register"]

_WORLD = ("world_size",)
_DESCRIPTION = (
    "List every (epoch, step, rank, row) in which a `mixle train` run trained on one "
    "document (any of its tokens a target), with the document's tokens [start, stop) "
    "each row trains, by inverting the run's plan: with the blocks order (the global "
    "layout's default) no epoch is passed over; the permutation order (and every "
    "per-rank stream) costs one pass over each epoch's order, which the output says. "
    "DOCUMENT is a document index (no document is read), an origin PATH:RECORD (the "
    "input file as the origins sidecar records it, or its last path components, and the "
    "0-based line/row/record, as `mixle show` prints it) or an id (--id-field at "
    "ingest); an origin or id is looked up by one scan of the origins sidecar "
    "(O(documents) for an id). RUN_OR_CORPUS is a run's --checkpoint-dir (its newest "
    "checkpoint gives the stream and the world size; only steps up to the run's last are "
    "listed), one step-NNNNNNNN checkpoint in it, or a corpus directory/URL with the "
    "stream options given here (mixle train's flags and defaults; --mixture MIX.toml "
    "instead of a corpus, with --source NAME for a document index). Steps count as in "
    "metrics.jsonl: step 1 is the first batch."
)
_EXAMPLE = (
    "examples:\n"
    "  mixle where runs/a 1234                         # every epoch the run reached\n"
    "  mixle where runs/a data/part-0.jsonl:77 --json  # by origin (0-based line 77)\n"
    "  mixle where runs/a doc-abc --epochs 3           # by id (--id-field at ingest)\n"
    "  mixle where shards/sample 42 --epochs 10 --layout global --batch-size 8 "
    "--world-size 4\n"
    "  mixle where --mixture mix.toml 42 --source web --epochs 2"
)


def register(subparsers: Any) -> None:
    """Add the ``where`` command: RUN_OR_CORPUS DOCUMENT, where's flags, the stream flags."""
    from mixle.provenance import ShowOptions, WhereOptions

    parser = subparsers.add_parser(
        "where",
        help="List every step, rank and row in which a mixle train run trained on a document.",
        description=_DESCRIPTION,
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_arguments(parser)
    parser.add_argument(
        "document", metavar="DOCUMENT", help="a document index, an origin PATH:RECORD, or an id"
    )
    group = parser.add_argument_group("where")
    add_section_flags(group, WhereOptions)
    add_section_flags(group, ShowOptions, _WORLD)
    add_stream_flags(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the document's sightings (text or ``--json``); 2 on bad input, one line."""
    from mixle.cli._errors import echo, report
    from mixle.errors import MixleError
    from mixle.provenance import ShowOptions, WhereOptions, render_where, where

    try:
        options = WhereOptions(**section_values(args, WhereOptions))
        world = ShowOptions(**section_values(args, ShowOptions, _WORLD))
        spec = run_spec(args, world_size=world.world_size)
        found = where(spec, args.document, epochs=options.epochs, source=options.source)
    except MixleError as exc:
        return report("where", exc)
    if options.json:
        print(json.dumps(found.to_dict(), ensure_ascii=False))
    else:
        echo(render_where(found))
    return 0
