"""Benchmark the remote publish paths against moto's S3 server, two checkouts side by side.

Three steps, each run in a fresh subprocess with ``PYTHONPATH`` set to one checkout
(``--baseline``, e.g. the main branch, and ``--candidate``, default this one), the
two interleaved round by round against the same moto server; medians reported:

* ``publish``: :func:`mixle.corpus.publish_corpus` of a local corpus of ``--shards``
  shards to ``s3://`` (every shard uploaded, the manifest last);
* ``ingest``: :func:`mixle.corpus.ingest` of a JSONL file to ``s3://`` (built in a
  staging directory, then published);
* ``units``: ``--units`` units of a plan run straight into ``s3://``
  (:func:`mixle.corpus.run_unit`, each unit uploaded) and committed
  (:func:`mixle.corpus.commit_ingest`: records read in one batch, shards copied
  server-side, manifest last).

Each figure is the wall and CPU time of the step inside the subprocess (imports and
input generation excluded). The ratio is candidate / baseline: below 1 is faster.

Usage::

    python -m tools.bench_publish --baseline /work/main --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

STEPS = ("publish", "ingest", "units")
VOCAB = 50_257


def write_input(path: Path, documents: int, seed: int) -> None:
    """A JSONL file of ``documents`` documents of 200 random ids."""
    rng = np.random.default_rng(seed)
    with open(path, "w", encoding="ascii") as handle:
        for _ in range(documents):
            handle.write(json.dumps({"input_ids": rng.integers(0, VOCAB, 200).tolist()}) + "\n")


def run_step(step: str, work: Path, url: str, storage: dict[str, Any], size: int) -> None:
    """Inside the subprocess: time ``step`` and print ``{"wall": s, "cpu": s}``."""
    from mixle.corpus import (
        CorpusWriter,
        IngestOptions,
        commit_ingest,
        ingest,
        plan_ingest,
        publish_corpus,
        run_unit,
    )

    source = work / "input.jsonl"
    if step == "publish":
        corpus = work / "corpus"
        rng = np.random.default_rng(0)
        with CorpusWriter(corpus, vocab_size=VOCAB, shard_max_bytes=64 * 1024) as writer:
            for _ in range(size):
                writer.add_many([rng.integers(0, VOCAB, 400) for _ in range(80)])
        action: Any = lambda: publish_corpus(corpus, url, storage_options=storage)  # noqa: E731
    elif step == "ingest":
        write_input(source, 40 * size, 1)
        options = {"vocab_size": VOCAB, "shard_size": 64 * 1024, "progress": False}
        action = lambda: ingest([str(source)], url, storage_options=storage, **options)  # noqa: E731
    else:
        write_input(source, 4 * size, 2)
        options_ = IngestOptions(vocab_size=VOCAB, unit_size=source.stat().st_size // size + 1)
        plan = plan_ingest([str(source)], options_)

        def action() -> None:
            for unit in plan.units:
                run_unit(plan, unit.index, url, storage_options=storage)
            commit_ingest(url, storage_options=storage)

    started, cpu = time.perf_counter(), time.process_time()
    action()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    print(json.dumps({"wall": wall, "cpu": cpu, "mixle": sys.modules["mixle"].__file__}))


def measure(
    checkout: str, step: str, work: Path, url: str, storage: dict[str, Any], size: int
) -> dict[str, float]:
    """Run ``step`` with ``checkout`` first on ``PYTHONPATH``; return its figures."""
    work.mkdir(parents=True, exist_ok=True)
    # Run as a script from the work directory: neither the current directory nor this
    # checkout comes before ``checkout`` on sys.path, so its ``mixle`` is the one imported.
    env = dict(os.environ, PYTHONPATH=checkout)
    arguments = json.dumps([step, str(work), url, storage, size])
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--step", arguments],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        cwd=work,
    ).stdout
    figures = json.loads(out.strip().splitlines()[-1])
    if not figures.pop("mixle").startswith(checkout):
        raise RuntimeError(f"the step did not import mixle from {checkout}")
    return {key: float(value) for key, value in figures.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", help="checkout to compare with (required)")
    parser.add_argument("--candidate", default=str(Path(__file__).resolve().parents[1]))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shards", type=int, default=60, help="shards of the publish step")
    parser.add_argument("--units", type=int, default=40, help="units of the units step")
    parser.add_argument("--steps", default=",".join(STEPS), help="comma-separated steps")
    parser.add_argument("--work", default="/dev/shm/bench-publish")
    parser.add_argument("--step", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:
        step, work, url, storage, size = json.loads(args.step)
        run_step(step, Path(work), url, storage, size)
        return 0
    if not args.baseline:
        parser.error("--baseline CHECKOUT is required (e.g. --baseline /work/main)")
    import s3fs

    from tools.bench_remote import start_moto

    process, storage = start_moto()
    try:
        s3fs.S3FileSystem(**storage).mkdir("bench")
        checkouts = {"baseline": args.baseline, "candidate": args.candidate}
        samples: dict[str, dict[str, list[dict[str, float]]]] = {}
        counter = 0
        for round_ in range(args.rounds):
            for step in args.steps.split(","):
                size = args.units if step == "units" else args.shards
                order = list(checkouts) if round_ % 2 == 0 else list(reversed(checkouts))
                for kind in order:
                    counter += 1
                    work = Path(args.work) / f"{step}-{counter}"
                    figures = measure(
                        checkouts[kind], step, work, f"s3://bench/{step}-{counter}", storage, size
                    )
                    samples.setdefault(step, {}).setdefault(kind, []).append(figures)
                    subprocess.run(["rm", "-rf", str(work)], check=False)
        print(f"rounds: {args.rounds}   shards: {args.shards}   units: {args.units}")
        for step, kinds in samples.items():
            wall = {k: statistics.median(f["wall"] for f in v) for k, v in kinds.items()}
            cpu = {k: statistics.median(f["cpu"] for f in v) for k, v in kinds.items()}
            print(
                f"{step:8s} baseline {wall['baseline']:6.2f} s (cpu {cpu['baseline']:5.2f})  "
                f"candidate {wall['candidate']:6.2f} s (cpu {cpu['candidate']:5.2f})  "
                f"wall ratio {wall['candidate'] / wall['baseline']:.2f}  "
                f"cpu ratio {cpu['candidate'] / cpu['baseline']:.2f}"
            )
    finally:
        process.terminate()
        process.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
