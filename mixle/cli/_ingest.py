"""``mixle ingest``: convert token files or text into a sharded corpus.

A thin wrapper over :func:`mixle.corpus.ingest`: its flags are built from the fields of
:class:`~mixle.corpus.IngestOptions` (see :mod:`mixle.cli._flags`), plus the modes
``--commit`` and ``--write-plan`` and the arguments shared with ``merge``.
"""

from __future__ import annotations

import argparse
from typing import Any

from mixle.cli._corpus_args import (
    add_command,
    add_common,
    split_paths,
    storage_options,
    usage_error,
)
from mixle.cli._flags import add_option_flags, option_values

__all__ = ["register"]

_DESCRIPTION = """\
Convert tokenized documents (JSONL, Parquet, NumPy, Megatron .bin/.idx) or raw text
into a sharded, memory-mapped corpus directory, or publish it to an object store
(s3://, gs://, https://, any fsspec URL; shards first, manifest last). The result is byte-identical for any
--workers and any run; a killed ingest leaves no (or the previous) manifest and
continues with --resume.
"""

_EXAMPLES = """\
examples:
  mixle ingest data/*.jsonl corpus/                       # ids in "input_ids" (or "tokens")
  mixle ingest shards.jsonl.zst corpus/ --field ids --workers 8
  mixle ingest books/ corpus/ --input-format text --split paragraphs --append-eos 0
  mixle ingest docs.jsonl corpus/ --tokenizer tokenizer.json --field text --append-eos 50256
  mixle ingest my_gpt2_text_document corpus/ --vocab-size 50257   # Megatron PREFIX.bin/.idx
  mixle ingest train.npz corpus/ --shard-size 512MiB
  mixle ingest data/ corpus/ --on-error skip --rejects bad.jsonl
  mixle ingest data/ corpus/ --resume                     # after a crash or Ctrl-C
  mixle ingest data/ s3://bucket/corpus                   # build locally, then upload
  mixle ingest data/ corpus.zarr --layout zarr            # compressed, for transfer
  mixle ingest data/ corpus/ --vocab-size 50257 --executor dask            # LocalCluster
  mixle ingest data/ corpus/ --vocab-size 50257 --executor dask --scheduler tcp://head:8786
  mixle ingest data/ corpus/ --vocab-size 50257 --task 3/16  # one task of a Slurm array
  mixle ingest --commit corpus/                           # ... then publish, once all tasks ended
  mixle ingest data/ --vocab-size 50257 --write-plan plan.json  # plan once (no OUTPUT) ...
  mixle ingest --plan plan.json s3://bucket/corpus --task 3/16  # ... run a task's units of it
  mixle ingest --commit s3://bucket/corpus --storage-option client_kwargs.endpoint_url=http://minio:9000
  mixle inspect corpus/                                   # look at the result
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``ingest`` subcommand: its modes, then one flag per ingest option."""
    from mixle.corpus import IngestOptions

    parser = add_command(
        subparsers,
        "ingest",
        help_text="Convert token files or text into a sharded corpus.",
        usage="mixle ingest [options] INPUT... OUTPUT",
        description=_DESCRIPTION,
        epilog=_EXAMPLES,
        paths_help="inputs (files, directories, globs, fsspec URLs; e.g. 'data/*.jsonl') then the "
        "output corpus directory or URL (e.g. corpus/ or s3://bucket/corpus); only the "
        "OUTPUT with --commit or --plan, only INPUTs with --write-plan",
    )
    parser.add_argument(
        "--commit",
        action="store_true",
        help="publish the finished units of a task array: `mixle ingest --commit OUTPUT` "
        "(checks every unit's record and shard sizes, reads no token bytes, manifest last; "
        "e.g. mixle ingest --commit corpus/)",
    )
    parser.add_argument(
        "--write-plan",
        "--plan-out",
        metavar="PLAN.json",
        dest="write_plan",
        help="write the plan (every work unit; a pure function of the INPUTs and options) to "
        "this file and stop; give only INPUTs, and --vocab-size or --dtype "
        "(e.g. --write-plan plan.json)",
    )
    add_common(
        parser,
        overwrite_help="replace an existing corpus at OUTPUT "
        "(e.g. mixle ingest new.jsonl corpus/ --overwrite)",
        quiet_help="no progress bar and no summary (e.g. -q in scripts)",
    )
    add_option_flags(parser, IngestOptions)
    parser.set_defaults(func=_run)


def _paths(args: argparse.Namespace) -> tuple[list[str], str] | str:
    """``(inputs, output)`` for this mode (output ``""`` with --write-plan), or the
    usage error."""
    exclusive = [
        flag
        for flag, on in (
            ("--commit", args.commit),
            ("--plan", args.plan),
            ("--write-plan", args.write_plan),
        )
        if on
    ]
    if len(exclusive) > 1:
        return f"{' and '.join(exclusive)} cannot be combined"
    if args.commit:
        if len(args.paths) != 1:
            return "--commit takes only the OUTPUT directory or URL"
        return [], args.paths[0]
    if args.write_plan:
        return list(args.paths), ""
    needed = 0 if args.plan else 1
    split = split_paths(args.paths, inputs=needed)
    return split if split is not None else "give at least one INPUT and the OUTPUT directory or URL"


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of :func:`mixle.corpus.ingest` given on the command line:
    the option flags, and the shared ``--overwrite``, ``--quiet``, ``--storage-option``."""
    from mixle.corpus import IngestOptions

    return {
        **option_values(args, IngestOptions),
        "overwrite": args.overwrite,
        "progress": False if args.quiet else None,
        "storage_options": storage_options(args),
    }


def _write_plan(inputs: list[str], options: dict[str, Any], path: str) -> str:
    """Plan ``inputs`` with ``options``, write the plan to ``path``; the line to print."""
    from mixle.corpus import IngestOptions, plan_ingest

    plan = plan_ingest(inputs, IngestOptions(**options))
    plan.require_distributable()
    plan.write(path)
    return (
        f"wrote the plan of {len(plan.units)} work units (id {plan.plan_id[:12]}) to {path}; "
        f"run them with: mixle ingest --plan {path} OUTPUT --task i/n"
    )


def _run(args: argparse.Namespace) -> int:
    from mixle.cli._errors import echo, report
    from mixle.corpus import commit_ingest, ingest
    from mixle.errors import CorpusError

    paths = _paths(args)
    if isinstance(paths, str):
        return usage_error("ingest", paths)
    inputs, output = paths
    try:
        options = _options(args)
        if args.write_plan:
            print(_write_plan(inputs, dict(options, plan=None), args.write_plan))
            return 0
        if args.commit:
            summary = commit_ingest(
                output, storage_options=options["storage_options"], rejects=args.rejects
            )
        else:
            summary = ingest(inputs, output, **options)
    except CorpusError as exc:
        return report("ingest", exc)
    if not args.quiet:
        echo(summary.format())
    return 0
