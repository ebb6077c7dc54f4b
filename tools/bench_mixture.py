"""Proof + benchmark: unsupervised domain discovery with a mixture of LM experts (issue #16).

Two clearly different sources — two synthetic first-order Markov chains over one
vocabulary (each row: two likely successors, the rest rare), or byte-level chunks of the
Python files of ``shards/sample-src`` vs its other text (``--source sample-src``) — are
written, shuffled together, to a real corpus with ``CorpusWriter`` (plus a held-out
corpus). A 2-expert document-level mixture of small transformer leaves with one shared
``CategoricalEmbedding`` is fit by ``stream_em`` over ``document_batches`` of the
memory-mapped corpus. The baseline is a single leaf of at least the mixture's total
parameter count, trained by the same driver on the same batches (a 1-component
mixture: the same documents, tokens and optimizer steps). Reported: held-out
nats/token of both, assignment purity of the held-out documents (argmax posterior
against the source, best labelling), parameters, wall time and peak RSS.

    python -m tools.bench_mixture            # full form
    python -m tools.bench_mixture --quick    # CI form (a few seconds)
    python -m tools.bench_mixture --source sample-src

On ``sample-src`` only the purity target is claimed: both models are data-starved there
(about 22 KB of training bytes), and the figures in ``docs/benchmarks.md`` show the
mixture's held-out likelihood level with the single leaf's, not better.
"""

from __future__ import annotations

import argparse
import math
import resource
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mixle.corpus import CorpusWriter, open_corpus
from mixle.models import StreamingTransformer
from mixle.stats import CategoricalEmbedding, MixtureDistribution, document_batches, stream_em

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Result:
    vocab: int
    purity: float
    mixture_nats: float
    single_nats: float
    mixture_params: int
    single_params: int
    mixture_seconds: float
    single_seconds: float
    heldout_tokens: int
    weights: tuple[float, ...]


def markov_chain(vocab: int, seed: int) -> np.ndarray:
    """A ``(vocab, vocab)`` transition matrix: two likely successors per token."""
    rng = np.random.default_rng(seed)
    matrix = np.full((vocab, vocab), 0.02)
    for row in range(vocab):
        matrix[row, rng.choice(vocab, 2, replace=False)] += [0.6, 0.3]
    return matrix / matrix.sum(axis=1, keepdims=True)


