"""Benchmark the length bandit: ``mixle train`` with a fixed block, with and without it.

A long-tailed corpus: the first ``--documents`` documents of the sample corpus (byte
tokens; lengths from 5 to tens of thousands), small enough that a run of ``--steps``
steps sees several epochs (the bandit re-decides once per epoch). Two runs in the same
process, same model, seed, permutation order and steps (so equal trained tokens), after a discarded 20-step warm-up run:
``fixed`` (every document every epoch) and ``bandit`` (``length_buckets``). Reports
tokens/s (ratio to ``fixed``), the held-out loss at the end, and the bandit's final
probabilities.

Usage: ``python -m tools.bench_length_bandit [--corpus shards/sample] [--steps 300]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from mixle.corpus import CorpusWriter, open_corpus
from mixle.train import TrainConfig, train


def _long_tailed(source: str, documents: int, path: Path) -> Path:
    corpus = open_corpus(source)
    with CorpusWriter(path, vocab_size=256) as writer:
        for index in range(documents):
            writer.add(np.asarray(corpus[index], dtype=np.int64))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="shards/sample")
    parser.add_argument("--documents", type=int, default=400)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--edges", default="256,1024")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = _long_tailed(args.corpus, args.documents, Path(tmp) / "long-tailed")
        lengths = np.asarray(open_corpus(str(corpus)).lengths)
        print(
            f"corpus: {len(lengths)} documents, {int(lengths.sum()):,} tokens, lengths "
            f"{int(lengths.min())}..{int(lengths.max())} (median {int(np.median(lengths))})"
        )
        results = {}
        runs = (("warm-up", None), ("fixed", None), ("bandit", args.edges))
        for name, buckets in runs:
            checkpoints = Path(tmp) / name
            config = TrainConfig(
                corpus=str(corpus),
                d_model=64,
                n_layer=2,
                n_head=2,
                block=128,
                batch_size=16,
                steps=args.steps if name != "warm-up" else 20,
                holdout_documents=32,
                eval_every=args.steps,
                eval_batches=8,
                threads=1,
                log_every=0,
                progress=False,
                order="permutation",
                prefetch=0,
                length_buckets=buckets,
                checkpoint_dir=str(checkpoints),
            )
            summary = train(config, log=lambda _: None)
            if name == "warm-up":  # first-run costs (allocator, kernels) paid and dropped
                continue
            state = json.loads((Path(str(summary.checkpoint)) / "rank-00000.json").read_text())
            selector = state["stream"].get("selector")
            results[name] = summary
            planned = selector["planned"] if selector else {}
            last = planned[max(planned, key=int)] if planned else None
            print(
                f"{name}: {summary.tokens:,} tokens, {summary.tokens_per_second:,.0f} tok/s "
                f"(x{summary.tokens_per_second / results['fixed'].tokens_per_second:.2f}), "
                f"held-out loss {summary.eval_loss:.4f}, epochs planned {len(planned) or '-'}"
                + (f", last probabilities {[round(p, 3) for p in last]}" if last else "")
            )


if __name__ == "__main__":
    main()
