"""Benchmark: training tokens/s of ``stream_fit`` against a plain PyTorch loop.

Both sides train the same model (fresh copies of one seeded initialisation) with the
same AdamW and the same pre-generated batches; the plain loop is the textbook
``loss.backward(); optimizer.step()``. Runs alternate (ours/baseline, then
baseline/ours) within one process so that load from other processes hits both, and
the report uses medians. Target: stream_fit overhead <= 10% (ratio >= 0.90).

    python -m tools.bench_leaf            # defaults of issue #8
    python -m tools.bench_leaf --quick    # smoke run, a few seconds
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from mixle.models import CausalTransformerLM, StreamingTransformer, stream_fit
from tools._memory import peak_rss_mb, rss_anon_mb

Batch = tuple[np.ndarray, ...]


def make_batches(args: argparse.Namespace, shape: str) -> list[Batch]:
    rng = np.random.default_rng(0)
    stream = rng.integers(0, args.vocab, args.batch * args.block * args.steps + 1)
    batches: list[Batch] = []
    for k in range(args.steps):
        start = k * args.batch * args.block
        rows = np.stack(
            [
                stream[start + i * args.block : start + (i + 1) * args.block + 1]
                for i in range(args.batch)
            ]
        )
        if shape == "dense":
            batches.append((rows[:, :-1], rows[:, 1:], np.ones((args.batch, args.block), bool)))
        else:
            batches.append((rows[:, :-1], rows[:, -1]))
    return batches


def plain_loop(module: torch.nn.Module, batches: list[Batch], lr: float, device: str) -> None:
    optimizer = torch.optim.AdamW(module.parameters(), lr=lr)
    for batch in batches:
        ctx = torch.from_numpy(batch[0]).to(device)
        if len(batch) == 2:
            logits = module(ctx, last_only=True)
            loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(batch[1]).to(device))
        else:
            logits = module(ctx)
            mask = torch.from_numpy(batch[2]).to(device, logits.dtype).reshape(-1)
            nll = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]),
                torch.from_numpy(batch[1]).to(device).reshape(-1),
                reduction="none",
            )
            loss = (nll * mask).sum() / mask.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def ours(module: torch.nn.Module, batches: list[Batch], lr: float, device: str) -> None:
    leaf = stream_fit(StreamingTransformer(module, device, lr=lr), batches, report_every=0)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    del leaf


def targets_in(batches: list[Batch]) -> int:
    return sum(int(b[2].sum()) if len(b) == 3 else b[0].shape[0] for b in batches)


def run_shape(args: argparse.Namespace, shape: str) -> dict[str, Any]:
    base = CausalTransformerLM(
        args.vocab, d_model=args.d_model, n_layer=args.n_layer, n_head=args.n_head, block=args.block
    ).to(args.device)
    batches = make_batches(args, shape)
    tokens = targets_in(batches)
    sides: dict[str, Callable[[torch.nn.Module, list[Batch], float, str], None]] = {
        "baseline": plain_loop,
        "stream_fit": ours,
    }
    for fn in sides.values():  # warm-up: allocator, kernels, lazy init
        fn(copy.deepcopy(base), batches[: args.warmup], args.lr, args.device)
    times: dict[str, list[float]] = {name: [] for name in sides}
    cpu: dict[str, list[float]] = {name: [] for name in sides}
    for r in range(args.rounds):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        for name in order:
            module = copy.deepcopy(base)
            started, cpu_started = time.perf_counter(), time.process_time()
            sides[name](module, batches, args.lr, args.device)
            times[name].append(time.perf_counter() - started)
            cpu[name].append(time.process_time() - cpu_started)
    ours_tps = [tokens / t for t in times["stream_fit"]]
    base_tps = [tokens / t for t in times["baseline"]]
    per_round = [o / b for o, b in zip(ours_tps, base_tps, strict=True)]
    cpu_ratio = statistics.median(
        b / o for b, o in zip(cpu["baseline"], cpu["stream_fit"], strict=True)
    )
    return {
        "shape": shape,
        "tokens_per_run": tokens,
        "ours": statistics.median(ours_tps),
        "baseline": statistics.median(base_tps),
        "ratio": statistics.median(per_round),
        "ratios": per_round,
        "cpu_ratio": cpu_ratio,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--n-layer", type=int, default=4)
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--block", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=8, help="micro-batches per timed run")
    parser.add_argument("--rounds", type=int, default=21, help="timed runs per side (interleaved)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--shape", choices=["dense", "pairs", "both"], default="both")
    parser.add_argument("--quick", action="store_true", help="tiny model, few steps: a smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.d_model, args.n_layer, args.block, args.batch = 32, 2, 16, 8
        args.steps, args.rounds, args.warmup = 5, 3, 1
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(
        f"model vocab={args.vocab} d_model={args.d_model} n_layer={args.n_layer} "
        f"n_head={args.n_head} block={args.block}; batch={args.batch}; {args.steps} steps x "
        f"{args.rounds} interleaved rounds; device={args.device}; threads={args.threads}"
    )
    shapes = ["dense", "pairs"] if args.shape == "both" else [args.shape]
    worst = 1.0
    for shape in shapes:
        result = run_shape(args, shape)
        worst = min(worst, result["ratio"])
        label = "(context, targets, loss_mask)" if shape == "dense" else "(context, next_tokens)"
        print(
            f"{shape:5s} {label}: stream_fit {result['ours']:,.0f} targets/s | plain loop "
            f"{result['baseline']:,.0f} targets/s | ratio {result['ratio']:.3f} "
            f"(overhead {100 * (1 - result['ratio']):+.1f}%) | CPU-time ratio "
            f"{result['cpu_ratio']:.3f} | per-round wall ratios "
            + " ".join(f"{r:.2f}" for r in result["ratios"])
        )
    print(f"peak RSS {peak_rss_mb():.0f} MiB, RssAnon now {rss_anon_mb():.0f} MiB")
    met = worst >= 0.90
    print(f"target overhead <= 10%: {'met' if met else 'NOT met'} (worst median ratio {worst:.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
