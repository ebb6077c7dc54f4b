"""``mixle ingest``: convert token files or text into a sharded corpus.

A thin wrapper over :func:`mixle.corpus.ingest`; every option maps to one argument.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from mixle.cli._corpus_args import (
    add_command,
    add_common,
    split_paths,
    storage_options,
    usage_error,
)

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

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
}


def _size(text: str) -> int:
    """Parse ``256MiB``, ``1GB``, ``4096`` into bytes."""
    lowered = text.strip().lower()
    number = lowered.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = lowered[len(number) :]
    if unit not in _UNITS or not number.isdigit() or int(number) <= 0:
        raise argparse.ArgumentTypeError(
            f"expected a positive size like 268435456, 256MiB or 1GB. Got {text!r} instead."
        )
    return int(number) * _UNITS[unit]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``ingest`` subcommand."""
    from mixle.corpus import DEFAULT_UNIT_BYTES, format_names, input_formats

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
        "--input-format",
        choices=format_names(),
        help="force the input format instead of detecting it by extension ("
        + "; ".join(f"{f.name}: {' '.join(f.extensions)}" for f in input_formats())
        + "; e.g. --input-format text for .log files)",
    )
    parser.add_argument(
        "--field",
        help="JSONL key / Parquet column with the ids (default: input_ids, then tokens) or, "
        "with --tokenizer, the text (default: text); e.g. --field ids",
    )
    parser.add_argument(
        "--tokenizer",
        help="tokenize text: 'bytes' (UTF-8 bytes, built in) or PATH/tokenizer.json "
        "(needs `pip install mixle[tokenizers]`); e.g. --tokenizer bytes. Text files "
        "default to bytes",
    )
    parser.add_argument(
        "--split",
        choices=("none", "paragraphs"),
        default="none",
        help="text files: each file is a document (none, default) or each blank-line-"
        "separated block is (e.g. --split paragraphs)",
    )
    parser.add_argument(
        "--append-eos",
        type=int,
        metavar="ID",
        help="append this end-of-document id to every document (e.g. --append-eos 50256)",
    )
    parser.add_argument(
        "--shard-size",
        type=_size,
        default=None,
        metavar="BYTES",
        help="maximum size of one .tokens file (default 256MiB; e.g. --shard-size 1GiB)",
    )
    parser.add_argument(
        "--vocab-size",
        type=int,
        help="number of token ids; larger ids are errors and it picks the dtype "
        "(e.g. --vocab-size 50257 -> uint16)",
    )
    parser.add_argument(
        "--dtype",
        choices=("auto", "uint16", "uint32", "int64"),
        default="auto",
        help="token dtype on disk; auto = from --vocab-size, else the smallest that holds "
        "every id (e.g. --dtype uint32)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=min(os.cpu_count() or 1, 8),
        help="worker processes; the output is identical for any value "
        "(default: CPUs, at most 8; e.g. --workers 4)",
    )
    parser.add_argument(
        "--on-error",
        choices=("raise", "skip"),
        default="raise",
        help="bad record: stop and commit nothing (raise, default) or leave it out and "
        "list it in the rejects file (e.g. --on-error skip)",
    )
    parser.add_argument(
        "--rejects",
        metavar="PATH",
        help="with --on-error skip: where to list skipped records as JSON lines "
        "(default OUTPUT/rejects.jsonl; e.g. --rejects bad.jsonl); checked before any "
        "work, and never one of the inputs",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted ingest of the same inputs and options "
        "(e.g. rerun the same command with --resume)",
    )
    parser.add_argument(
        "--layout",
        choices=("raw", "zarr"),
        default="raw",
        help="raw: memory-mappable shards (default); zarr: a compressed zarr v3 group for "
        "storage and transfer (e.g. --layout zarr s3://bucket/corpus.zarr)",
    )
    parser.add_argument(
        "--staging-dir",
        metavar="DIR",
        help="where a URL or zarr OUTPUT is built before it is published, shards first and "
        "the manifest last (default: under ~/.cache/mixle/staging; e.g. --staging-dir /scratch/x)",
    )
    parser.add_argument(
        "--unit-size",
        type=_size,
        default=DEFAULT_UNIT_BYTES,
        metavar="BYTES",
        help="input bytes per parallel work unit; part of the result, so keep it when "
        "resuming (default 64MiB; e.g. --unit-size 256MiB)",
    )
    parser.add_argument(
        "--executor",
        choices=("local", "dask"),
        default="local",
        help="local: this machine's process pool (default); dask: one Dask task per work "
        "unit, on a LocalCluster of --workers processes or on --scheduler (needs "
        "`pip install mixle[dask]` and --vocab-size or --dtype; e.g. --executor dask)",
    )
    parser.add_argument(
        "--scheduler",
        metavar="ADDRESS|FILE",
        help="with --executor dask: an existing cluster's scheduler, tcp://host:port or a "
        "scheduler file (e.g. --scheduler tcp://10.0.0.1:8786)",
    )
    parser.add_argument(
        "--scheduler-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="give up connecting to --scheduler after this long (default 30; e.g. "
        "--scheduler-timeout 10)",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=3,
        help="with --executor dask: times a failed or lost unit is run again (default 3; "
        "e.g. --retries 5)",
    )
    parser.add_argument(
        "--task",
        metavar="I/N",
        help="task-array mode, no engine: run units I, I+N, ... of the plan into OUTPUT "
        "(e.g. --task $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT), then `mixle ingest "
        "--commit OUTPUT`; needs --vocab-size or --dtype",
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
    parser.add_argument(
        "--plan",
        metavar="PLAN.json",
        help="run the units of a plan file (--write-plan) into OUTPUT instead of planning: "
        "with --task only that task's, with --executor dask all of them, else all of them "
        "in --workers processes, then commit; the inputs must still be the planned files "
        "(e.g. mixle ingest --plan plan.json corpus/ --task 0/8)",
    )
    add_common(
        parser,
        overwrite_help="replace an existing corpus at OUTPUT "
        "(e.g. mixle ingest new.jsonl corpus/ --overwrite)",
        quiet_help="no progress bar and no summary (e.g. -q in scripts)",
    )
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
    """The keyword arguments of :func:`mixle.corpus.ingest` given on the command line."""
    from mixle.corpus import DEFAULT_SHARD_MAX_BYTES

    return {
        "input_format": args.input_format,
        "field": args.field,
        "tokenizer": args.tokenizer,
        "split": args.split,
        "append_eos": args.append_eos,
        "shard_size": args.shard_size or DEFAULT_SHARD_MAX_BYTES,
        "vocab_size": args.vocab_size,
        "dtype": args.dtype,
        "workers": args.workers,
        "on_error": args.on_error,
        "rejects": args.rejects,
        "resume": args.resume,
        "overwrite": args.overwrite,
        "unit_size": args.unit_size,
        "progress": False if args.quiet else None,
        "layout": args.layout,
        "storage_options": storage_options(args),
        "staging_dir": args.staging_dir,
        "executor": args.executor,
        "scheduler": args.scheduler,
        "scheduler_timeout": args.scheduler_timeout,
        "retries": args.retries,
        "task": args.task,
        "plan": args.plan,
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