def markov_documents(
    matrix: np.ndarray, n: int, length: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """``n`` documents of ``length`` tokens from the chain (uniform first token)."""
    cdf = np.cumsum(matrix, axis=1)
    out = np.empty((n, length), dtype=np.int64)
    out[:, 0] = rng.integers(0, matrix.shape[0], n)
    for t in range(1, length):
        u = rng.random(n)[:, None] * cdf[out[:, t - 1], -1:]
        out[:, t] = np.minimum((u > cdf[out[:, t - 1]]).sum(axis=1), matrix.shape[0] - 1)
    return list(out)


def sample_src_documents(chunk: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Byte chunks of the Python files and of the other text of ``shards/sample-src``."""
    python, other = [], []
    for path in sorted((ROOT / "shards" / "sample-src").rglob("*.txt")):
        data = np.frombuffer(path.read_bytes(), dtype=np.uint8).astype(np.int64)
        pieces = [data[i : i + chunk] for i in range(0, data.shape[0] - chunk + 1, chunk)]
        (python if path.name.endswith(".py.txt") else other).extend(pieces)
    return python, other


def sources(args: argparse.Namespace) -> tuple[int, list[np.ndarray], list[np.ndarray]]:
    """Return ``(vocab, documents of source 0, documents of source 1)``."""
    if args.source == "markov":
        rng = np.random.default_rng(args.seed)
        n = args.docs + args.heldout
        a = markov_documents(markov_chain(args.vocab, 1), n, args.length, rng)
        b = markov_documents(markov_chain(args.vocab, 2), n, args.length, rng)
        return args.vocab, a, b
    python, other = sample_src_documents(args.length)
    rng = np.random.default_rng(args.seed)
    keep = rng.choice(len(python), len(other), replace=False)  # balance the two sources
    return 256, [python[int(i)] for i in sorted(keep)], other


def write_split(
    path: Path, docs: list[np.ndarray], labels: np.ndarray, vocab: int, seed: int
) -> np.ndarray:
    """Write ``docs`` shuffled into a corpus at ``path``; return the labels in corpus order."""
    order = np.random.default_rng(seed).permutation(len(docs))
    with CorpusWriter(path, vocab_size=vocab, durable=False) as writer:
        writer.add_many(docs[int(i)] for i in order)
    return labels[order]


def build_corpora(directory: Path, args: argparse.Namespace) -> tuple[int, np.ndarray, np.ndarray]:
    """Write ``train`` and ``heldout`` corpora; return ``(vocab, train labels, heldout labels)``."""
    vocab, a, b = sources(args)
    cut_a, cut_b = (
        len(a) * args.docs // (args.docs + args.heldout),
        len(b) * args.docs // (args.docs + args.heldout),
    )
    if args.source == "markov":
        cut_a = cut_b = args.docs
    train = a[:cut_a] + b[:cut_b]
    heldout = a[cut_a:] + b[cut_b:]
    train_labels = np.array([0] * cut_a + [1] * cut_b)
    heldout_labels = np.array([0] * (len(a) - cut_a) + [1] * (len(b) - cut_b))
    return (
        vocab,
        write_split(directory / "train", train, train_labels, vocab, args.seed),
        write_split(directory / "heldout", heldout, heldout_labels, vocab, args.seed + 1),
    )


def parameter_count(leaves: list[StreamingTransformer]) -> int:
    """Distinct parameters of the leaves (a shared table counts once)."""
    seen = {id(p): p.numel() for leaf in leaves for p in leaf.module.parameters()}
    return sum(seen.values())


def expert(
    vocab: int,
    args: argparse.Namespace,
    d_model: int,
    seed: int,
    embedding: CategoricalEmbedding | None,
) -> StreamingTransformer:
    return StreamingTransformer.from_config(
        vocab,
        d_model=d_model,
        n_layer=args.n_layer,
        n_head=args.n_head,
        block=args.block,
        embedding=embedding,
        seed=seed,
        lr=args.lr,
        observation="document",
    )


def fit(
    mixture: MixtureDistribution, train: object, args: argparse.Namespace
) -> tuple[MixtureDistribution, float]:
    started = time.perf_counter()
    for epoch in range(args.epochs):
        batches = document_batches(train, args.batch, seed=args.seed, epoch=epoch)  # type: ignore[arg-type]
        mixture = stream_em(mixture, batches, weight_rate=args.weight_rate)
    return mixture, time.perf_counter() - started


def run(args: argparse.Namespace, directory: Path) -> Result:
    """Build the corpora under ``directory``, fit both models, score the held-out corpus."""
    torch.set_num_threads(args.threads)
    vocab, _, heldout_labels = build_corpora(directory, args)
    train, heldout = open_corpus(directory / "train"), open_corpus(directory / "heldout")
    table = CategoricalEmbedding(vocab, args.d_model, seed=args.seed)
    experts = [expert(vocab, args, args.d_model, seed, table) for seed in (1, 2)]
    mixture_params = parameter_count(experts)
    width = args.n_head
    while parameter_count([expert(vocab, args, width, 3, None)]) < mixture_params:
        width += args.n_head
    single_leaf = expert(vocab, args, width, 3, None)
    mixture, mixture_seconds = fit(MixtureDistribution(experts, [0.5, 0.5]), train, args)
    single, single_seconds = fit(MixtureDistribution([single_leaf], [1.0]), train, args)
    docs = [heldout[i] for i in range(len(heldout))]
    tokens = sum(len(doc) - 1 for doc in docs)
    assigned = mixture.posterior(docs).argmax(axis=1)
    agree = float(np.mean(assigned == heldout_labels))
    return Result(
        vocab=vocab,
        purity=max(agree, 1.0 - agree),
        mixture_nats=-math.fsum(mixture.seq_log_density(docs).tolist()) / tokens,
        single_nats=-math.fsum(single.seq_log_density(docs).tolist()) / tokens,
        mixture_params=mixture_params,
        single_params=parameter_count([single_leaf]),
        mixture_seconds=mixture_seconds,
        single_seconds=single_seconds,
        heldout_tokens=tokens,
        weights=tuple(float(w) for w in mixture.weights),
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--source", choices=("markov", "sample-src"), default="markov")
    parser.add_argument("--quick", action="store_true", help="CI form: small and fast")
    parser.add_argument(
        "--docs", type=int, default=None, help="training documents per source (markov)"
    )
    parser.add_argument(
        "--heldout", type=int, default=None, help="held-out documents per source (markov)"
    )
    parser.add_argument(
        "--length", type=int, default=None, help="tokens per document / bytes per chunk"
    )
    parser.add_argument("--vocab", type=int, default=16, help="markov vocabulary")
    parser.add_argument("--d-model", dest="d_model", type=int, default=None)
    parser.add_argument("--n-layer", dest="n_layer", type=int, default=1)
    parser.add_argument("--n-head", dest="n_head", type=int, default=2)
    parser.add_argument("--block", type=int, default=16)
    parser.add_argument("--batch", type=int, default=None, help="documents per EM step")
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--weight-rate", dest="weight_rate", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    quick = {"docs": 160, "heldout": 100, "length": 48, "epochs": 3, "d_model": 16, "batch": 16}
    full = {**quick, "docs": 1000, "heldout": 250, "length": 96, "epochs": 4}
    if args.source == "sample-src":
        # a 4:1 train/held-out split of the chunks; bytes need a wider model
        full = {"docs": 4, "heldout": 1, "length": 256, "epochs": 16, "d_model": 32, "batch": 8}
        quick = {**full, "epochs": 3}
    for name, value in (quick if args.quick else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        result = run(args, Path(tmp))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"source {args.source}: {vars(args)}")
    print(f"vocab {result.vocab}, held-out tokens {result.heldout_tokens}")
    print(f"assignment purity (held-out documents): {result.purity:.4f} (target >= 0.95)")
    print(
        f"2-expert mixture, shared embedding: {result.mixture_nats:.4f} nats/token, {result.mixture_params} parameters, {result.mixture_seconds:.1f} s, weights {[round(w, 3) for w in result.weights]}"
    )
    print(
        f"single leaf (>= same size): {result.single_nats:.4f} nats/token, {result.single_params} parameters, {result.single_seconds:.1f} s"
    )
    print(
        f"mixture - single: {result.mixture_nats - result.single_nats:+.4f} nats/token (target < 0)"
    )
    print(f"peak RSS {peak:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
