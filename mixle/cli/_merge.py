"""``mixle merge``: combine corpora into one without copying token bytes.

A thin wrapper over :func:`mixle.corpus.merge_corpora`.
"""

from __future__ import annotations

import argparse

from mixle.cli._corpus_args import (
    add_command,
    add_common,
    split_paths,
    storage_options,
    usage_error,
)

__all__ = ["register"]

_DESCRIPTION = """\
Concatenate corpora (documents in argument order) into one corpus. Shard files are
hard-linked on local disk and copied server-side on object stores, and their recorded
SHA-256 digests are reused, so no token byte is read; the manifest is written last.
Corpora of different dtypes or vocab sizes are refused unless --dtype / --vocab-size
say how to reconcile them (--dtype rewrites only the narrower shards).
"""

_EXAMPLES = """\
examples:
  mixle merge part-a/ part-b/ corpus/
  mixle merge web/ books/ code/ corpus/ --dtype uint32 --vocab-size 100000
  mixle merge s3://bucket/a s3://bucket/b s3://bucket/all      # server-side copies
  mixle merge s3://b/a s3://b/b s3://b/all --dtype uint32 \
      --storage-option client_kwargs.endpoint_url=http://127.0.0.1:9000
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``merge`` subcommand."""
    parser = add_command(
        subparsers,
        "merge",
        help_text="Combine corpora into one (hard links / server-side copies, no token bytes read).",
        usage="mixle merge [options] CORPUS CORPUS... OUTPUT",
        description=_DESCRIPTION,
        epilog=_EXAMPLES,
        paths_help="two or more corpora (directories or URLs), then the output (e.g. a/ b/ merged/)",
    )
    parser.add_argument(
        "--dtype",
        choices=("uint16", "uint32", "int64"),
        help="widen every shard to this dtype; needed when the corpora's dtypes differ "
        "(e.g. --dtype uint32)",
    )
    parser.add_argument(
        "--vocab-size",
        type=int,
        help="vocab size of the merged corpus; needed when the corpora's differ "
        "(e.g. --vocab-size 100000)",
    )
    add_common(
        parser,
        overwrite_help="replace a corpus already at OUTPUT",
        quiet_help="print nothing on success",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from mixle.cli._errors import echo, report
    from mixle.corpus import merge_corpora
    from mixle.errors import CorpusError

    split = split_paths(args.paths, inputs=2)
    if split is None:
        return usage_error("merge", "give at least two corpora and the OUTPUT")
    inputs, output = split
    try:
        manifest = merge_corpora(
            inputs,
            output,
            dtype=args.dtype,
            vocab_size=args.vocab_size,
            overwrite=args.overwrite,
            storage_options=storage_options(args),
        )
    except CorpusError as exc:
        return report("merge", exc)
    if not args.quiet:
        echo(
            f"merged {len(inputs)} corpora into {output}: {manifest['num_documents']:,} "
            f"documents, {manifest['num_tokens']:,} tokens, {len(manifest['shards'])} shards, "
            f"dtype {manifest['dtype']}"
        )
    return 0
