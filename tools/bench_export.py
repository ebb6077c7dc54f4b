"""Benchmark ``mixle export`` (issue #19) against a same-run baseline.

Builds a uint16 corpus of ``--gigabytes`` of token bytes (documents of 200..1800 ids,
default 256 MiB shards), then runs interleaved rounds of:

1. baseline: a plain copy of the token bytes — ``shutil.copyfile`` of every shard's
   ``.tokens`` file into a fresh directory, each fsynced (the export fsyncs too);
2. ``export_corpus(format="megatron")``: one prefix per shard, token files
   hard-linked, only the ``.idx`` written (target: < 1 s for 1 GB);
3. ``export_corpus(format="litdata", block_size=2049)`` (target: >= 0.5x the
   baseline's bytes/s);
4. ``export_corpus(format="megatron", single=True)``: one prefix, so the shards are
   concatenated (a kernel copy) — for information.

Outputs are deleted between rounds (untimed). Figures are medians; ratios are to the
same run's baseline. Also prints the process's peak RSS and ``RssAnon``.

    python -m tools.bench_export              # 1 GB corpus, 5 rounds (~2 minutes, 3 GB disk)
    python -m tools.bench_export --quick      # 40 MB smoke run in seconds
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from mixle.corpus import CorpusWriter, open_corpus  # noqa: E402
from mixle.corpus.export import export_corpus  # noqa: E402
from tools.bench_ingest import _rss_anon_kb  # noqa: E402


def make_corpus(path: Path, tokens: int, seed: int) -> None:
    """Write a uint16 corpus of ``tokens`` ids in documents of 200..1800 ids."""
    rng = np.random.default_rng(seed)
    written = 0
    with CorpusWriter(path, vocab_size=50_257) as writer:
        while written < tokens:
            batch = min(1 << 24, tokens - written)
            ids = rng.integers(0, 50_257, size=batch, dtype=np.uint16)
            lengths = rng.integers(200, 1800, size=batch // 200 + 1)
            ends = np.cumsum(lengths)
            ends = np.concatenate((ends[ends < batch], [batch]))
            writer.add_many(np.split(ids, ends[:-1]))
            written += batch


def copy_tokens(corpus: Path, out: Path) -> None:
    """The baseline: copy every shard's tokens file, fsync each."""
    out.mkdir()
    manifest = json.loads((corpus / "manifest.json").read_bytes())
    for entry in manifest["shards"]:
        target = out / entry["tokens"]
        shutil.copyfile(corpus / entry["tokens"], target)
        with open(target, "rb+") as handle:
            os.fsync(handle.fileno())


def timed(function: Callable[[], object]) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gigabytes", type=float, default=1.0, help="token bytes (1e9 units)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--block-size", type=int, default=2049)
    parser.add_argument("--dir", default="/tmp/export-bench")
    parser.add_argument("--quick", action="store_true", help="40 MB, 3 rounds")
    args = parser.parse_args()
    if args.quick:
        args.gigabytes, args.rounds = 0.04, 3
    root = Path(args.dir)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    corpus = root / "corpus"
    tokens = int(args.gigabytes * 1e9) // 2
    started = time.perf_counter()
    make_corpus(corpus, tokens, seed=0)
    documents = open_corpus(corpus)
    nbytes = documents.num_tokens * 2
    print(
        f"corpus: {nbytes / 1e9:.3f} GB uint16, {len(documents):,} documents, "
        f"{documents.num_shards} shards (built in {time.perf_counter() - started:.1f} s)"
    )
    anon_before = _rss_anon_kb()
    runs: dict[str, list[float]] = {"copy": [], "megatron": [], "litdata": [], "single": []}
    jobs: dict[str, Callable[[Path], object]] = {
        "copy": lambda out: copy_tokens(corpus, out),
        "megatron": lambda out: export_corpus(corpus, out, "megatron"),
        "litdata": lambda out: export_corpus(corpus, out, "litdata", block_size=args.block_size),
        "single": lambda out: export_corpus(corpus, out, "megatron", single=True),
    }
    for round_number in range(args.rounds):
        for name, job in jobs.items():
            out = root / f"out-{name}"
            runs[name].append(timed(lambda job=job, out=out: job(out)))
            shutil.rmtree(out)
        print(
            f"round {round_number}: "
            + ", ".join(f"{name} {values[-1]:.3f} s" for name, values in runs.items())
        )
    median = {name: statistics.median(values) for name, values in runs.items()}
    copy_rate = nbytes / median["copy"]
    print(f"\nmedians over {args.rounds} rounds ({nbytes / 1e9:.3f} GB of token bytes):")
    print(f"  baseline copy+fsync     {median['copy']:.3f} s  {copy_rate / 1e9:.2f} GB/s")
    print(f"  megatron (links + idx)  {median['megatron']:.3f} s  (target < 1 s for 1 GB)")
    for name, label in (("litdata", "litdata chunks"), ("single", "megatron --single")):
        rate = nbytes / median[name]
        print(
            f"  {label:<23} {median[name]:.3f} s  {rate / 1e9:.2f} GB/s  "
            f"{rate / copy_rate:.2f}x baseline"
        )
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"peak RSS {peak_mb:.0f} MB; RssAnon after building {anon_before / 1024:.0f} MB, "
        f"after the rounds {_rss_anon_kb() / 1024:.0f} MB"
    )
    shutil.rmtree(root)


if __name__ == "__main__":
    main()
