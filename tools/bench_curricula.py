"""Benchmark length curricula with ``mixle train``: fixed block, VSL natural, VSL grow_p2, bandit.

Two corpora: the committed sample (``shards/sample-src`` ingested as the README does:
paragraphs, EOS 256, vocab 257) and a synthetic one of ``--documents`` documents whose
lengths are log-normal (median ``exp(--log-mean)``, ``--log-sigma``) and whose tokens
follow a sparse random bigram chain (learnable). On each, runs of the same model,
seed and ``--steps``, after a discarded warm-up run:

- ``fixed``: packed rows of ``--block`` (concatenate-and-chunk, the default order);
- ``vsl-natural`` / ``vsl-grow_p2`` / ``vsl-bandit``: ``--vsl-buckets --min-length`` with
  that curriculum (``--batch-size x --block`` tokens per step, one bucket per step; the
  bandit picks each step's bucket);
- ``bandit``: fixed block with ``--length-buckets --edges`` (permutation order).

Each run is made twice. Without evaluation it gives the rates: trained tokens (real
targets) per wall second of the steps and per CPU second of the whole ``train`` call
(model, reads, steps; ratio to ``fixed`` of the same round). With evaluation of the
same held-out documents (the last 64, as fixed-block rows) every ``steps / 8`` steps
it gives the held-out loss at equal tokens: the eval curve, as a function of trained
tokens, interpolated at the fewest tokens any run of the corpus reached. Medians over
``--rounds``.

Usage: ``python -m tools.bench_curricula [--steps 160] [--rounds 1] [--block 512]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from mixle.cli import main as mixle_main
from mixle.corpus import CorpusWriter, open_corpus
from mixle.train import TrainConfig, read_metrics, train

RUNS: dict[str, dict[str, Any]] = {
    "fixed": {},
    "vsl-natural": {"vsl_curriculum": "natural"},
    "vsl-grow_p2": {"vsl_curriculum": "grow_p2"},
    "vsl-bandit": {"vsl_curriculum": "bandit"},
    "bandit": {"order": "permutation", "prefetch": 0},
}


def sample_corpus(source: str, path: Path) -> Path:
    """``source`` ingested as the README does (paragraph documents, EOS 256)."""
    argv = ["ingest", source, str(path), "--overwrite", "--split", "paragraphs"]
    if mixle_main([*argv, "--append-eos", "256", "--vocab-size", "257"]) != 0:
        raise SystemExit(f"ingest of {source} failed")
    return path


def lognormal_corpus(path: Path, documents: int, log_mean: float, log_sigma: float) -> Path:
    """Log-normal document lengths, tokens from a sparse random bigram chain (vocab 256)."""
    rng = np.random.default_rng(0)
    successors = rng.integers(0, 256, size=(256, 4))
    lengths = np.clip(np.exp(rng.normal(log_mean, log_sigma, size=documents)), 2, 40_000)
    with CorpusWriter(path, vocab_size=256, overwrite=True) as writer:
        for length in lengths.astype(np.int64):
            choices = rng.integers(0, 4, size=length)
            tokens = np.empty(length, dtype=np.int64)
            tokens[0] = rng.integers(256)
            for i in range(1, length):
                tokens[i] = successors[tokens[i - 1], choices[i]]
            writer.add(tokens)
    return path


def _loss_at(metrics: str, tokens: int) -> float:
    """The held-out loss after ``tokens`` trained tokens (linear between evaluations)."""
    records = list(read_metrics(metrics))
    seen = {r["step"]: r["total_tokens"] for r in records if r["type"] == "step"}
    curve = [(seen[r["step"]], r["loss"]) for r in records if r["type"] == "eval"]
    xs, ys = zip(*sorted(curve), strict=True)
    return float(np.interp(tokens, xs, ys))


def _run(
    corpus: Path, name: str, args: argparse.Namespace, workdir: Path, *, evaluate: bool
) -> dict[str, Any]:
    """One ``mixle train`` run: its trained tokens, rates and metrics log."""
    options = dict(RUNS.get(name, {}))
    if name.startswith("vsl"):
        options["vsl_buckets"] = args.min_length
    if name == "bandit":
        options["length_buckets"] = args.edges
    steps = args.steps if name != "warm-up" else 10
    run = workdir / f"{name}{'-eval' if evaluate else ''}"
    config = TrainConfig(
        corpus=str(corpus),
        d_model=args.d_model,
        n_layer=2,
        n_head=2,
        block=args.block,
        batch_size=args.batch_size,
        steps=steps,
        holdout_documents=64,
        eval_every=max(1, steps // 8) if evaluate else 0,
        eval_batches=8,
        threads=1,
        log_every=0,
        progress=False,
        metrics=str(run / "metrics.jsonl"),
        **options,
    )
    run.mkdir(parents=True, exist_ok=True)
    cpu = time.process_time()
    summary = train(config, log=lambda _: None)
    cpu = time.process_time() - cpu
    return {
        "tokens": summary.tokens,
        "wall_rate": summary.tokens_per_second,
        "cpu_rate": summary.tokens / cpu,
        "metrics": str(run / "metrics.jsonl"),
    }


def measure(corpus: Path, args: argparse.Namespace, workdir: Path) -> None:
    lengths = np.asarray(open_corpus(str(corpus)).lengths)
    print(
        f"\n{corpus.name}: {len(lengths)} documents, {int(lengths.sum()):,} tokens, median "
        f"{int(np.median(lengths))}, p95 {int(np.percentile(lengths, 95))}, max {int(lengths.max())}"
    )
    _run(corpus, "warm-up", args, workdir, evaluate=False)
    rounds: list[dict[str, dict[str, Any]]] = []
    chosen = ["fixed", *(name for name in args.runs.split(",") if name != "fixed")]
    for round_ in range(args.rounds):
        names = chosen if round_ % 2 == 0 else list(reversed(chosen))
        here = workdir / f"{round_}"
        # Rates from runs without evaluation (the CPU time is the steps' and the reads');
        # losses from the same runs with evaluation.
        runs = {name: _run(corpus, name, args, here, evaluate=False) for name in names}
        for name in names:
            runs[name]["metrics"] = _run(corpus, name, args, here, evaluate=True)["metrics"]
        rounds.append(runs)
    budget = min(r["tokens"] for runs in rounds for r in runs.values())
    print(f"held-out loss at {budget:,} trained tokens; rates per second of the run")
    print("| run | trained tokens | tok/s (wall) | x fixed | tok/CPU-s | x fixed | held-out loss |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in chosen:

        def median(key: str, name: str = name) -> float:
            return statistics.median(runs[name][key] for runs in rounds)

        def ratio(key: str, name: str = name) -> float:
            return statistics.median(runs[name][key] / runs["fixed"][key] for runs in rounds)

        loss = statistics.median(_loss_at(runs[name]["metrics"], budget) for runs in rounds)
        print(
            f"| {name} | {median('tokens'):,.0f} | {median('wall_rate'):,.0f} | "
            f"{ratio('wall_rate'):.2f} | {median('cpu_rate'):,.0f} | {ratio('cpu_rate'):.2f} | "
            f"{loss:.4f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="/tmp/bench-curricula")
    parser.add_argument("--sample-src", default="shards/sample-src")
    parser.add_argument("--documents", type=int, default=3000)
    parser.add_argument("--log-mean", type=float, default=5.0)
    parser.add_argument("--log-sigma", type=float, default=1.2)
    parser.add_argument("--steps", type=int, default=160)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--block", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--min-length", type=int, default=32)
    parser.add_argument("--edges", default="128,512")
    parser.add_argument("--only", choices=["sample", "lognormal"], default=None)
    parser.add_argument(
        "--runs", default=",".join(RUNS), help=f"comma-separated, of {', '.join(RUNS)}"
    )
    args = parser.parse_args()
    unknown = set(args.runs.split(",")) - set(RUNS)
    if unknown:
        parser.error(f"--runs: unknown run(s) {', '.join(sorted(unknown))}")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    if args.only in (None, "sample"):
        measure(sample_corpus(args.sample_src, workdir / "sample"), args, workdir / "runs-sample")
    if args.only in (None, "lognormal"):
        corpus = lognormal_corpus(
            workdir / "lognormal", args.documents, args.log_mean, args.log_sigma
        )
        measure(corpus, args, workdir / "runs-lognormal")


if __name__ == "__main__":
    main()
