"""Benchmark opening a corpus of many shards: version-1 manifest vs the shard table.

Issue #25 item 6: 10^13 uint16 tokens in 256 MiB shards are ~75,000 shards, and
every rank and every DataLoader worker opens the corpus. This writes ``--shards``
small shards (``--docs`` documents of ``--tokens`` tokens each) once on tmpfs, and
publishes the same shard files three times (hard links): ``list``, a version-1
``manifest.json`` listing every shard, ``table``, a version-2 manifest beside its
binary shard table (``docs/format.md`` section 14), and ``sidecar``, the table plus
the document-offsets sidecar (section 17: what ``CorpusWriter`` writes for such a
corpus by default). Each measurement runs in a fresh
process (``--child``): the wall time of ``open_corpus``, its private memory
(``RssAnon`` growth; file-backed pages of the mapped table do not count), and the
time to the first batch of ``StreamingCorpus(..., layout="global")`` after it.
Rounds alternate the order of the forms; medians are printed. The corpus is
deleted at the end.

Usage::

    python -m tools.bench_shard_table --shards 100000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tools._memory import rss_anon_mb

FORMS = ("list", "table", "sidecar")


def _child(path: str, block: int, batch_size: int) -> None:
    """One fresh-process measurement, printed as one JSON line."""
    import numpy as np

    from mixle.corpus import open_corpus
    from mixle.data import StreamingCorpus

    np.zeros(1)  # numpy and mixle imported and warmed before the baseline
    before = rss_anon_mb()
    start, start_cpu = time.perf_counter(), time.process_time()
    documents = open_corpus(path)
    opened, opened_cpu = time.perf_counter(), time.process_time()
    open_mb = rss_anon_mb() - before
    stream = StreamingCorpus(
        documents, rank=0, world_size=1, block=block, batch_size=batch_size, layout="global"
    )
    batch = next(iter(stream))
    done, done_cpu = time.perf_counter(), time.process_time()
    assert batch[0].shape[0] == batch_size
    print(
        json.dumps(
            {
                "open_s": opened - start,
                "open_rss_anon_mb": open_mb,
                "first_batch_s": done - opened,
                "open_cpu_s": opened_cpu - start_cpu,
                "first_batch_cpu_s": done_cpu - opened_cpu,
                "rss_anon_mb": rss_anon_mb(),
            }
        )
    )


def _build(work: Path, shards: int, docs: int, tokens: int) -> None:
    """Write the shards once (``list``) and publish them again with a table (``table``),
    and with a table and the document-offsets sidecar (``sidecar``)."""
    import numpy as np

    from mixle.corpus import CorpusWriter, add_document_offsets, open_corpus
    from mixle.corpus.format.manifest import write_manifest

    lengths = np.full(shards * docs, tokens, dtype=np.int64)
    ids = (np.arange(int(lengths.sum()), dtype=np.int64) % 50_000).astype(np.uint16)
    with CorpusWriter(
        work / "list",
        vocab_size=50_257,
        shard_max_bytes=docs * tokens * 2,
        durable=False,
        shard_table=False,
        document_offsets=False,
    ) as writer:
        writer.add_flat(ids, lengths)
    parsed = open_corpus(work / "list").parsed_manifest
    for form in ("table", "sidecar"):
        (work / form).mkdir()
        for entry in parsed.shards:
            for name in entry.files:
                os.link(work / "list" / name, work / form / name)
        write_manifest(work / form, parsed.with_shard_table(True))
    add_document_offsets(work / "sidecar")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=100_000)
    parser.add_argument("--docs", type=int, default=10, help="documents per shard")
    parser.add_argument("--tokens", type=int, default=50, help="tokens per document")
    parser.add_argument("--block", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", default="/dev/shm/mixle-bench-shard-table")
    parser.add_argument(
        "--forms",
        default=",".join(FORMS),
        help="manifests to measure: some of list, table, sidecar",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    forms = tuple(form for form in args.forms.split(",") if form)
    if not forms or not set(forms) <= set(FORMS):
        parser.error(f"--forms must name some of {', '.join(FORMS)}. Got {args.forms!r}.")
    if args.child:
        _child(args.child, args.block, args.batch_size)
        return 0
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    samples: dict[str, list[dict[str, float]]] = {form: [] for form in forms}
    try:
        start = time.perf_counter()
        _build(work, args.shards, args.docs, args.tokens)
        built = time.perf_counter() - start
        sizes = {
            form: sum(
                (work / form / name).stat().st_size
                for name in ("manifest.json", "shards.table", "document_offsets.bin")
                if (work / form / name).exists()
            )
            for form in FORMS
        }
        for round_ in range(args.rounds):
            for form in forms if round_ % 2 == 0 else tuple(reversed(forms)):
                command = [
                    sys.executable,
                    "-m",
                    "tools.bench_shard_table",
                    "--child",
                    str(work / form),
                    "--block",
                    str(args.block),
                    "--batch-size",
                    str(args.batch_size),
                ]
                output = subprocess.run(command, check=True, capture_output=True, text=True)
                samples[form].append(json.loads(output.stdout.strip().splitlines()[-1]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"{args.shards:,} shards x {args.docs} documents x {args.tokens} uint16 tokens "
        f"(built in {built:.0f} s), fresh process per figure, median of {args.rounds}"
    )
    print(
        "| manifest | metadata bytes | open_corpus wall / CPU | RssAnon of open | "
        "first batch (global) wall / CPU |"
    )
    print("|---|---|---|---|---|")
    for form in forms:

        def median(key: str, form: str = form) -> float:
            return statistics.median(sample[key] for sample in samples[form])

        print(
            f"| {form} | {sizes[form] / 1e6:.1f} MB | {median('open_s'):.3f} / "
            f"{median('open_cpu_s'):.3f} s | {median('open_rss_anon_mb'):.1f} MB | "
            f"{median('first_batch_s'):.3f} / {median('first_batch_cpu_s'):.3f} s |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
